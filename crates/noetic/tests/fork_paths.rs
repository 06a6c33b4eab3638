//! Fork paths that finish at their first poll (the common `run` path): they start and end in path order, each in a
//! fresh context, and fail-fast, races and cancellation treat them as they treat paths that take time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::context::ExecutionId;
use noetic::model::StepMeta;
use noetic::prelude::*;

type S = Step<u32, String>;

/// A path that returns `out` at its first poll, counting its starts.
fn at_once(id: &str, out: &str, starts: &Arc<AtomicUsize>) -> S {
    let (out, starts) = (out.to_owned(), starts.clone());
    Step::run(id, move |_x: u32, _ctx: StepContext| {
        starts.fetch_add(1, SeqCst);
        let out = out.clone();
        async move { Ok(out) }
    })
    .build()
    .unwrap()
}

/// A path that fails at its first poll.
fn fails_at_once(id: &str) -> S {
    let message = format!("{id} broke");
    Step::run(id, move |_x: u32, _ctx: StepContext| {
        let message = message.clone();
        async move { Err(NoeticError::other(message)) }
    })
    .build()
    .unwrap()
}

/// A path that returns `out` after `ms` of virtual time.
fn after(id: &str, ms: u64, out: &str) -> S {
    let out = out.to_owned();
    Step::run(id, move |_x: u32, _ctx: StepContext| {
        let out = out.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(out)
        }
    })
    .build()
    .unwrap()
}

/// A path that waits for its cancellation; `stopped` counts the paths whose future was dropped or finished.
fn until_cancelled(id: &str, stopped: &Arc<AtomicUsize>) -> S {
    let stopped = stopped.clone();
    Step::run(id, move |_x: u32, ctx: StepContext| {
        let stopped = stopped.clone();
        async move {
            struct Stopped(Arc<AtomicUsize>);
            impl Drop for Stopped {
                fn drop(&mut self) {
                    self.0.fetch_add(1, SeqCst);
                }
            }
            let _stopped = Stopped(stopped);
            ctx.cancelled().await;
            Err(ctx.cancelled_error())
        }
    })
    .build()
    .unwrap()
}

fn concat(parts: Vec<String>, _ctx: &Context) -> Result<String, NoeticError> {
    Ok(parts.join(","))
}

#[tokio::test(start_paused = true)]
async fn paths_finishing_at_once_and_later_merge_in_path_order() {
    let starts = Arc::new(AtomicUsize::new(0));
    let fork = Step::fork("f", ForkMode::All)
        .paths([after("a", 20, "A"), at_once("b", "B", &starts), after("c", 10, "C"), at_once("d", "D", &starts)])
        .merge(concat)
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "A,B,C,D");
    assert_eq!(starts.load(SeqCst), 2);
}

#[tokio::test]
async fn each_path_finishing_at_once_emits_its_events_in_path_order_under_its_own_execution_id() {
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let starts = Arc::new(AtomicUsize::new(0));
    let fork = Step::fork("f", ForkMode::Settle)
        .paths([at_once("p0", "0", &starts), fails_at_once("p1"), at_once("p2", "2", &starts)])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(results.len().to_string()))
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &ctx).await.unwrap(), "3");

    let mut seen = Vec::new();
    let mut ids = Vec::new();
    while let Ok(e) = rx.try_recv() {
        let (what, step_id) = match &e.kind {
            EventKind::StepStarted { step_id, .. } => ("start", step_id),
            EventKind::StepCompleted { step_id, .. } => ("done", step_id),
            EventKind::StepFailed { step_id, .. } => ("fail", step_id),
            other => panic!("unexpected event {other:?}"),
        };
        seen.push(format!("{what} {step_id}"));
        if &**step_id != "f" {
            ids.push((step_id.to_string(), e.execution_id));
        }
    }
    assert_eq!(seen, ["start f", "start p0", "done p0", "start p1", "fail p1", "start p2", "done p2", "done f"]);
    for pair in ids.chunks(2) {
        assert_eq!(pair[0], pair[1], "a path's start and end carry its execution id");
        assert_ne!(pair[0].1, ctx.execution_id());
    }
    let mut distinct: Vec<ExecutionId> = ids.iter().map(|(_, id)| *id).collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "every path has its own execution id");
}

#[derive(Debug, PartialEq)]
struct AtStart {
    items: usize,
    cancelled: bool,
    usage: Usage,
    cost: f64,
    has_meta: bool,
}

