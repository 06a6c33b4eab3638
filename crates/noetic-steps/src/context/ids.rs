//! Execution ids: version 7 UUIDs made by each thread on its own.

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// The identity of one execution (a root run, a spawned child or a fork path). Time-ordered (UUID v7): by the
/// millisecond across threads, strictly among the ids one thread makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ExecutionId(Uuid);

impl ExecutionId {
    /// A fresh id.
    pub fn new() -> Self {
        ExecutionId(new_v7())
    }

    /// The id no execution has: what an event rebuilt from a session log carries when its turn's start is not in
    /// what was read.
    pub fn nil() -> Self {
        ExecutionId(Uuid::nil())
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for ExecutionId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One thread's id sequence: the millisecond of its last id, that millisecond's 12 random bits and 62-bit
/// counter (started at a random value in each new millisecond, then counted up), and its random generator.
#[derive(Clone, Copy)]
struct Sequence {
    millis: u64,
    rand_a: u16,
    counter: u64,
    /// xorshift64* state, seeded once per thread from the random part of one `Uuid::now_v7`; never 0.
    rng: u64,
}

/// A version 7 UUID, time-ordered: by the millisecond across threads, strictly among the ids one thread makes
/// (also when the wall clock steps back). Each thread keeps its own sequence, so no lock is shared by threads
/// and an id costs one clock read and a few arithmetic steps (a fork makes one per path). Within a millisecond
/// a thread's ids count up from a random start; with 74 random bits per thread and millisecond, ids of different
/// threads and processes do not meet.
pub fn new_v7() -> Uuid {
    thread_local! {
        static SEQUENCE: Cell<Sequence> = const { Cell::new(Sequence { millis: 0, rand_a: 0, counter: 0, rng: 0 }) };
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_millis())));
    SEQUENCE.with(|cell| {
        let mut s = cell.get();
        if s.rng == 0 {
            let (a, b) = Uuid::now_v7().as_u64_pair();
            s.rng = (b ^ a.rotate_left(29)) | 1;
        }
        // Counting up within a millisecond; 2^61 ids before the counter runs into the next millisecond.
        if now > s.millis || s.counter >= (1 << 62) - 1 {
            s.millis = now.max(s.millis + u64::from(now <= s.millis));
            let r = next(&mut s.rng);
            s.rand_a = (r >> 52) as u16;
            s.counter = r & ((1 << 61) - 1);
        } else {
            s.counter += 1;
        }
        cell.set(s);
        v7(s.millis, s.rand_a, s.counter)
    })
}

/// The UUID `uuid::Builder::from_unix_timestamp_millis` makes of a millisecond and a tail of `rand_a` then
/// `counter` (big-endian): 48 bits of milliseconds, the version (7), `rand_a`'s low 12 bits, the RFC 4122 variant
/// and `counter`'s low 62 bits — put together in one number rather than byte by byte.
fn v7(millis: u64, rand_a: u16, counter: u64) -> Uuid {
    let bits = (u128::from(millis & 0xFFFF_FFFF_FFFF) << 80)
        | (0x7 << 76)
        | (u128::from(rand_a & 0x0FFF) << 64)
        | (0b10 << 62)
        | u128::from(counter & ((1 << 62) - 1));
    Uuid::from_u128(bits)
}

/// xorshift64*.
fn next(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_one_thread_only_grow_and_are_version_7_with_the_time_in_milliseconds() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let ids: Vec<Uuid> = (0..10_000).map(|_| new_v7()).collect();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        for id in [ids[0], ids[9_999]] {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let (secs, nanos) = id.get_timestamp().map(|t| t.to_unix()).unwrap_or_default();
            let millis = secs * 1000 + u64::from(nanos) / 1_000_000;
            assert!((before..=after + 1).contains(&millis), "{millis} not in {before}..={after}");
        }
    }

    #[test]
    fn an_id_is_the_uuid_the_uuid_crates_v7_builder_makes_of_the_same_parts() {
        let mut rng = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            let (millis, r, counter) = (next(&mut rng), next(&mut rng), next(&mut rng));
            let rand_a = (r >> 48) as u16;
            let mut tail = [0u8; 10];
            tail[..2].copy_from_slice(&rand_a.to_be_bytes());
            tail[2..].copy_from_slice(&counter.to_be_bytes());
            let built = uuid::Builder::from_unix_timestamp_millis(millis, &tail).into_uuid();
            assert_eq!(v7(millis, rand_a, counter), built, "{millis} {rand_a} {counter}");
        }
    }

    #[test]
    fn ids_made_on_other_threads_at_once_are_all_different() {
        let threads: Vec<_> =
            (0..4).map(|_| std::thread::spawn(|| (0..5_000).map(|_| new_v7()).collect::<Vec<_>>())).collect();
        let mut all: Vec<Uuid> = threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!((all.len(), n), (20_000, 20_000));
    }
}
