//! Body caps and idle limits (#13 items 13 and 14), the scenarios every HTTP provider runs
//! (`noetic::testing::limits`): an oversized body is a typed error read once; a stall before the first body byte is
//! retried, a stall later ends the stream.

mod common;

use std::sync::Arc;

use futures::StreamExt;
use noetic::testing::limits::Provider;
use noetic_openai::{OpenAiModel, wire::sse_deltas_limited};

/// OpenAI's chat completions as the scenarios see them.
fn openai() -> Provider {
    Provider {
        config: "OpenAiConfig",
        model: |base, limits| {
            let config = common::config_for(base).max_body_bytes(limits.max_body_bytes);
            Ok(Arc::new(OpenAiModel::new(config.idle_timeout(limits.idle_timeout).timeout(limits.timeout))?))
        },
        request: common::user_request("hi"),
        answer: common::fixture("chat_text.json"),
        answer_text: "The capital of France is Paris.",
        stream: common::fixture("stream_text.sse"),
        start: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        padding: |size| format!(": {}\n\n", "x".repeat(size)),
        retried_status: 503,
        parse: |chunks, limit| {
            let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
            futures::executor::block_on(sse_deltas_limited(bytes, limit).collect())
        },
    }
}

noetic::provider_limit_tests!(openai());
