//! SSE framing: any stream of byte chunks → server-sent events → [`StreamDelta`]s via [`StreamAccumulator`].
//!
//! Free of sockets: the client feeds it the HTTP body; tests feed it fixture bytes cut at arbitrary points.

use std::collections::VecDeque;
use std::fmt::Display;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use noetic::NoeticError;
use noetic::model::StreamDelta;

use crate::error::error_chain;
use crate::stream::StreamAccumulator;

/// Streaming state driven by [`stream_deltas`].
struct State<S> {
    events: S,
    accumulator: Option<StreamAccumulator>,
    pending: VecDeque<StreamDelta>,
}

/// Parses the SSE body of a streamed Messages response into deltas, ending with [`StreamDelta::Done`].
///
/// `bytes` is any stream of byte chunks, cut anywhere (even inside a UTF-8 character or a line break); the
/// result does not depend on where. The stream ends after `Done` or after the first error: an `error` event, a
/// transport error, invalid SSE or JSON, or a body that ends before `message_stop`. Errors here are never
/// retryable (see [`StreamAccumulator::push`]).
pub fn stream_deltas<S, B, E>(bytes: S) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Display + Send + 'static,
{
    let state = State {
        events: Box::pin(bytes.eventsource()),
        accumulator: Some(StreamAccumulator::new()),
        pending: VecDeque::new(),
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(delta) = state.pending.pop_front() {
                return Some((Ok(delta), state));
            }
            let accumulator = state.accumulator.as_mut()?;
            let outcome = match state.events.next().await {
                Some(Ok(event)) => accumulator.push(&event.data).map(VecDeque::from),
                Some(Err(e)) => Err(NoeticError::ModelFailed {
                    message: format!(
                        "the Anthropic stream broke after the response had begun ({}); try again",
                        error_chain_display(&e)
                    ),
                    status: None,
                    raw: None,
                    retryable: false,
                }),
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

/// The message of an SSE parsing or transport error.
fn error_chain_display<E: Display>(error: &eventsource_stream::EventStreamError<E>) -> String {
    match error {
        eventsource_stream::EventStreamError::Transport(e) => e.to_string(),
        eventsource_stream::EventStreamError::Utf8(e) => format!("the body is not UTF-8: {}", error_chain(e)),
        eventsource_stream::EventStreamError::Parser(e) => format!("the body is not valid SSE: {e}"),
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
