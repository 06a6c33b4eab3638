//! Server-sent events framing, per the WHATWG event-stream rules, in time linear in the input.
//!
//! [`SseFramer`] is push-based and free of I/O: feed it byte chunks cut anywhere, take the events it completes.
//! [`sse_events`] runs it over a stream of chunks.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::DEFAULT_MAX_BODY_BYTES;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The event type: the last `event:` field, or `message` when there was none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id seen so far on the stream (`id:` fields persist across events); empty when none.
    pub id: String,
}

/// Why framing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// One event (its data plus the line being read) grew past the framer's limit.
    EventTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::EventTooLarge { limit } => {
                write!(f, "a server-sent event is larger than the limit of {}", crate::describe_bytes(*limit))
            }
        }
    }
}

impl std::error::Error for SseError {}

/// The lines of the stream: bytes not consumed yet, and how far they were searched for a line end.
#[derive(Debug, Default)]
struct Lines {
    buf: Vec<u8>,
    /// Where the line being read starts.
    start: usize,
    /// `buf[start..scanned]` holds no line end: the next search starts here, so no byte is scanned twice.
    scanned: usize,
    /// The last byte seen was a CR ending a line; an LF right after it belongs to the same line end.
    after_cr: bool,
    /// Whether the leading byte-order mark was dealt with.
    bom_done: bool,
}

/// The event being assembled (the spec's data, event type and last-event-id buffers).
#[derive(Debug, Default)]
struct Builder {
    data: String,
    event: String,
    id: String,
    retry: Option<Duration>,
}

/// A push-based SSE framer.
///
/// It keeps a scan position, so each byte is searched for a line end once however the input is chunked, and it
/// compacts its buffer only when the consumed part is at least half of it: framing is linear in the input. Lines
/// end with LF, CRLF or CR (also a CR at the end of one chunk followed by an LF at the start of the next); a
/// leading UTF-8 byte-order mark is skipped; invalid UTF-8 is replaced by U+FFFD, as the standard says. An event
/// left unterminated when the input ends is not dispatched (the standard's rule), so there is no `finish`.
///
/// ```
/// use noetic_http::SseFramer;
///
/// let mut framer = SseFramer::new();
/// let mut events = Vec::new();
/// framer.push(b"event: greeting\r\ndata: hel", &mut events)?;
/// assert!(events.is_empty());
/// framer.push(b"lo\r\ndata: world\r\n\r\n", &mut events)?;
/// assert_eq!((events[0].event.as_str(), events[0].data.as_str()), ("greeting", "hello\nworld"));
/// # Ok::<(), noetic_http::SseError>(())
/// ```
#[derive(Debug)]
pub struct SseFramer {
    lines: Lines,
    builder: Builder,
    max_event_bytes: usize,
    failed: Option<SseError>,
}

impl Default for SseFramer {
    fn default() -> Self {
        SseFramer::new()
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseFramer {
    /// A framer whose events may be up to [`DEFAULT_MAX_BODY_BYTES`] long.
    pub fn new() -> Self {
        SseFramer::with_max_event_bytes(DEFAULT_MAX_BODY_BYTES)
    }

    /// A framer failing with [`SseError::EventTooLarge`] once one event — its data so far plus the line being
    /// read, counted as received (field name included) — is longer than `max_event_bytes`. This bounds the
    /// framer's memory whatever the server sends, and the outcome does not depend on how the bytes are chunked.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        SseFramer { lines: Lines::default(), builder: Builder::default(), max_event_bytes, failed: None }
    }

    /// The limit on one event, in bytes.
    pub fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }

    /// The reconnection time the last valid `retry:` field asked for, if any.
    pub fn retry(&self) -> Option<Duration> {
        self.builder.retry
    }

    /// Feeds the next bytes; the events they complete are appended to `events`, in order.
    ///
    /// # Errors
    ///
    /// [`SseError::EventTooLarge`] when an event outgrows the limit; the events completed before it are still
    /// appended. The framer is then spent: every later push returns the same error.
    pub fn push(&mut self, chunk: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let mut chunk = chunk;
        if self.lines.after_cr && !chunk.is_empty() {
            self.lines.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        self.lines.buf.extend_from_slice(chunk);
        if !self.lines.bom_done && !self.skip_bom() {
            return Ok(());
        }
        let result = self.read_lines(events).and_then(|()| self.check_size());
        self.compact();
        if let Err(error) = &result {
            self.failed = Some(error.clone());
        }
        result
    }

    /// Skips a leading BOM; false while the bytes so far could still be the start of one.
    fn skip_bom(&mut self) -> bool {
        let buf = &self.lines.buf;
        if buf.len() < BOM.len() && BOM.starts_with(buf) {
            return false;
        }
        if buf.starts_with(BOM) {
            self.lines.start = BOM.len();
            self.lines.scanned = BOM.len();
        }
        self.lines.bom_done = true;
        true
    }

    /// Handles every complete line in the buffer.
    fn read_lines(&mut self, events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let lines = &mut self.lines;
        while let Some(offset) = memchr::memchr2(b'\n', b'\r', &lines.buf[lines.scanned..]) {
            let end = lines.scanned + offset;
            let mut next = end + 1;
            if lines.buf[end] == b'\r' {
                match lines.buf.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => lines.after_cr = true,
                }
            }
            if let Some(event) = self.builder.line(&lines.buf[lines.start..end], self.max_event_bytes)? {
                events.push(event);
            }
            lines.start = next;
            lines.scanned = next;
        }
        lines.scanned = lines.buf.len();
        Ok(())
    }

