//! The stream driver: server-sent events → a provider's [`EventDecoder`] → [`StreamDelta`]s, one loop for every
//! provider (each brings only its decoder, the pure function of its wire format).

use std::collections::VecDeque;
use std::fmt::Display;

use futures::{Stream, StreamExt};
use noetic_core::NoeticError;
use noetic_core::model::StreamDelta;

use crate::sse::{SseEvent, SseStreamError, sse_events};

/// A provider's translation of its events' `data:` payloads into deltas: the only part of a stream that differs
/// between providers.
pub trait EventDecoder: Send + 'static {
    /// Feeds one event's data and returns the deltas it produced; an error ends the stream.
    ///
    /// # Errors
    ///
    /// The provider's error for an error event or a payload it cannot read.
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError>;

    /// True once the final event arrived: the driver then asks [`EventDecoder::finish`] for the last delta and
    /// reads no further.
    fn is_done(&self) -> bool;

    /// The stream ended (its final event arrived, or the body ended): the [`StreamDelta::Done`] still owed, if any.
    ///
    /// # Errors
    ///
    /// The provider's error for a body cut short before the model finished.
    fn finish(&mut self) -> Result<Option<StreamDelta>, NoeticError>;

    /// The provider's non-retryable error for a stream that failed after it began (the connection broke, an event
    /// was over the cap), given what happened.
    fn mid_stream(what: String) -> NoeticError;
}

/// A body as it arrives: any stream of byte chunks, cut anywhere.
pub trait ByteChunks: Stream<Item = Result<Self::Chunk, Self::Error>> + Send + 'static {
    /// One chunk.
    type Chunk: AsRef<[u8]> + Send + 'static;
    /// What the stream fails with.
    type Error: Display + Send + 'static;
}

impl<S, B, E> ByteChunks for S
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Display + Send + 'static,
{
    type Chunk = B;
    type Error = E;
}

/// Framed events (or the error that ended them) → deltas through `decoder`. Errors pass through as they are; the
/// stream ends after the decoder is done or after the first error.
pub fn decode_events<S, D>(
    events: S,
    decoder: D,
) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static
where
    S: Stream<Item = Result<SseEvent, NoeticError>> + Send + 'static,
    D: EventDecoder,
{
    struct State<T, D> {
        events: T,
        decoder: D,
        queue: VecDeque<Result<StreamDelta, NoeticError>>,
        ended: bool,
    }
    let state = State { events: Box::pin(events), decoder, queue: VecDeque::new(), ended: false };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(next) = st.queue.pop_front() {
                return Some((next, st));
            }
            if st.ended {
                return None;
            }
            let (pushed, body_ended) = match st.events.next().await {
                Some(Ok(event)) => (st.decoder.push(&event.data), false),
                Some(Err(e)) => (Err(e), false),
                None => (Ok(Vec::new()), true),
            };
            match pushed {
                Ok(deltas) => st.queue.extend(deltas.into_iter().map(Ok)),
                Err(e) => {
                    st.queue.push_back(Err(e));
                    st.ended = true;
                    continue;
                }
            }
            // The final event, or the end of the body: what is still owed (or why the body was cut short).
            if body_ended || st.decoder.is_done() {
                st.ended = true;
                match st.decoder.finish() {
                    Ok(done) => st.queue.extend(done.map(Ok)),
                    Err(e) => st.queue.push_back(Err(e)),
                }
            }
        }
    })
}

/// An SSE byte stream (split anyhow) → deltas through `decoder`, one event at most `max_event_bytes` long. A
/// transport or framing error ends the stream with the decoder's [`EventDecoder::mid_stream`] error.
pub fn sse_deltas<D: EventDecoder>(
    bytes: impl ByteChunks,
    max_event_bytes: usize,
    decoder: D,
) -> impl Stream<Item = Result<StreamDelta, NoeticError>> + Send + 'static {
    let events = sse_events(bytes, max_event_bytes).map(|event| {
        event.map_err(|e| match e {
            SseStreamError::Transport(e) => D::mid_stream(format!("the connection failed mid-stream: {e}")),
            SseStreamError::Sse(e) => D::mid_stream(e.to_string()),
        })
    });
    decode_events(events, decoder)
}
