//! What a fork path allocates, counted by the suite's counting allocator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../src/alloc_count.rs"]
mod alloc_count;

use noetic::prelude::*;

#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

/// A path that finishes at its first poll allocates its function's future (the `run` step boxes it) and nothing
/// else: no context, no future of its own, no slot in the fork's set of running paths.
#[test]
fn a_run_path_finishing_at_once_allocates_only_its_functions_future() {
    const PATHS: usize = 1000;
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let path = Step::run("p", |x: u64, _| async move { Ok(x) }).build().unwrap();
    let fork =
        Step::fork("f", ForkMode::All).paths(vec![path; PATHS]).merge(|v, _| Ok(v.len() as u64)).build().unwrap();
    let ctx = StepContext::new();
    rt.block_on(fork.execute(1, &ctx)).unwrap();

    let (allocations, out) = rt.block_on(alloc_count::allocations_during(fork.execute(1, &ctx)));

    assert_eq!(out.unwrap(), PATHS as u64);
    // The fork's own few (its future, the path list, the outcome slots, the merged values) come on top.
    let per_path = allocations as f64 / PATHS as f64;
    assert!(allocations <= PATHS as u64 + 16, "{allocations} allocations: {per_path:.2} per path");
}