    /// Drops consumed bytes once they are at least half the buffer, so the copying stays linear overall.
    fn compact(&mut self) {
        let lines = &mut self.lines;
        if lines.start > 0 && lines.start * 2 >= lines.buf.len() {
            lines.buf.drain(..lines.start);
            lines.scanned -= lines.start;
            lines.start = 0;
        }
    }

    fn check_size(&self) -> Result<(), SseError> {
        let pending = self.builder.data.len() + (self.lines.buf.len() - self.lines.start);
        if pending > self.max_event_bytes {
            return Err(SseError::EventTooLarge { limit: self.max_event_bytes });
        }
        Ok(())
    }
}

impl Builder {
    /// Interprets one line (without its line end); a blank line dispatches.
    fn line(&mut self, line: &[u8], max: usize) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        // The same measure as for a line still being read, so chunking cannot change the outcome.
        if self.data.len() + line.len() > max {
            return Err(SseError::EventTooLarge { limit: max });
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => self.id = String::from_utf8_lossy(value).into_owned(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only, so the text is ASCII; a value too big for u64 is ignored like any invalid one.
                if let Ok(ms) = String::from_utf8_lossy(value).parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// The spec's dispatch: nothing when no data arrived; the event type resets either way, the id persists.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        let event = if event.is_empty() { "message".to_owned() } else { event };
        Some(SseEvent { event, data, id: self.id.clone() })
    }
}

/// Why an event stream ended early: the byte stream failed, or framing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseStreamError<E> {
    /// The byte stream yielded an error.
    Transport(E),
    /// The framer refused the bytes (an event over the limit).
    Sse(SseError),
}

impl<E: fmt::Display> fmt::Display for SseStreamError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseStreamError::Transport(e) => e.fmt(f),
            SseStreamError::Sse(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for SseStreamError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SseStreamError::Transport(e) => e.source(),
            SseStreamError::Sse(_) => None,
        }
    }
}

/// The events of a byte stream, framed by an [`SseFramer`] with `max_event_bytes`. The stream ends after the
/// first error or when the bytes end (an unterminated last event is dropped).
///
/// ```
/// use futures::StreamExt;
///
/// # futures::executor::block_on(async {
/// let chunks = futures::stream::iter(["data: a\n", "\ndata: b\n\n"].map(Ok::<_, std::io::Error>));
/// let data: Vec<String> =
///     noetic_http::sse_events(chunks, 1024).map(|e| e.map(|e| e.data).unwrap_or_default()).collect().await;
/// assert_eq!(data, ["a", "b"]);
/// # });
/// ```
pub fn sse_events<S, B, E>(
    bytes: S,
    max_event_bytes: usize,
) -> impl Stream<Item = Result<SseEvent, SseStreamError<E>>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Send + 'static,
{
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        framer: SseFramer,
        ready: VecDeque<SseEvent>,
        scratch: Vec<SseEvent>,
        /// Yielded once the events before it are out.
        error: Option<SseError>,
        ended: bool,
    }
    let state = State {
        bytes: Box::pin(bytes),
        framer: SseFramer::with_max_event_bytes(max_event_bytes),
        ready: VecDeque::new(),
        scratch: Vec::new(),
        error: None,
        ended: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.ready.pop_front() {
                return Some((Ok(event), st));
            }
            if let Some(e) = st.error.take() {
                return Some((Err(SseStreamError::Sse(e)), st));
            }
            if st.ended {
                return None;
            }
            match st.bytes.next().await {
                Some(Ok(chunk)) => {
                    if let Err(e) = st.framer.push(chunk.as_ref(), &mut st.scratch) {
                        st.error = Some(e);
                        st.ended = true;
                    }
                    st.ready.extend(st.scratch.drain(..));
                }
                Some(Err(e)) => {
                    st.ended = true;
                    return Some((Err(SseStreamError::Transport(e)), st));
                }
                None => st.ended = true,
            }
        }
    })
    // Fused: polling again after the end gives the end again, never a panic.
    .fuse()
}
