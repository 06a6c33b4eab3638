//! Small synchronisation helpers every layer of the crate uses (the bottom layer, beside `error`).

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, taking the data even if a panicking thread poisoned it: the runtime's locks guard plain data
/// whose invariants hold between statements, and a panic elsewhere must not take every later caller down too.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A value alone on its cache lines (128 bytes: two lines, for CPUs that fetch lines in pairs). Behind an `Arc`,
/// the reference count then shares its line with nothing another thread writes or reads.
#[repr(align(128))]
pub(crate) struct Padded<T: ?Sized>(pub(crate) T);

impl<T: ?Sized> std::ops::Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Copies of a value that every turn clones (an `Arc`, or something holding some): one per group of threads, so
/// threads cloning it at once write different reference counts instead of all bouncing one cache line between
/// cores. Each thread always gets the same copy.
pub(crate) struct Spread<T> {
    copies: Box<[T]>,
}

impl<T> Spread<T> {
    /// `make` is called once per copy; each call must give a value with reference counts of its own (a deep copy).
    pub(crate) fn new(make: impl FnMut() -> T) -> Self {
        // Twice the cores, so the runtime's workers and the few other threads that run turns rarely share one.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let copies = (cores * 2).clamp(2, 64);
        Spread { copies: std::iter::repeat_with(make).take(copies).collect() }
    }

    /// This thread's copy.
    pub(crate) fn local(&self) -> &T {
        &self.copies[thread_slot() % self.copies.len()]
    }

    /// Every copy (to change all of them, or to check them in tests).
    #[cfg(test)]
    pub(crate) fn all(&self) -> &[T] {
        &self.copies
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use std::sync::Arc;

    use super::*;

    #[test]
    fn each_thread_keeps_its_copy_and_threads_get_consecutive_slots() {
        let spread = Arc::new(Spread::new(|| Arc::new(Padded(7u32))));
        let n = spread.all().len();
        assert!(n >= 2);
        let distinct: std::collections::HashSet<usize> = spread.all().iter().map(|c| Arc::as_ptr(c) as usize).collect();
        assert_eq!(distinct.len(), n, "two copies are one value");
        let mine = Arc::as_ptr(spread.local());
        assert_eq!(Arc::as_ptr(spread.local()), mine, "a thread asked twice got two copies");
        assert_eq!(mine, Arc::as_ptr(&spread.all()[thread_slot() % n]));
        // Every thread has a slot of its own (other tests' threads may take slots in between, so only
        // distinctness is certain).
        let slots: Vec<usize> =
            (0..4).map(|_| std::thread::spawn(thread_slot).join().expect("thread panicked")).collect();
        let unique: std::collections::HashSet<&usize> = slots.iter().collect();
        assert_eq!(unique.len(), slots.len(), "two threads got one slot: {slots:?}");
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "slots are not handed out in order: {slots:?}");
        assert!(spread.all().iter().all(|copy| ***copy == 7));
    }

    #[test]
    fn a_padded_value_starts_its_own_cache_line_pair() {
        let values: Vec<Arc<Padded<u8>>> = (0..8).map(|i| Arc::new(Padded(i))).collect();
        for v in &values {
            assert_eq!(Arc::as_ptr(v) as usize % 128, 0);
        }
        assert!(std::mem::align_of::<Padded<u8>>() == 128 && std::mem::size_of::<Padded<u8>>() == 128);
    }
}
