//! Body caps and idle limits (#13 items 13 and 14), the scenarios every HTTP provider runs
//! (`noetic::testing::limits`): an oversized body is a typed error read once; a stall before the first body byte is
//! retried, a stall later ends the stream.

mod common;

use std::sync::Arc;

use common::{KEY, fixture, tiny_retry};
use futures::StreamExt;
use noetic::testing::limits::Provider;
use noetic_anthropic::{AnthropicConfig, AnthropicModel, stream_deltas_limited};

/// The first events of a streamed answer, up to a text delta "Hel".
const START: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
);

/// Anthropic's messages as the scenarios see them.
fn anthropic() -> Provider {
    Provider {
        config: "AnthropicConfig",
        model: |base, limits| {
            let config = AnthropicConfig::new(KEY).base_url(base).retry(tiny_retry(3));
            let config = config.max_body_bytes(limits.max_body_bytes).idle_timeout(limits.idle_timeout);
            Ok(Arc::new(AnthropicModel::new(config.timeout(limits.timeout))?))
        },
        request: common::hello(),
        answer: fixture("text_response.json"),
        answer_text: "Oslo is -3.5 °C right now — wrap up warm.",
        stream: fixture("stream_text.sse"),
        start: START,
        padding: |size| format!("event: ping\ndata: {{\"type\":\"ping\",\"pad\":\"{}\"}}\n\n", "x".repeat(size)),
        retried_status: 529,
        parse: |chunks, limit| {
            let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, String>));
            futures::executor::block_on(stream_deltas_limited(bytes, limit).collect())
        },
    }
}

noetic::provider_limit_tests!(anthropic());
