//! An SSE byte stream → [`StreamDelta`]s, through `eventsource-stream` and the [`StreamAccumulator`].

use std::collections::VecDeque;
use std::error::Error as StdError;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use noetic::NoeticError;
use noetic::model::StreamDelta;

use super::StreamAccumulator;

/// Parses an SSE byte stream (however it is split into chunks) into deltas, ending with [`StreamDelta::Done`] or
/// an error. This is the path the client's `stream` uses on the HTTP body; tests feed it bytes directly.
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
pub fn sse_deltas<S, B, E>(bytes: S) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: StdError + Send + 'static,
{
    struct State<T> {
        events: T,
        accumulator: StreamAccumulator,
        queue: VecDeque<Result<StreamDelta, NoeticError>>,
        ended: bool,
    }
    let state = State {
        events: Box::pin(bytes.eventsource()),
        accumulator: StreamAccumulator::new(),
        queue: VecDeque::new(),
        ended: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(next) = st.queue.pop_front() {
                return Some((next, st));
            }
            if st.ended {
                return None;
            }
            match st.events.next().await {
                Some(Ok(event)) => match st.accumulator.push(&event.data) {
                    Ok(deltas) => {
                        st.queue.extend(deltas.into_iter().map(Ok));
                        st.ended = st.accumulator.is_done();
                    }
                    Err(e) => {
                        st.queue.push_back(Err(e));
                        st.ended = true;
                    }
                },
                Some(Err(e)) => {
                    st.queue.push_back(Err(stream_failed(&e)));
                    st.ended = true;
                }
                None => {
                    st.ended = true;
                    match st.accumulator.finish() {
                        Ok(Some(done)) => st.queue.push_back(Ok(done)),
                        Ok(None) => {}
                        Err(e) => st.queue.push_back(Err(e)),
                    }
                }
            }
        }
    })
}

/// A failure of the byte stream or of SSE decoding after the response began.
fn stream_failed<E: StdError>(error: &EventStreamError<E>) -> NoeticError {
    let what = match error {
        EventStreamError::Transport(e) => format!("the connection failed mid-stream: {}", error_chain(e)),
        EventStreamError::Utf8(e) => format!("the stream is not valid UTF-8: {e}"),
        EventStreamError::Parser(e) => format!("the stream is not valid server-sent events: {e}"),
    };
    NoeticError::ModelFailed {
        message: format!(
            "{what}; the partial answer was discarded and not retried (part of it may already have been delivered) \
             — call again"
        ),
        status: None,
        raw: None,
        retryable: false,
    }
}

/// An error and its sources, joined by `: ` (reqwest's own message hides the cause).
pub(crate) fn error_chain(error: &dyn StdError) -> String {
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
