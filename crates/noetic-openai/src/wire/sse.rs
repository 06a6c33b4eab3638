//! An SSE byte stream → [`StreamDelta`]s: `noetic-http`'s framer and stream driver, fed by the
//! [`StreamAccumulator`].

use futures::Stream;
use noetic_core::NoeticError;
use noetic_core::model::StreamDelta;
use noetic_http::{ByteChunks, DEFAULT_MAX_BODY_BYTES, EventDecoder};

use super::StreamAccumulator;

/// Parses an SSE byte stream (however it is split into chunks) into deltas, ending with [`StreamDelta::Done`] or
/// an error. The client's `stream` runs the same translation on the HTTP body (with its own limits); tests feed it
/// bytes directly. One event may be up to [`DEFAULT_MAX_BODY_BYTES`] long (see [`sse_deltas_limited`]).
///
/// After `[DONE]` or an error nothing more is read. A transport error in the middle becomes a non-retryable
/// [`NoeticError::ModelFailed`]: part of the answer may have been delivered, and a retry would repeat it.
///
/// ```
/// use futures::StreamExt;
/// use noetic::model::StreamDelta;
///
/// # futures::executor::block_on(async {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let chunks = futures::stream::iter(sse.as_bytes().chunks(7).map(Ok::<_, std::io::Error>));
/// let deltas: Vec<_> = noetic_openai::wire::sse_deltas(chunks).collect().await;
/// assert!(matches!(deltas.last(), Some(Ok(StreamDelta::Done { response })) if response.text_output() == "Hi"));
/// # });
/// ```
pub fn sse_deltas(bytes: impl ByteChunks) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static {
    sse_deltas_limited(bytes, DEFAULT_MAX_BODY_BYTES)
}

/// [`sse_deltas`] with a limit on one event: an event longer than `max_event_bytes` ends the stream with a
/// non-retryable [`NoeticError::ModelFailed`] naming the limit, so a server cannot make the parser hold an
/// unbounded event.
pub fn sse_deltas_limited(
    bytes: impl ByteChunks,
    max_event_bytes: usize,
) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static {
    noetic_http::sse_deltas(bytes, max_event_bytes, StreamAccumulator::new())
}

impl EventDecoder for StreamAccumulator {
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        StreamAccumulator::push(self, data)
    }

    fn is_done(&self) -> bool {
        StreamAccumulator::is_done(self)
    }

    fn finish(&mut self) -> Result<Option<StreamDelta>, NoeticError> {
        StreamAccumulator::finish(self)
    }

    fn mid_stream(what: String) -> NoeticError {
        mid_stream(what)
    }
}

/// A failure after the response began, described by `what`: never retried, since part of the answer may already
/// have been delivered.
fn mid_stream(what: String) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!(
            "{what}; the partial answer was discarded and not retried (part of it may already have been delivered) \
             — call again"
        ),
        status: None,
        raw: None,
        retryable: false,
        source: None,
    }
}
