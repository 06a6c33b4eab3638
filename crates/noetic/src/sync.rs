//! Small synchronisation helpers every layer of the crate uses (the bottom layer, beside `error`).

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, taking the data even if a panicking thread poisoned it: the runtime's locks guard plain data
/// whose invariants hold between statements, and a panic elsewhere must not take every later caller down too.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
