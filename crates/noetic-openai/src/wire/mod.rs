//! The chat-completions wire format as pure functions — no I/O, so each piece is tested without sockets.
//!
//! * [`request_body`] — [`ModelRequest`](noetic_core::model::ModelRequest) → JSON body.
//! * [`encode_body`] — the same as shared byte chunks, with server adjustments, linear in what is new and sharing
//!   what an earlier request encoded ([`HistoryCache`]).
//! * [`parse_response`] — non-streaming body → [`ModelResponse`](noetic_core::model::ModelResponse).
//! * [`StreamAccumulator`] — SSE `data:` payloads → [`StreamDelta`](noetic_core::model::StreamDelta)s.
//! * [`sse_deltas`] — an SSE byte stream, split anyhow → deltas (framed by `noetic-http`, linear in the input).

mod answer;
mod encode;
mod message;
mod request;
mod response;
mod sse;
mod stream;

pub use encode::{BodyOptions, HistoryCache, encode_body};
pub use request::request_body;
pub use response::parse_response;
pub(crate) use response::{ProviderError, quote};
pub use sse::{sse_deltas, sse_deltas_limited};
pub use stream::{StreamAccumulator, replay};
