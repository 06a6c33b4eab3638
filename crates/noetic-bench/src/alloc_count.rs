//! A global allocator that counts the calls which allocate (`alloc`, `alloc_zeroed`, `realloc`) while counting is
//! on, for the `real_allocations_per_tool_call_*` figures. Off, it costs one relaxed load per call, so the timing
//! figures measured around it are not skewed.
//!
//! The one `unsafe` of the workspace: a `GlobalAlloc` can only be written as an `unsafe impl`. It forwards every
//! call unchanged to the system allocator and adds nothing but a counter, so the contract the caller upholds for
//! `Counting` is the one `System` needs.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The system allocator, counting.
pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicU64 = AtomicU64::new(0);

fn counted() {
    if ON.load(Ordering::Relaxed) {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards its arguments unchanged to `System`, whose contract is the same as ours.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through here).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations made while `f` runs (on any thread), and what it returned.
pub async fn allocations_during<T>(f: impl Future<Output = T>) -> (u64, T) {
    let before = COUNT.load(Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    let out = f.await;
    ON.store(false, Ordering::Relaxed);
    (COUNT.load(Ordering::Relaxed) - before, out)
}
