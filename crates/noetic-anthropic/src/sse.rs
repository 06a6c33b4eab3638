//! SSE framing: any stream of byte chunks → server-sent events (`noetic-http`'s linear framer) → [`StreamDelta`]s
//! via [`StreamAccumulator`].
//!
//! Free of sockets: the client feeds it the HTTP body; tests feed it fixture bytes cut at arbitrary points.

use futures::Stream;
use noetic_core::NoeticError;
use noetic_core::model::StreamDelta;
use noetic_http::{ByteChunks, DEFAULT_MAX_BODY_BYTES, EventDecoder};

use crate::stream::StreamAccumulator;

/// Parses the SSE body of a streamed Messages response into deltas, ending with [`StreamDelta::Done`].
///
/// `bytes` is any stream of byte chunks, cut anywhere (even inside a UTF-8 character or a line break); the
/// result does not depend on where. The stream ends after `Done` or after the first error: an `error` event, a
/// transport error, invalid JSON, an event over [`DEFAULT_MAX_BODY_BYTES`] (see [`stream_deltas_limited`]), or a
/// body that ends before `message_stop`. Errors here are never retryable (see [`StreamAccumulator::push`]).
pub fn stream_deltas(bytes: impl ByteChunks) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static {
    stream_deltas_limited(bytes, DEFAULT_MAX_BODY_BYTES)
}

/// [`stream_deltas`] with a limit on one event: an event longer than `max_event_bytes` ends the stream with a
/// non-retryable [`NoeticError::ModelFailed`] naming the limit, so a server cannot make the parser hold an
/// unbounded event.
pub fn stream_deltas_limited(
    bytes: impl ByteChunks,
    max_event_bytes: usize,
) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static {
    noetic_http::sse_deltas(bytes, max_event_bytes, Decoder::default())
}

/// The [`StreamAccumulator`] as `noetic-http`'s stream driver drives it: until `message_stop` or the end of the
/// body, then once more for the finished response.
#[derive(Default)]
pub(crate) struct Decoder(Option<StreamAccumulator>);

impl EventDecoder for Decoder {
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        self.0.get_or_insert_default().push(data)
    }

    fn is_done(&self) -> bool {
        self.0.as_ref().is_some_and(StreamAccumulator::is_complete)
    }

    fn finish(&mut self) -> Result<Option<StreamDelta>, NoeticError> {
        let accumulator = self.0.take().unwrap_or_default();
        accumulator.finish().map(|response| Some(StreamDelta::Done { response }))
    }

    fn mid_stream(what: String) -> NoeticError {
        mid_stream(what)
    }
}

/// A failure after the response had begun (never retried: part of the answer may have been passed on).
pub(crate) fn mid_stream(what: String) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!("the Anthropic stream broke after the response had begun ({what}); try again"),
        status: None,
        raw: None,
        retryable: false,
        source: None,
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use futures::StreamExt;
    use futures::executor::block_on;

    use super::*;

    #[test]
    fn byte_streams_end_after_done_or_after_the_first_error() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                    data: {\"type\":\"message_stop\"}\n\n";
        let deltas: Vec<_> =
            block_on(stream_deltas(futures::stream::iter([Ok::<_, String>(body.as_bytes().to_vec())])).collect());
        assert!(matches!(deltas.as_slice(), [Ok(StreamDelta::Done { .. })]), "{deltas:?}");
        let broken =
            futures::stream::iter([Ok(b"data: {\"type\":\"message_start\"}\n\n".to_vec()), Err("reset".to_owned())]);
        let deltas: Vec<_> = block_on(stream_deltas(broken).collect());
        match deltas.as_slice() {
            [Err(NoeticError::ModelFailed { message, retryable: false, .. })] => assert!(message.contains("reset")),
            other => panic!("expected one transport error, got {other:?}"),
        }
    }
}
