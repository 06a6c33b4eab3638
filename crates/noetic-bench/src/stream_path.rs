//! The providers' stream parsing with many tool calls: a synthetic SSE body, cut into 16 KiB chunks as an HTTP body
//! arrives, through the same framer (`noetic-http`) and accumulator a provider's `stream` runs. Building the body
//! and cutting it is set-up, not measured; the figure is the parse, until `Done` holds every call.

use std::convert::Infallible;
use std::time::Instant;

use futures::{Stream, StreamExt};
use noetic::model::StreamDelta;
use noetic::prelude::NoeticError;

use crate::BenchResult;

/// The size of the chunks the body is fed in.
const CHUNK: usize = 16 * 1024;

/// An OpenAI chat-completions stream asking for `calls` tool calls, one chunk per call (its id, name and
/// arguments in one piece, each at its own `index`), as a model answering with many parallel calls sends them.
/// 64k calls make about 9 MiB, under the 32 MiB body cap.
fn openai_body(calls: usize) -> Vec<u8> {
    let mut body = String::with_capacity(calls * 150);
    for k in 0..calls {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{k},\"id\":\"call_{k}\",\
             \"type\":\"function\",\"function\":{{\"name\":\"noop\",\"arguments\":\"{{\\\"n\\\":{k}}}\"}}}}]}}}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n");
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

/// An Anthropic Messages stream with `calls` tool-use blocks, every block started before any of them gets its
/// arguments or its stop (each event names an earlier block: the block lookup's worst case).
fn anthropic_body(calls: usize) -> Vec<u8> {
    let mut body = String::with_capacity(calls * 300);
    body.push_str(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-bench\",\
         \"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
    );
    for k in 0..calls {
        body.push_str(&format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{k},\"content_block\":\
             {{\"type\":\"tool_use\",\"id\":\"toolu_{k}\",\"name\":\"noop\",\"input\":{{}}}}}}\n\n"
        ));
    }
    for k in 0..calls {
        body.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{k},\"delta\":\
             {{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"n\\\":{k}}}\"}}}}\n\n"
        ));
    }
    for k in 0..calls {
        body.push_str(&format!(
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{k}}}\n\n"
        ));
    }
    body.push_str(
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\
         \"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    body.into_bytes()
}

/// `body` as owned chunks, as an HTTP body delivers them.
fn chunks(body: &[u8]) -> impl Stream<Item = Result<Vec<u8>, Infallible>> + Send + 'static {
    let chunks: Vec<Vec<u8>> = body.chunks(CHUNK).map(<[u8]>::to_vec).collect();
    futures::stream::iter(chunks.into_iter().map(Ok))
}

/// Milliseconds `deltas` took to end in `Done` with `calls` tool calls.
async fn timed(
    calls: usize,
    deltas: impl Stream<Item = Result<StreamDelta, NoeticError>>,
    start: Instant,
) -> BenchResult<f64> {
    let mut deltas = std::pin::pin!(deltas);
    while let Some(delta) = deltas.next().await {
        if let StreamDelta::Done { response } = delta? {
            let elapsed = start.elapsed().as_secs_f64() * 1e3;
            let got = response.tool_calls_iter().count();
            return if got == calls { Ok(elapsed) } else { Err(format!("{got} tool calls of {calls}").into()) };
        }
    }
    Err("the stream ended without Done".into())
}

/// Milliseconds to parse an OpenAI stream of `calls` tool calls (see [`openai_body`]).
pub async fn openai_tool_calls_ms(calls: usize) -> BenchResult<f64> {
    let bytes = chunks(&openai_body(calls));
    let start = Instant::now();
    timed(calls, noetic_openai::wire::sse_deltas(bytes), start).await
}

/// Milliseconds to parse an Anthropic stream of `calls` tool-use blocks (see [`anthropic_body`]).
pub async fn anthropic_tool_calls_ms(calls: usize) -> BenchResult<f64> {
    let bytes = chunks(&anthropic_body(calls));
    let start = Instant::now();
    timed(calls, noetic_anthropic::stream_deltas(bytes), start).await
}
