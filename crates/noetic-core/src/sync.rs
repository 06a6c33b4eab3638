//! Small synchronisation helpers every layer of the crate uses (the bottom layer, beside `error`).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Locks a mutex, taking the data even if a panicking thread poisoned it: the runtime's locks guard plain data
/// whose invariants hold between statements, and a panic elsewhere must not take every later caller down too.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A value alone on its cache lines: crossbeam's [`CachePadded`] (128 bytes on x86-64 and aarch64: two lines, for
/// CPUs that fetch lines in pairs). Behind an `Arc`, the reference count then shares its line with nothing another
/// thread writes or reads.
pub use crossbeam_utils::CachePadded;

/// Copies of a value that every turn clones (an `Arc`, or something holding some): one per group of threads, so
/// threads cloning it at once write different reference counts instead of all bouncing one cache line between
/// cores. Each thread always gets the same copy, made the first time a thread of its group asks.
pub struct Spread<T> {
    copies: Box<[OnceLock<T>]>,
    make: Box<dyn Fn() -> T + Send + Sync>,
    /// The copy the first thread to ask takes instead of one `make` makes (see [`Spread::with_first`]).
    first: Mutex<Option<T>>,
}

impl<T> Spread<T> {
    /// `make` is called once per copy, when a thread first needs it; each call must give a value with reference
    /// counts of its own (a deep copy).
    pub fn new(make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        // Twice the cores, so the runtime's workers and the few other threads that run turns rarely share one.
        let copies = (cores() * 2).clamp(2, 64);
        Spread {
            copies: std::iter::repeat_with(OnceLock::new).take(copies).collect(),
            make: Box::new(make),
            first: Mutex::new(None),
        }
    }

    /// Like [`Spread::new`], but the first thread to ask takes `first` instead of a copy `make` makes: a value that
    /// may share its reference counts with what `make` copies from (which `make` only reads), so that a runtime
    /// whose turns run on one thread makes no deep copy at all.
    pub fn with_first(first: T, make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        let spread = Spread::new(make);
        *lock(&spread.first) = Some(first);
        spread
    }

    /// This thread's copy.
    pub fn local(&self) -> &T {
        self.copies[thread_slot() % self.copies.len()]
            .get_or_init(|| lock(&self.first).take().unwrap_or_else(|| (self.make)()))
    }

    /// The copies made so far (to check them in tests).
    #[cfg(test)]
    pub(crate) fn made(&self) -> Vec<&T> {
        self.copies.iter().filter_map(OnceLock::get).collect()
    }

    /// How many copies there can be.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.copies.len()
    }
}

/// The cores this process may use, asked once: the standard library reads the cgroup's files each time.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A number per thread, handed out in the order threads first ask (threads made together — a runtime's workers —
/// get consecutive numbers, so they land on different copies).
fn thread_slot() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

/// How many strings a [`Recent`] keeps.
const RECENT: usize = 4;

/// The last few shared strings a thread kept (the value of a thread-local), the most recent first: a call's tool
/// names given out again ([`ToolCall::shared_name`](crate::model::ToolCall::shared_name)), texts read as JSON
/// ([`note_json`](crate::json::note_json)).
pub(crate) struct Recent([Option<Arc<str>>; RECENT]);

impl Recent {
    pub(crate) const fn new() -> Self {
        Recent([None, None, None, None])
    }

    /// Where the first string kept that `found` accepts is.
    pub(crate) fn position(&self, found: impl Fn(&str) -> bool) -> Option<usize> {
        self.0.iter().position(|kept| kept.as_deref().is_some_and(&found))
    }

    /// The string kept at `at`.
    pub(crate) fn get(&self, at: usize) -> Option<&Arc<str>> {
        self.0.get(at)?.as_ref()
    }

    /// Keeps `text` first, in place of the one at `replacing` (the least recent when `None`); those before it move
    /// one down.
    pub(crate) fn keep(&mut self, text: Arc<str>, replacing: Option<usize>) {
        let at = replacing.unwrap_or(RECENT - 1).min(RECENT - 1);
        self.0[..=at].rotate_right(1);
        self.0[0] = Some(text);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use std::sync::Arc;

    use super::*;

    #[test]
    fn each_thread_keeps_its_copy_made_when_first_asked_and_threads_get_consecutive_slots() {
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let spread = {
            let made = made.clone();
            Arc::new(Spread::new(move || {
                made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Arc::new(CachePadded::new(7u32))
            }))
        };
        assert!(spread.capacity() >= 2);
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 0, "no copy is made before a thread asks");
        let mine = Arc::as_ptr(spread.local());
        assert_eq!(Arc::as_ptr(spread.local()), mine, "a thread asked twice got two copies");
        assert_eq!(spread.made().len(), 1);
        // Every thread has a slot of its own (other tests' threads may take slots in between, so only
        // distinctness is certain).
        let slots: Vec<usize> =
            (0..4).map(|_| std::thread::spawn(thread_slot).join().expect("thread panicked")).collect();
        let unique: std::collections::HashSet<&usize> = slots.iter().collect();
        assert_eq!(unique.len(), slots.len(), "two threads got one slot: {slots:?}");
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "slots are not handed out in order: {slots:?}");
        // A thread whose slot falls on another copy gets a copy of its own.
        let other = {
            let spread = spread.clone();
            std::thread::spawn(move || Arc::as_ptr(spread.local()) as usize).join().expect("thread panicked")
        };
        let copies = spread.made();
        assert!(copies.iter().all(|copy| ****copy == 7));
        let distinct: std::collections::HashSet<usize> = copies.iter().map(|c| Arc::as_ptr(c) as usize).collect();
        assert_eq!(distinct.len(), copies.len(), "two slots share one copy");
        assert!(distinct.contains(&other));
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), copies.len(), "a copy was made twice");
    }

    #[test]
    fn the_first_thread_to_ask_takes_the_given_copy_and_later_threads_get_made_ones() {
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let given = Arc::new(CachePadded::new(1u32));
        let spread = {
            let made = made.clone();
            Arc::new(Spread::with_first(given.clone(), move || {
                made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Arc::new(CachePadded::new(2u32))
            }))
        };
        assert!(Arc::ptr_eq(spread.local(), &given), "the first thread did not get the given copy");
        assert!(Arc::ptr_eq(spread.local(), &given), "asked again, the first thread got another copy");
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 0, "a copy was made for the first thread");
        // Threads until one lands on another slot: it gets a made copy, never the given one.
        let other = loop {
            let spread = spread.clone();
            let (value, ptr) = std::thread::spawn(move || {
                let copy = spread.local();
                (***copy, Arc::as_ptr(copy) as usize)
            })
            .join()
            .expect("thread panicked");
            if ptr != Arc::as_ptr(&given) as usize {
                break value;
            }
        };
        assert_eq!(other, 2, "another slot's copy is made by make");
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), spread.made().len() - 1);
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn a_padded_value_starts_its_own_cache_line_pair() {
        let values: Vec<Arc<CachePadded<u8>>> = (0..8).map(|i| Arc::new(CachePadded::new(i))).collect();
        for v in &values {
            assert_eq!(Arc::as_ptr(v) as usize % 128, 0);
        }
        assert!(std::mem::align_of::<CachePadded<u8>>() == 128 && std::mem::size_of::<CachePadded<u8>>() == 128);
    }
}
