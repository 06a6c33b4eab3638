//! Behaviour of `fork` steps: concurrency limits, configuration errors, parent cancellation, empty path lists, child
//! contexts, `paths_fn` and panics (merge order, fail-fast, races and settling: `fork.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fork_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::context::ExecutionId;
use noetic::prelude::*;
use tokio::time::Instant;

use fork_common::*;

// ---------------------------------------------------------------------------------------------------------------
// Concurrency and configuration
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn all_never_runs_more_paths_than_the_concurrency_limit() {
    let gauge = Arc::new(Gauge::default());
    let fork = Step::fork("f", ForkMode::All)
        .paths(gauged_paths(&gauge, false))
        .merge(|parts: Vec<String>, _ctx| Ok(parts.join(",")))
        .concurrency(2)
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "g0,g1,g2,g3,g4,g5");
    assert_eq!(gauge.started.load(SeqCst), 6);
    assert_eq!(gauge.max.load(SeqCst), 2, "two at a time, never more");
}

#[tokio::test(start_paused = true)]
async fn settle_never_runs_more_paths_than_the_concurrency_limit() {
    let gauge = Arc::new(Gauge::default());
    let fork = Step::fork("f", ForkMode::Settle)
        .paths(gauged_paths(&gauge, true))
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| {
            Ok(format!("{}", results.iter().filter(|r| r.status() == SettleStatus::Rejected).count()))
        })
        .concurrency(3)
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "6");
    assert_eq!(gauge.started.load(SeqCst), 6);
    assert_eq!(gauge.max.load(SeqCst), 3, "three at a time, never more");
}

