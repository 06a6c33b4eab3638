//! Request bodies as shared byte chunks: what does not change between requests is encoded once and handed to the
//! transport as the same bytes every time, never copied into one fresh buffer per request.
//!
//! * [`ChunkedBody`] — a body made of [`Bytes`] chunks, given to the HTTP client as a body of known length (so it
//!   goes out with a `Content-Length`, exactly as one buffer would).
//! * [`ChunkLog`] — the encoded messages of an item log, kept as a few chunks that only grow at the end.
//! * [`PartCache`] — constant parts of bodies (a prefix, a suffix), encoded once per key.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

/// A cache key's copy of `text`: the request's shared string itself when `text` is that string (`shared`), else a
/// copy. A later request holding the same shared string then matches the key by address ([`is_key_text`]) instead
/// of comparing every byte (a system prompt of a few kilobytes, compared before every request).
pub fn key_text(text: &str, shared: Option<&Arc<str>>) -> Arc<str> {
    match shared {
        Some(shared) if std::ptr::eq(&**shared, text) => shared.clone(),
        _ => Arc::from(text),
    }
}

/// True when `key` (made by [`key_text`]) holds `text` (both absent counts): at once when both are the same string
/// in memory (the key keeps its string alive, so no other text can take that address while it lives), else byte by
/// byte.
pub fn is_key_text(key: Option<&str>, text: Option<&str>) -> bool {
    match (key, text) {
        (Some(key), Some(text)) => std::ptr::eq(key, text) || key == text,
        (key, text) => key.is_none() && text.is_none(),
    }
}

/// A request body made of shared chunks. Cloning it (a retry) copies no bytes.
#[derive(Debug, Clone)]
pub struct ChunkedBody {
    chunks: Arc<[Bytes]>,
    len: usize,
}

impl ChunkedBody {
    /// The body of these chunks, in order (empty chunks are left out).
    pub fn new(mut chunks: Vec<Bytes>) -> Self {
        chunks.retain(|c| !c.is_empty());
        let len = chunks.iter().map(Bytes::len).sum();
        ChunkedBody { chunks: Arc::from(chunks), len }
    }

    /// The body of these chunks, in order, collected straight into its shared list: one allocation when the
    /// iterator knows its exact length (a chain of `Option`s, `iter::once`s and a slice's `cloned()` does), where
    /// [`ChunkedBody::new`] takes a `Vec` and copies it. Empty chunks may stay in the list; they are skipped when
    /// the body is sent.
    pub fn from_parts(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let chunks: Arc<[Bytes]> = chunks.into_iter().collect();
        let len = chunks.iter().map(Bytes::len).sum();
        ChunkedBody { chunks, len }
    }

    /// Bytes in the body.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The whole body in one buffer (a copy: for tests and logs, not for sending).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for chunk in self.chunks.iter() {
            out.extend_from_slice(chunk);
        }
        out
    }

    /// The body for one HTTP attempt: an [`http_body::Body`] of exact length that yields the shared chunks.
    pub fn http_body(&self) -> ChunkBody {
        ChunkBody { chunks: self.chunks.clone(), next: 0, remaining: self.len }
    }
}

/// One attempt's view of a [`ChunkedBody`] (see [`ChunkedBody::http_body`]).
#[derive(Debug)]
pub struct ChunkBody {
    chunks: Arc<[Bytes]>,
    next: usize,
    remaining: usize,
}

impl http_body::Body for ChunkBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        // An empty chunk (see `ChunkedBody::from_parts`) is no frame.
        while self.chunks.get(self.next).is_some_and(Bytes::is_empty) {
            self.next += 1;
        }
        let Some(chunk) = self.chunks.get(self.next).cloned() else {
            return Poll::Ready(None);
        };
        self.next += 1;
        self.remaining -= chunk.len();
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining as u64)
    }
}

/// The encoded messages of an item log, comma-separated without brackets, as chunks that only grow at the end.
///
/// Each request appends what it newly encoded as one chunk; chunks are merged so that each is larger than the
/// next (a binary counter: a chunk meets its equal and they become one), which keeps a log of n appends in at most
/// about log₂ n chunks while each byte is copied about log₂ n times in all — instead of the whole history being
/// copied once per request.
#[derive(Debug, Clone, Default)]
pub struct ChunkLog {
    chunks: Vec<Bytes>,
    len: usize,
}

impl ChunkLog {
    /// Appends `chunk`.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.len += chunk.len();
        self.chunks.push(chunk);
        while let [.., older, newer] = self.chunks.as_slice() {
            if older.len() > newer.len() {
                break;
            }
            let mut merged = BytesMut::with_capacity(older.len() + newer.len());
            merged.extend_from_slice(older);
            merged.extend_from_slice(newer);
            self.chunks.truncate(self.chunks.len() - 2);
            self.chunks.push(merged.freeze());
        }
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// How many parts a [`PartCache`] keeps.
pub const PART_CACHE_ENTRIES: usize = 64;

/// Constant parts of request bodies — a prefix with the instructions, a suffix with the tool specs — encoded once
/// per key and shared as bytes. A provider's key says what the part depends on; [`PartCache::get_or_encode`]
/// finds a part whose key matches a request, or encodes one. At most [`PART_CACHE_ENTRIES`] parts are kept, the
/// least recently used going first.
pub struct PartCache<K> {
    parts: Mutex<Vec<(K, Bytes)>>,
}

impl<K> Default for PartCache<K> {
    fn default() -> Self {
        PartCache { parts: Mutex::new(Vec::new()) }
    }
}

impl<K> std::fmt::Debug for PartCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartCache").field("parts", &self.len()).finish()
    }
}