#[tokio::test]
async fn a_path_finishing_at_once_leaves_nothing_of_its_context_to_the_next_path() {
    let seen: Arc<Mutex<Vec<(ExecutionId, AtStart)>>> = Arc::new(Mutex::new(Vec::new()));
    let kept: Arc<Mutex<Vec<Context>>> = Arc::new(Mutex::new(Vec::new()));
    let paths: Vec<S> = (0..6u32)
        .map(|i| {
            let (seen, kept) = (seen.clone(), kept.clone());
            Step::run(format!("p{i}"), move |_x: u32, ctx: StepContext| {
                let (seen, kept) = (seen.clone(), kept.clone());
                async move {
                    let at_start = AtStart {
                        items: ctx.item_count(),
                        cancelled: ctx.is_cancelled(),
                        usage: ctx.usage(),
                        cost: ctx.cost(),
                        has_meta: ctx.last_step_meta().is_some(),
                    };
                    seen.lock().unwrap().push((ctx.execution_id(), at_start));
                    // Everything a path can change in its own context.
                    ctx.push_item(Item::assistant(format!("written by p{i}")));
                    ctx.add_usage(&Usage { input_tokens: 7, ..Usage::default() }, 0.5);
                    ctx.set_last_step_meta(StepMeta::default());
                    if i == 2 {
                        kept.lock().unwrap().push(ctx.context().clone());
                    }
                    ctx.cancel(format!("p{i} is done with its context"));
                    Ok(format!("p{i}"))
                }
            })
            .build()
            .unwrap()
        })
        .collect();
    let fork = Step::fork("f", ForkMode::All).paths(paths).merge(concat).build().unwrap();
    let ctx = StepContext::new();
    ctx.push_item(Item::user("from parent"));

    assert_eq!(fork.execute(0, &ctx).await.unwrap(), "p0,p1,p2,p3,p4,p5");

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let fresh = AtStart { items: 1, cancelled: false, usage: Usage::default(), cost: 0.0, has_meta: false };
    for (i, (_, at_start)) in seen.iter().enumerate() {
        assert_eq!(at_start, &fresh, "path p{i} started in a fresh context");
    }
    let mut ids: Vec<ExecutionId> = seen.iter().map(|(id, _)| *id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "every path has its own execution id");
    let kept = kept.lock().unwrap();
    assert_eq!(kept[0].execution_id(), seen[2].0, "a context a path kept stays that path's");
    assert_eq!((kept[0].item_count(), kept[0].is_cancelled()), (2, true));
    assert!(!ctx.is_cancelled() && ctx.item_count() == 1, "the parent is untouched");
}

#[tokio::test]
async fn all_failure_at_once_cancels_running_paths_and_starts_no_more() {
    let (starts, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let fork = Step::fork("f", ForkMode::All)
        .paths([
            until_cancelled("waits", &stopped),
            at_once("ok", "OK", &starts),
            fails_at_once("bad"),
            at_once("later", "L", &starts),
        ])
        .merge(concat)
        .build()
        .unwrap();
    let err = fork.execute(0, &StepContext::new()).await.unwrap_err();
    assert_eq!(starts.load(SeqCst), 1, "the path after the failure never started");
    assert_eq!(stopped.load(SeqCst), 1, "the waiting path was cancelled and stopped before the fork returned");
    let NoeticError::ForkPartial { succeeded, failed, .. } = err else { panic!("expected ForkPartial, got {err:?}") };
    assert_eq!(succeeded.iter().map(|s| s.index).collect::<Vec<_>>(), [1]);
    let failures: Vec<(usize, bool)> = failed.iter().map(|f| (f.index, f.error.is_cancelled())).collect();
    assert_eq!(failures, [(0, true), (2, false), (3, true)], "in path order; the others cancelled");
    assert_eq!(failed[1].error.to_string(), "step 'bad' failed: bad broke");
}

#[tokio::test]
async fn race_won_at_once_cancels_running_paths_and_starts_no_more() {
    let (starts, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let fork = Step::fork("race", ForkMode::Race)
        .paths([
            until_cancelled("waits", &stopped),
            fails_at_once("bad"),
            at_once("wins", "W", &starts),
            at_once("later", "L", &starts),
        ])
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "W");
    assert_eq!(starts.load(SeqCst), 1, "only the winner of the two started");
    assert_eq!(stopped.load(SeqCst), 1, "the waiting loser stopped before the fork returned");
}

#[tokio::test]
async fn a_parent_cancelled_by_a_path_finishing_at_once_starts_no_further_path() {
    for mode in [ForkMode::All, ForkMode::Settle] {
        let starts = Arc::new(AtomicUsize::new(0));
        let parent = StepContext::new();
        let to_cancel = parent.clone();
        let canceller = Step::run("cancels", move |_x: u32, _ctx: StepContext| {
            to_cancel.cancel("parent stopped");
            async move { Ok("C".to_owned()) }
        })
        .build()
        .unwrap();
        let fork = Step::fork("f", mode)
            .paths([at_once("first", "1", &starts), canceller, at_once("never", "N", &starts)])
            .merge(concat)
            .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(results.len().to_string()))
            .build()
            .unwrap();
        match fork.execute(0, &parent).await {
            Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some("parent stopped")),
            other => panic!("{mode:?}: expected Cancelled, got {other:?}"),
        }
        assert_eq!(starts.load(SeqCst), 1, "{mode:?}: no path started after the parent was cancelled");
    }
}

#[tokio::test]
async fn paths_finishing_at_once_respect_the_concurrency_limit_and_all_run() {
    let current = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let paths: Vec<S> = (0..5)
        .map(|i| {
            let (current, max) = (current.clone(), max.clone());
            Step::run(format!("p{i}"), move |_x: u32, _ctx: StepContext| {
                let now = current.fetch_add(1, SeqCst) + 1;
                max.fetch_max(now, SeqCst);
                let current = current.clone();
                async move {
                    current.fetch_sub(1, SeqCst);
                    Ok(format!("{i}"))
                }
            })
            .build()
            .unwrap()
        })
        .collect();
    let fork = Step::fork("f", ForkMode::All).paths(paths).merge(concat).concurrency(2).build().unwrap();
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "0,1,2,3,4");
    assert_eq!(max.load(SeqCst), 1, "each finished before the next started");
}
