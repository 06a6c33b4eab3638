//! # noetic-http — the toolkit noetic's HTTP providers share
//!
//! Pure pieces both `noetic-openai` and `noetic-anthropic` use, written once:
//!
//! * [`SseFramer`] / [`sse_events`] — server-sent events framing per the WHATWG rules, linear in the input
//!   whatever the chunking, with a cap on one event's size.
//! * [`read_body`] / [`guard_body`] — response bodies with a size cap ([`DEFAULT_MAX_BODY_BYTES`]) and an idle
//!   limit between chunks.
//! * [`with_retries`] / [`retry_delay`] — retries with backoff and `Retry-After`, before anything reached the
//!   caller: the core's one retry loop (also [`RetryModel`](noetic_core::model::RetryModel)'s), re-exported.
//! * [`parse_retry_after`] — `retry-after-ms` / `Retry-After` (seconds or an HTTP date), clamped to
//!   [`MAX_RETRY_AFTER`], one parser for every provider.
//! * [`error_chain`] — an error and its sources in one line.
//! * [`HttpConfig`] / [`http_config_methods!`] — the settings every provider shares (base URL, key, headers,
//!   timeouts, body cap, retries, model override) and their builder methods, written once.
//! * [`Transport`] — the reqwest client built from them, a body sent as shared chunks, bodies read within the
//!   cap, reqwest's failures as typed errors; [`HttpFailure`] / [`StatusClass`] — the status → error skeleton.
//! * [`HttpDriver`] — `call` and `stream` of a provider's [`WireFormat`] over the transport, retried once, here;
//!   [`EventDecoder`] / [`decode_events`] / [`sse_deltas`] — the one stream driver, fed by a provider's decoder.
//! * [`LogCache`] — what a provider encoded of each item log, bounded, so requests encode only what is new.
//! * [`ChunkedBody`], [`ChunkLog`], [`PartCache`] — request bodies as shared chunks: constant parts encoded once,
//!   a log's encoded messages kept as a few chunks, handed to the transport without copying them into one buffer.
//! * [`write_json_str`] — a JSON string written straight into bytes, escaped as `serde_json` does, eight bytes at
//!   a time.
//!
//! A provider is then its pure wire functions (body encoding, [`WireFormat`], an [`EventDecoder`]) and a few lines
//! of glue; everything but the transport works on streams of byte chunks, so it is tested without a server.

mod body;
mod chunks;
mod config;
mod decode;
mod driver;
mod json;
mod log_cache;
mod retry_after;
mod sse;
mod status;
mod transport;

pub use body::{BodyError, error_body_text, first_chunk, guard_body, read_body, too_large};
pub use chunks::{ChunkBody, ChunkLog, ChunkedBody, PART_CACHE_ENTRIES, PartCache, is_key_text, key_text};
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_RETRY, DEFAULT_TIMEOUT, HttpConfig, non_empty_var,
};
pub use decode::{ByteChunks, EventDecoder, decode_events, sse_deltas};
pub use driver::{HttpDriver, WireFormat};
pub use json::{find_json_escape, write_json_str};
pub use log_cache::{BodyCache, IdHasher, IdMap, LOG_CACHE_BYTES, LOG_CACHE_ENTRIES, LogCache, Weighed};
pub use noetic_core::model::{DEFAULT_MAX_DELAY, retry_delay, with_retries};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use sse::{SseError, SseEvent, SseFramer, SseStreamError, sse_events};
pub use status::{HttpFailure, StatusClass};
pub use transport::{Auth, Names, Transport};

/// The default cap on a response body, and on one server-sent event: 32 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// A byte count for messages: `32 MiB (33554432 bytes)`, or `1000 bytes` when it is not a whole KiB or MiB.
pub fn describe_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB ({bytes} bytes)", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB ({bytes} bytes)", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// An error and its sources joined by `: `, skipping a cause whose text is already included (reqwest's own
/// message hides the cause; some wrappers repeat it).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_are_described_in_the_largest_whole_unit() {
        assert_eq!(describe_bytes(DEFAULT_MAX_BODY_BYTES), "32 MiB (33554432 bytes)");
        assert_eq!(describe_bytes(64 * 1024), "64 KiB (65536 bytes)");
        assert_eq!(describe_bytes(1000), "1000 bytes");
        assert_eq!(describe_bytes(0), "0 bytes");
    }
}