#[tokio::test(start_paused = true)]
async fn race_never_runs_more_paths_than_the_concurrency_limit() {
    let gauge = Arc::new(Gauge::default());
    let fork = Step::fork("f", ForkMode::Race).paths(gauged_paths(&gauge, true)).concurrency(2).build().unwrap();
    let err = fork.execute(0, &StepContext::new()).await.unwrap_err();
    let (_, succeeded, failed) = unpack_partial(err);
    assert!(succeeded.is_empty());
    assert_eq!(failed.iter().map(|f| f.index).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(gauge.started.load(SeqCst), 6, "each failure launched a queued path");
    assert_eq!(gauge.max.load(SeqCst), 2, "two at a time, never more");
}

#[test]
fn concurrency_zero_is_rejected_at_build() {
    for mode in [ForkMode::All, ForkMode::Race, ForkMode::Settle] {
        let err = Step::<u32, u32>::fork("f", mode)
            .paths(Vec::new())
            .merge(|v, _| Ok(v.len() as u32))
            .merge_settled(|v, _| Ok(v.len() as u32))
            .concurrency(0)
            .build()
            .unwrap_err();
        assert_eq!(err.code, ConfigCode::InvalidConcurrency, "{mode:?}");
    }
    let ok = Step::<u32, u32>::fork("f", ForkMode::Race).paths(Vec::new()).concurrency(1).build();
    assert!(ok.is_ok(), "concurrency 1 is valid");
}

#[test]
fn all_and_settle_without_a_merge_function_are_rejected_at_build() {
    let all = Step::<u32, u32>::fork("f", ForkMode::All).paths(Vec::new()).build().unwrap_err();
    assert_eq!(all.code, ConfigCode::MissingMergeFunction);
    // The All merge does not satisfy Settle, nor the other way round.
    let settle =
        Step::<u32, u32>::fork("f", ForkMode::Settle).paths(Vec::new()).merge(|_, _| Ok(0)).build().unwrap_err();
    assert_eq!(settle.code, ConfigCode::MissingMergeFunction);
    let all2 =
        Step::<u32, u32>::fork("f", ForkMode::All).paths(Vec::new()).merge_settled(|_, _| Ok(0)).build().unwrap_err();
    assert_eq!(all2.code, ConfigCode::MissingMergeFunction);
    assert!(Step::<u32, u32>::fork("f", ForkMode::Race).paths(Vec::new()).build().is_ok(), "race needs no merge");
}

#[test]
fn fork_without_paths_is_rejected_at_build() {
    for mode in [ForkMode::All, ForkMode::Race, ForkMode::Settle] {
        let err =
            Step::<u32, u32>::fork("f", mode).merge(|_, _| Ok(0)).merge_settled(|_, _| Ok(0)).build().unwrap_err();
        assert_eq!(err.code, ConfigCode::MissingPaths, "{mode:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Parent cancellation
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn race_returns_cancelled_when_the_parent_is_cancelled() {
    let log = log();
    let (a, b) = (Arc::new(Probe::default()), Arc::new(Probe::default()));
    let fork = Step::fork("race", ForkMode::Race)
        .paths([blocker("a", &a, &log), long_sleeper("b", &b, &log), ok_after("queued", 1, "never", &log)])
        .concurrency(2)
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let canceller = cancel_after(&ctx, 50);
    let start = Instant::now();
    assert_cancelled_by_parent(within(fork.execute(0, &ctx)).await);
    canceller.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert!(a.observed_cancel.load(SeqCst));
    assert!(a.stopped.load(SeqCst) && b.stopped.load(SeqCst), "paths stopped before the fork returned");
    assert!(!entries(&log).contains(&"start queued".to_owned()), "no path starts after the parent is cancelled");
}

#[tokio::test(start_paused = true)]
async fn all_returns_cancelled_when_the_parent_is_cancelled_and_does_not_merge() {
    let log = log();
    let (a, b) = (Arc::new(Probe::default()), Arc::new(Probe::default()));
    let merged = Arc::new(AtomicBool::new(false));
    let flag = merged.clone();
    let fork = Step::fork("all", ForkMode::All)
        .paths([ok_after("done", 5, "D", &log), blocker("a", &a, &log), long_sleeper("b", &b, &log)])
        .merge(move |parts: Vec<String>, _ctx| {
            flag.store(true, SeqCst);
            Ok(parts.concat())
        })
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let canceller = cancel_after(&ctx, 50);
    assert_cancelled_by_parent(within(fork.execute(0, &ctx)).await);
    canceller.await.unwrap();
    assert!(!merged.load(SeqCst), "merge must not run");
    assert!(a.observed_cancel.load(SeqCst));
    assert!(a.stopped.load(SeqCst) && b.stopped.load(SeqCst));
}

#[tokio::test(start_paused = true)]
async fn settle_returns_cancelled_when_the_parent_is_cancelled_and_does_not_merge() {
    let log = log();
    let (a, b) = (Arc::new(Probe::default()), Arc::new(Probe::default()));
    let merged = Arc::new(AtomicBool::new(false));
    let flag = merged.clone();
    let fork = Step::fork("settle", ForkMode::Settle)
        .paths([
            fail_after("failed", 5, "x", &log),
            blocker("a", &a, &log),
            long_sleeper("b", &b, &log),
            ok_after("queued", 1, "never", &log),
        ])
        .merge_settled(move |results: Vec<SettleResult<String>>, _ctx| {
            flag.store(true, SeqCst);
            Ok(format!("{}", results.len()))
        })
        .concurrency(3)
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let canceller = cancel_after(&ctx, 50);
    // "failed" ends at 5 ms and frees a slot, so "queued" starts and finishes before the cancellation at 50 ms.
    assert_cancelled_by_parent(within(fork.execute(0, &ctx)).await);
    canceller.await.unwrap();
    assert!(!merged.load(SeqCst), "merge must not run");
    assert!(a.observed_cancel.load(SeqCst));
    assert!(a.stopped.load(SeqCst) && b.stopped.load(SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_fork_on_an_already_cancelled_context_starts_no_path() {
    let log = log();
    for mode in [ForkMode::All, ForkMode::Race, ForkMode::Settle] {
        let fork = Step::fork("f", mode)
            .paths([ok_after("p", 1, "P", &log)])
            .merge(|parts: Vec<String>, _ctx| Ok(parts.concat()))
            .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(format!("{}", results.len())))
            .build()
            .unwrap();
        let ctx = StepContext::new();
        ctx.cancel("parent stopped");
        assert_cancelled_by_parent(within(fork.execute(0, &ctx)).await);
    }
    assert!(entries(&log).is_empty());
}

// ---------------------------------------------------------------------------------------------------------------
// Empty path lists
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn all_and_settle_merge_an_empty_vec_when_there_are_no_paths() {
    let all = Step::<u32, String>::fork("all", ForkMode::All)
        .paths(Vec::new())
        .merge(|parts: Vec<String>, _ctx| Ok(format!("all merged {}", parts.len())))
        .build()
        .unwrap();
    assert_eq!(all.execute(0, &StepContext::new()).await.unwrap(), "all merged 0");

    let settle = Step::<u32, String>::fork("settle", ForkMode::Settle)
        .paths(Vec::new())
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(format!("settle merged {}", results.len())))
        .build()
        .unwrap();
    assert_eq!(settle.execute(0, &StepContext::new()).await.unwrap(), "settle merged 0");
}

#[tokio::test]
async fn race_with_no_paths_fails_with_an_empty_fork_partial() {
    let race = Step::<u32, String>::fork("race", ForkMode::Race).paths(Vec::new()).build().unwrap();
    let (step_id, succeeded, failed) = unpack_partial(race.execute(0, &StepContext::new()).await.unwrap_err());
    assert_eq!(step_id, "race");
    assert!(succeeded.is_empty());
    assert!(failed.is_empty());
}

// ---------------------------------------------------------------------------------------------------------------
// Child contexts, paths_fn, panics
// ---------------------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Seen {
    execution_id: ExecutionId,
    parent: Option<ExecutionId>,
    items_at_start: Vec<String>,
    items_after_push: usize,
}

#[tokio::test]
async fn each_path_runs_in_its_own_child_context_with_a_copy_of_the_item_log() {
    let seen: Arc<Mutex<Vec<(usize, Seen)>>> = Arc::new(Mutex::new(Vec::new()));
    let paths: Vec<S> = (0..3usize)
        .map(|i| {
            let seen = seen.clone();
            Step::run(format!("p{i}"), move |_x: u32, ctx: StepContext| {
                let seen = seen.clone();
                async move {
                    let items_at_start = ctx.items().iter().filter_map(|it| it.text().map(str::to_owned)).collect();
                    ctx.push_item(Item::assistant(format!("written by p{i}")));
                    let s = Seen {
                        execution_id: ctx.execution_id(),
                        parent: ctx.parent_execution_id(),
                        items_at_start,
                        items_after_push: ctx.item_count(),
                    };
                    seen.lock().unwrap().push((i, s));
                    Ok(format!("p{i}"))
                }
            })
            .build()
            .unwrap()
        })
        .collect();
    let fork = Step::fork("f", ForkMode::All)
        .paths(paths)
        .merge(|parts: Vec<String>, _ctx| Ok(parts.concat()))
        .build()
        .unwrap();

    let ctx = StepContext::new();
    ctx.push_item(Item::user("from parent"));
    assert_eq!(fork.execute(0, &ctx).await.unwrap(), "p0p1p2");

    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|(i, _)| *i);
    assert_eq!(seen.len(), 3);
    for (i, s) in &seen {
        assert_ne!(s.execution_id, ctx.execution_id(), "path {i} has its own execution id");
        assert_eq!(s.parent, Some(ctx.execution_id()), "path {i}'s parent is the fork's context");
        assert_eq!(s.items_at_start, ["from parent"], "path {i} sees a copy of the parent's log, not siblings'");
        assert_eq!(s.items_after_push, 2);
    }
    let mut ids: Vec<ExecutionId> = seen.iter().map(|(_, s)| s.execution_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every path has a distinct execution id");
    let parent_items: Vec<String> = ctx.items().iter().filter_map(|it| it.text().map(str::to_owned)).collect();
    assert_eq!(parent_items, ["from parent"], "items pushed in paths do not appear in the parent");
}

#[tokio::test]
async fn cancelling_one_path_context_does_not_cancel_the_parent() {
    let fork = Step::fork("f", ForkMode::Settle)
        .paths([Step::run("self-cancel", |_x: u32, ctx: StepContext| async move {
            ctx.cancel("path gave up");
            Err::<String, _>(ctx.cancelled_error())
        })
        .build()
        .unwrap()])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| {
            Ok(results[0].error().map(ToString::to_string).unwrap_or_default())
        })
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let out = fork.execute(0, &ctx).await.unwrap();
    assert_eq!(out, "cancelled: path gave up");
    assert!(!ctx.is_cancelled(), "a path's own cancellation stays in the path");
}

#[tokio::test]
async fn paths_fn_is_called_once_per_execution_and_receives_the_input() {
    let calls = Arc::new(AtomicUsize::new(0));
    let inputs = Arc::new(Mutex::new(Vec::new()));
    let (c, seen) = (calls.clone(), inputs.clone());
    let fork = Step::fork("f", ForkMode::All)
        .paths_fn(move |input: &u32, _ctx: &Context| {
            c.fetch_add(1, SeqCst);
            seen.lock().unwrap().push(*input);
            (0..*input)
                .map(|i| {
                    Step::run(format!("p{i}"), move |x: u32, _ctx: StepContext| async move { Ok(format!("{i}/{x}")) })
                        .build()
                        .unwrap()
                })
                .collect()
        })
        .merge(|parts: Vec<String>, _ctx| Ok(parts.join(" ")))
        .concurrency(1)
        .build()
        .unwrap();

    let ctx = StepContext::new();
    assert_eq!(fork.execute(3, &ctx).await.unwrap(), "0/3 1/3 2/3");
    assert_eq!(calls.load(SeqCst), 1, "one call for one execution, even with queued paths");
    assert_eq!(fork.execute(2, &ctx).await.unwrap(), "0/2 1/2");
    assert_eq!(calls.load(SeqCst), 2);
    assert_eq!(*inputs.lock().unwrap(), [3, 2]);
}

#[tokio::test]
async fn a_path_whose_future_panics_becomes_a_path_error_not_a_crash() {
    let log = log();
    let panicking = Step::run("boom", |x: u32, _ctx: StepContext| async move {
        if x < 100 {
            panic!("path exploded");
        }
        Ok(String::new())
    })
    .build()
    .unwrap();
    let all = Step::fork("f", ForkMode::All)
        .paths([ok_after("fine", 0, "F", &log), panicking.clone()])
        .merge(|parts: Vec<String>, _ctx| Ok(parts.concat()))
        .build()
        .unwrap();
    let (_, succeeded, failed) = unpack_partial(all.execute(0, &StepContext::new()).await.unwrap_err());
    let boom = failed.iter().find(|f| f.step_id == "boom").expect("the panicking path is reported as failed");
    assert_eq!(boom.index, 1);
    let msg = boom.error.to_string();
    assert!(msg.contains("panicked") && msg.contains("path exploded"), "{msg}");
    // The sibling either finished first or was cancelled by the failure; either way it is accounted for.
    assert_eq!(succeeded.len() + failed.len(), 2);

    let settle = Step::fork("s", ForkMode::Settle)
        .paths([panicking, ok_after("fine", 0, "F", &log)])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| {
            Ok(results.iter().map(|r| format!("{:?}", r.status())).collect::<Vec<_>>().join(","))
        })
        .build()
        .unwrap();
    assert_eq!(settle.execute(0, &StepContext::new()).await.unwrap(), "Rejected,Fulfilled");
}

#[tokio::test]
async fn a_path_closure_that_panics_before_returning_its_future_becomes_an_error_not_a_crash() {
    let log = log();
    let panicking = Step::run("boom", |x: u32, _ctx: StepContext| {
        if x < 100 {
            panic!("closure exploded");
        }
        async move { Ok(String::new()) }
    })
    .build()
    .unwrap();
    let settle = Step::fork("s", ForkMode::Settle)
        .paths([ok_after("fine", 0, "F", &log), panicking])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| {
            Ok(results.iter().map(|r| format!("{:?}", r.status())).collect::<Vec<_>>().join(","))
        })
        .build()
        .unwrap();
    let out = tokio::spawn(async move { settle.execute(0, &StepContext::new()).await }).await;
    let out = out.expect("the panic must not escape the fork").unwrap();
    assert_eq!(out, "Fulfilled,Rejected");
}

#[tokio::test]
async fn a_panicking_paths_fn_or_merge_becomes_an_error_not_a_crash() {
    let fork = Step::<u32, String>::fork("f", ForkMode::All)
        .paths_fn(|_input, _ctx| panic!("no paths today"))
        .merge(|parts, _ctx| Ok(parts.concat()))
        .build()
        .unwrap();
    let msg = fork.execute(0, &StepContext::new()).await.unwrap_err().to_string();
    assert!(msg.contains("panicked") && msg.contains("no paths today"), "{msg}");

    let log = log();
    let fork = Step::<u32, String>::fork("f", ForkMode::All)
        .paths([ok_after("p", 0, "P", &log)])
        .merge(|_parts, _ctx| panic!("merge exploded"))
        .build()
        .unwrap();
    let msg = fork.execute(0, &StepContext::new()).await.unwrap_err().to_string();
    assert!(msg.contains("panicked") && msg.contains("merge exploded"), "{msg}");
}