impl<K> PartCache<K> {
    /// Parts kept.
    pub fn len(&self) -> usize {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// True when no part is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The part whose key `matches`, or the one `encode` makes (encoded without the lock, then kept).
    pub fn get_or_encode(&self, matches: impl Fn(&K) -> bool, encode: impl FnOnce() -> (K, Bytes)) -> Bytes {
        {
            let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(at) = parts.iter().position(|(key, _)| matches(key)) {
                // Most recently used last: a hit moves there, so the first entry is the one to drop.
                let last = parts.len() - 1;
                if at != last {
                    let entry = parts.remove(at);
                    parts.push(entry);
                }
                return parts[last].1.clone();
            }
        }
        let (key, part) = encode();
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        if parts.len() >= PART_CACHE_ENTRIES {
            parts.remove(0);
        }
        parts.push((key, part.clone()));
        part
    }
}

#[cfg(test)]
mod tests {
    use http_body::Body;

    use super::*;

    #[test]
    fn a_key_keeps_the_shared_string_it_was_made_from_and_matches_equal_text_wherever_it_lies() {
        let shared: Arc<str> = Arc::from("You are a careful agent.");
        let key = key_text(&shared, Some(&shared));
        assert!(Arc::ptr_eq(&key, &shared), "the key copied the shared string");
        let elsewhere = String::from("You are a careful agent.");
        let copied = key_text(&elsewhere, Some(&shared));
        assert!(!Arc::ptr_eq(&copied, &shared), "text elsewhere is not the shared string, however equal");
        let holds = |key: &str, text: &str| is_key_text(Some(key), Some(text));
        assert!(holds(&key, &shared) && holds(&key, &elsewhere) && holds(&copied, &shared));
        assert!(!holds(&key, "You are a careless agent."));
        assert!(!holds(&key, &shared[..10]), "the same address with another length is other text");
        assert!(is_key_text(None, None) && !is_key_text(Some(&key), None) && !is_key_text(None, Some(&shared)));
    }

    #[test]
    fn an_attempt_yields_the_shared_chunks_in_order_with_the_exact_length_left_and_a_retry_starts_again() {
        let body = ChunkedBody::new(["{\"a\":", "", "[1,2]", "}"].map(|s| Bytes::from_static(s.as_bytes())).to_vec());
        assert_eq!((body.len(), body.chunks().len()), (11, 3), "empty chunks are left out");
        for _attempt in 0..2 {
            let mut http = body.http_body();
            let mut sent = Vec::new();
            while !http.is_end_stream() {
                assert_eq!(http.size_hint().exact(), Some((body.len() - sent.len()) as u64));
                let frame = futures::executor::block_on(std::future::poll_fn(|cx| Pin::new(&mut http).poll_frame(cx)));
                let data = frame.and_then(|f| f.ok()).and_then(|f| f.into_data().ok());
                sent.extend_from_slice(&data.unwrap_or_default());
            }
            assert_eq!(sent, b"{\"a\":[1,2]}");
            assert_eq!(sent, body.to_vec());
        }
    }

    #[test]
    fn a_body_collected_from_parts_sends_no_empty_frame_and_the_same_bytes() {
        let parts = ["", "{\"a\":", "", "[1,2]", "}", ""].map(|s| Bytes::from_static(s.as_bytes()));
        let body = ChunkedBody::from_parts(parts.clone());
        assert_eq!((body.len(), body.chunks().len()), (11, 6), "the parts are kept as they came");
        let mut http = body.http_body();
        let mut frames = Vec::new();
        while let Some(frame) =
            futures::executor::block_on(std::future::poll_fn(|cx| Pin::new(&mut http).poll_frame(cx)))
        {
            frames.push(frame.ok().and_then(|f| f.into_data().ok()).unwrap_or_default());
        }
        assert_eq!(frames, ["{\"a\":", "[1,2]", "}"], "each non-empty chunk is one frame, in order");
        assert!(http.is_end_stream());
        assert_eq!(body.to_vec(), ChunkedBody::new(parts.to_vec()).to_vec());
    }

    #[test]
    fn a_log_of_many_appends_stays_a_few_chunks_that_hold_every_byte_in_order() {
        let mut log = ChunkLog::default();
        let mut expected = Vec::new();
        for i in 0..1000u32 {
            let chunk = format!(",{{\"n\":{i}}}");
            expected.extend_from_slice(chunk.as_bytes());
            log.push(Bytes::from(chunk));
            assert!(log.chunks().len() <= 11, "{} chunks after {} appends", log.chunks().len(), i + 1);
        }
        assert_eq!(ChunkedBody::new(log.chunks().to_vec()).to_vec(), expected);
        assert_eq!(log.len(), expected.len());
    }

    #[test]
    fn a_part_is_encoded_once_per_key_and_the_least_recently_used_goes_first() {
        let cache = PartCache::default();
        let mut encoded = 0;
        for round in 0..3 {
            for key in 0..PART_CACHE_ENTRIES {
                let part = cache.get_or_encode(
                    |k| *k == key,
                    || {
                        encoded += 1;
                        (key, Bytes::from(key.to_string()))
                    },
                );
                assert_eq!(part, key.to_string(), "round {round}");
            }
        }
        assert_eq!(encoded, PART_CACHE_ENTRIES, "each key encoded once");
        cache.get_or_encode(|k| *k == 1, || unreachable!("key 1 is kept"));
        cache.get_or_encode(|k| *k == usize::MAX, || (usize::MAX, Bytes::new()));
        assert_eq!(cache.len(), PART_CACHE_ENTRIES);
        let mut again = false;
        cache.get_or_encode(
            |k| *k == 0,
            || {
                again = true;
                (0, Bytes::new())
            },
        );
        assert!(again, "key 0 was the least recently used, so it went");
    }
}
