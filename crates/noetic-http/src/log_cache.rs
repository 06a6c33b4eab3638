//! A bounded map from item-log ids to what a provider derived from that log (its encoded messages), so each
//! request encodes only what is new (see `noetic::model::History::log_id`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// At most this many logs are remembered.
pub const LOG_CACHE_ENTRIES: usize = 1024;
/// At most this many bytes are remembered over all logs.
pub const LOG_CACHE_BYTES: usize = 64 << 20;

/// What a [`LogCache`] holds per log: its size in bytes counts against the cache's bound.
pub trait Weighed {
    /// Bytes held.
    fn bytes(&self) -> usize;
}

struct Entry<P> {
    value: P,
    last_used: u64,
}

/// The hasher of [`IdMap`]: an id hashed with one multiplication. Ids are numbers this process hands out (log ids,
/// addresses), not input, so SipHash's defence against chosen keys buys nothing on a lookup made per request.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Odd multiplier: distinct ids keep distinct low bits (the bucket) and spread into the high ones (the tag).
        self.0 = (self.0 ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by ids that are already spread over their low bits (counters, addresses shifted past their
/// alignment), hashed by one multiplication instead of SipHash.
pub type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

struct Entries<P> {
    by_log: IdMap<Entry<P>>,
    bytes: usize,
    clock: u64,
}

/// Per log id, one value; bounded in entries and bytes, least recently used out first. A value is taken out
/// while a request uses it (so encoding runs without the lock) and put back after.
pub struct LogCache<P> {
    entries: Mutex<Entries<P>>,
    max_entries: usize,
    max_bytes: usize,
}

impl<P> Default for LogCache<P> {
    fn default() -> Self {
        LogCache::with_bounds(LOG_CACHE_ENTRIES, LOG_CACHE_BYTES)
    }
}

impl<P> std::fmt::Debug for LogCache<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (logs, bytes) = self.usage();
        f.debug_struct("LogCache").field("logs", &logs).field("bytes", &bytes).finish()
    }
}

impl<P> LogCache<P> {
    /// A cache holding at most `max_entries` logs and `max_bytes` bytes.
    pub fn with_bounds(max_entries: usize, max_bytes: usize) -> Self {
        LogCache {
            entries: Mutex::new(Entries { by_log: IdMap::default(), bytes: 0, clock: 0 }),
            max_entries,
            max_bytes,
        }
    }

    /// How many logs it remembers and how many bytes they hold.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        (entries.by_log.len(), entries.bytes)
    }
}

impl<P: Weighed> LogCache<P> {
    /// Takes the value of `log` out.
    pub fn take(&self, log: u64) -> Option<P> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.by_log.remove(&log)?;
        entries.bytes -= entry.value.bytes();
        Some(entry.value)
    }

    /// Puts the value of `log` (back); the least recently used go while the bounds are exceeded. A value larger
    /// than the whole byte bound is not kept.
    pub fn put(&self, log: u64, value: P) {
        let size = value.bytes();
        if size > self.max_bytes {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.clock += 1;
        let last_used = entries.clock;
        entries.bytes += size;
        if let Some(old) = entries.by_log.insert(log, Entry { value, last_used }) {
            entries.bytes -= old.value.bytes();
        }
        while entries.by_log.len() > self.max_entries || entries.bytes > self.max_bytes {
            let Some(oldest) = entries.by_log.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| *k) else {
                break;
            };
            if let Some(gone) = entries.by_log.remove(&oldest) {
                entries.bytes -= gone.value.bytes();
            }
        }
    }
}

/// What a provider keeps between requests to encode only what is new: the encoded history messages per item log
/// (bounded: see [`LogCache`]), and the heads and suffixes of bodies, keyed by what they depend on (bounded: see
/// [`PartCache`](crate::PartCache)).
pub struct BodyCache<P, H, S> {
    /// Each log's encoded messages.
    pub logs: LogCache<P>,
    /// The parts before the messages.
    pub heads: crate::chunks::PartCache<H>,
    /// The parts after the messages.
    pub suffixes: crate::chunks::PartCache<S>,
}

impl<P, H, S> Default for BodyCache<P, H, S> {
    fn default() -> Self {
        BodyCache {
            logs: LogCache::default(),
            heads: crate::chunks::PartCache::default(),
            suffixes: crate::chunks::PartCache::default(),
        }
    }
}

impl<P, H, S> std::fmt::Debug for BodyCache<P, H, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyCache")
            .field("logs", &self.logs)
            .field("heads", &self.heads.len())
            .field("suffixes", &self.suffixes.len())
            .finish()
    }
}

impl<P, H, S> BodyCache<P, H, S> {
    /// How many logs it remembers and how many bytes of messages they hold.
    pub fn usage(&self) -> (usize, usize) {
        self.logs.usage()
    }
}

/// A provider's public `HistoryCache`: a [`BodyCache`] of its own (private) prefix, head and suffix types, with
/// `Default`, `Debug` and `usage()`. `body_cache_type!(HistoryCache, Prefix, HeadKey, SuffixKey)` declares it; the
/// provider reaches the parts as `cache.0`. The prefix type keeps its messages in a field `log: ChunkLog`, which is
/// what it weighs against the cache's bound. A fifth type, when given, is a further part of the provider's own
/// (`Default` and `Debug`), reached as `cache.1`.
#[macro_export]
macro_rules! body_cache_type {
    ($name:ident, $prefix:ty, $head:ty, $suffix:ty $(, $extra:ty)?) => {
        impl $crate::Weighed for $prefix {
            fn bytes(&self) -> usize {
                self.log.len()
            }
        }

        /// What a model keeps between requests: the encoded history messages per item log and the heads and
        /// suffixes of bodies (bounded: see [`BodyCache`]($crate::BodyCache)).
        #[derive(Default, Debug)]
        pub struct $name(pub(crate) $crate::BodyCache<$prefix, $head, $suffix> $(, pub(crate) $extra)?);

        impl $name {
            /// How many logs it remembers and how many bytes of messages they hold.
            pub fn usage(&self) -> (usize, usize) {
                self.0.usage()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Weighed for String {
        fn bytes(&self) -> usize {
            self.len()
        }
    }

    #[test]
    fn the_least_recently_used_logs_go_first_when_entries_or_bytes_run_over() {
        let cache = LogCache::with_bounds(2, 10);
        cache.put(1, "aaaa".to_owned());
        cache.put(2, "bbbb".to_owned());
        let one = cache.take(1);
        assert_eq!(one.as_deref(), Some("aaaa"));
        cache.put(1, "aaaa".to_owned());
        cache.put(3, "cc".to_owned());
        // Log 2 was used least recently: it goes for the entry bound.
        assert!(cache.take(2).is_none());
        assert_eq!(cache.usage(), (2, 6));
        cache.put(4, "dddddd".to_owned());
        // 4 + 2 + 6 bytes > 10: the oldest (1) goes.
        assert!(cache.take(1).is_none());
        cache.put(5, "x".repeat(11));
        assert!(cache.take(5).is_none(), "larger than the whole cache: not kept");
    }
}
