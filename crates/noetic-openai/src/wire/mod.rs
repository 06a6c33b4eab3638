//! The chat-completions wire format as pure functions — no I/O, so each piece is tested without sockets.
//!
//! * [`request_body`] — [`ModelRequest`](noetic_core::model::ModelRequest) → JSON body.
//! * [`encode_body`] — the same as shared byte chunks, with server adjustments, linear in what is new and sharing
//!   what an earlier request encoded ([`HistoryCache`]).
//! * [`parse_response`] — non-streaming body → [`ModelResponse`](noetic_core::model::ModelResponse);
//!   [`parse_response_keeping`] also keeps the calls' arguments as the answer escaped them, for the next request.
//! * [`StreamAccumulator`] — SSE `data:` payloads → [`StreamDelta`](noetic_core::model::StreamDelta)s.
//! * [`sse_deltas`] — an SSE byte stream, split anyhow → deltas (framed by `noetic-http`, linear in the input).

mod answer;
mod encode;
mod escaped;
mod message;
mod request;
mod response;
mod sse;
mod stream;

pub use encode::{BodyOptions, HistoryCache, encode_body};
pub use request::request_body;
pub(crate) use response::{ProviderError, quote};
pub use response::{parse_response, parse_response_keeping};
pub use sse::{sse_deltas, sse_deltas_limited};
pub use stream::{StreamAccumulator, replay};
