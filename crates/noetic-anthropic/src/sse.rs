//! SSE framing: any stream of byte chunks → server-sent events (`noetic-http`'s linear framer) → [`StreamDelta`]s
//! via [`StreamAccumulator`].
//!
//! Free of sockets: the client feeds it the HTTP body; tests feed it fixture bytes cut at arbitrary points.

use std::collections::VecDeque;
use std::fmt::Display;

use futures::{Stream, StreamExt};
use noetic::NoeticError;
use noetic::model::StreamDelta;
use noetic_http::{DEFAULT_MAX_BODY_BYTES, SseEvent, sse_events};

use crate::stream::StreamAccumulator;

/// Streaming state driven by [`event_deltas`].
struct State<S> {
    events: S,
    accumulator: Option<StreamAccumulator>,
    pending: VecDeque<StreamDelta>,
}

/// Parses the SSE body of a streamed Messages response into deltas, ending with [`StreamDelta::Done`].
///
/// `bytes` is any stream of byte chunks, cut anywhere (even inside a UTF-8 character or a line break); the
/// result does not depend on where. The stream ends after `Done` or after the first error: an `error` event, a
/// transport error, invalid JSON, an event over [`DEFAULT_MAX_BODY_BYTES`] (see [`stream_deltas_limited`]), or a
/// body that ends before `message_stop`. Errors here are never retryable (see [`StreamAccumulator::push`]).
pub fn stream_deltas<S, B, E>(bytes: S) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Display + Send + 'static,
{
    stream_deltas_limited(bytes, DEFAULT_MAX_BODY_BYTES)
}

/// [`stream_deltas`] with a limit on one event: an event longer than `max_event_bytes` ends the stream with a
/// non-retryable [`NoeticError::ModelFailed`] naming the limit, so a server cannot make the parser hold an
/// unbounded event.
pub fn stream_deltas_limited<S, B, E>(
    bytes: S,
    max_event_bytes: usize,
) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Display + Send + 'static,
{
    event_deltas(sse_events(bytes, max_event_bytes).map(|event| event.map_err(|e| mid_stream(&e))))
}

/// Framed events (or the error that ended them) → deltas. Errors pass through as they are.
pub(crate) fn event_deltas<S>(events: S) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<SseEvent, NoeticError>> + Send + 'static,
{
    let state =
        State { events: Box::pin(events), accumulator: Some(StreamAccumulator::new()), pending: VecDeque::new() };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(delta) = state.pending.pop_front() {
                return Some((Ok(delta), state));
            }
            let accumulator = state.accumulator.as_mut()?;
            let outcome = match state.events.next().await {
                Some(Ok(event)) => accumulator.push(&event.data).map(VecDeque::from),
                Some(Err(e)) => Err(e),
                None => match state.accumulator.take().map(StreamAccumulator::finish) {
                    Some(Ok(response)) => Ok(VecDeque::from([StreamDelta::Done { response }])),
                    Some(Err(e)) => Err(e),
                    None => return None,
                },
            };
            match outcome {
                Ok(deltas) => {
                    state.pending = deltas;
                    if state.accumulator.as_ref().is_some_and(StreamAccumulator::is_complete) {
                        // message_stop: no need to wait for the connection to close.
                        if let Some(Ok(response)) = state.accumulator.take().map(StreamAccumulator::finish) {
                            state.pending.push_back(StreamDelta::Done { response });
                        }
                    }
                }
                Err(e) => {
                    state.accumulator = None;
                    state.pending.clear();
                    return Some((Err(e), state));
                }
            }
        }
    })
}

/// A failure after the response had begun (never retried: part of the answer may have been passed on).
pub(crate) fn mid_stream(what: &dyn Display) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!("the Anthropic stream broke after the response had begun ({what}); try again"),
        status: None,
        raw: None,
        retryable: false,
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
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
