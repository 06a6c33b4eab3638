//! # noetic-anthropic — Anthropic Messages API provider for noetic
//!
//! [`AnthropicModel`] implements [`noetic_core::model::Model`] over Anthropic's Messages API (`POST /v1/messages`),
//! non-streamed ([`Model::call`](noetic_core::model::Model::call)) and streamed
//! ([`Model::stream`](noetic_core::model::Model::stream)), with tool calls, usage, retries and typed errors.
//!
//! The crate is two layers:
//!
//! * **Pure translation**, no I/O: [`request_body`] (request → JSON body), [`parse_response`] (JSON body →
//!   [`ModelResponse`](noetic_core::model::ModelResponse)), [`StreamAccumulator`] and [`stream_deltas`] (server-sent
//!   events → [`StreamDelta`](noetic_core::model::StreamDelta)s, from any stream of byte chunks), and the error mapping
//!   ([`error_from_status`], [`error_from_body`]; `Retry-After` is read by `noetic-http`'s
//!   [`parse_retry_after`](noetic_http::parse_retry_after), shared with the OpenAI-compatible provider).
//! * **Glue**: [`AnthropicModel`] hands these functions to `noetic-http`'s transport and driver (shared with the
//!   OpenAI-compatible provider), which send the body with `reqwest` (rustls) with the `x-api-key` and
//!   `anthropic-version: 2023-06-01` headers (and any [`AnthropicConfig::header`]), retry, and read bodies.
//!
//! ## Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use noetic::prelude::*;
//! use noetic_anthropic::{AnthropicConfig, AnthropicModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Reads ANTHROPIC_API_KEY and, if set, ANTHROPIC_BASE_URL.
//! let model = AnthropicModel::new(AnthropicConfig::from_env())?;
//!
//! // OpenRouter-style ids work: the `anthropic/` prefix is removed.
//! let runtime = Runtime::builder()
//!     .model(Arc::new(model))
//!     .model_id("anthropic/claude-sonnet-4-5")
//!     .instructions("You are a concise assistant.")
//!     .build()?;
//! let answer = runtime.session("user-42").send("Name three prime numbers.").await?.await?;
//! println!("{answer}");
//! # Ok(())
//! # }
//! ```
//!
//! ## Decisions
//!
//! * **Model ids.** A leading `anthropic/` is stripped ([`model_id`]), so `anthropic/claude-sonnet-4-5` works
//!   here and on OpenRouter. [`AnthropicConfig::model_override`] forces one model for every request, for steps or
//!   steering rules that name another provider's model.
//! * **Conversation shape.** See [`request_body`]: instructions and leading system/developer items form the
//!   `system` prompt; later developer messages travel as user text starting with [`DEVELOPER_PREFIX`]; adjacent
//!   same-role messages are merged; malformed tool-call arguments are sent as `{"_raw": "..."}`; `max_tokens`
//!   defaults to [`DEFAULT_MAX_TOKENS`]; structured output is requested by a system-prompt instruction.
//! * **Usage.** `input_tokens` counts all prompt tokens, including cache reads and writes; `cached_tokens` counts
//!   cache reads (see [`usage`]).
//! * **Retries** (default [`DEFAULT_RETRY`]: 3 attempts, exponential from 500 ms) cover 429 (honouring
//!   `retry-after-ms` / `Retry-After`, believed up to a day), 529, 5xx, 408, 409, timeouts, connection failures and retryable error
//!   objects — only before a streamed response has begun. Once a stream has started, every error is returned
//!   as it is and marked not retryable, because part of the answer may already have been used.
//! * **Timeouts.** [`AnthropicConfig::timeout`] bounds a whole non-streamed attempt, and for a stream the wait for
//!   the response to begin (its first body byte); [`AnthropicConfig::idle_timeout`] (60 s) bounds every gap between
//!   chunks of a stream. A stall before the first body byte is retried like a failed call.
//! * **Limits.** [`AnthropicConfig::max_body_bytes`] (32 MiB) caps every body — a response, an error body, a whole
//!   stream — which is read once; over the cap is a non-retryable error naming the setting.
//! * **Shared toolkit.** The configuration's common settings ([`noetic_http::HttpConfig`]), the transport, the
//!   status → error skeleton, retries, SSE framing (linear in the input) and the stream driver, and body caps come
//!   from `noetic-http`, shared with the OpenAI-compatible provider.
//! * **Cancellation** is by drop: dropping the future or the stream closes the connection. Nothing is spawned.

mod client;
mod config;
mod encode;
mod error;
mod request;
mod response;
mod sse;
mod stream;

pub use client::AnthropicModel;
pub use config::{
    ANTHROPIC_VERSION, AnthropicConfig, BASE_URL_VAR, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT, DEFAULT_RETRY,
    DEFAULT_TIMEOUT,
};
pub use encode::{HistoryCache, Prefix, encode_body};
pub use error::{API_KEY_VAR, error_from_body, error_from_status};
pub use request::{DEFAULT_MAX_TOKENS, DEVELOPER_PREFIX, SYSTEM_PREFIX, model_id, request_body};
pub use response::{parse_response, usage};
pub use sse::{stream_deltas, stream_deltas_limited};
pub use stream::StreamAccumulator;
