//! Behaviour of `fork` steps: merge order, fail-fast, races, settling, concurrency limits, cancellation, panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::context::ExecutionId;
use noetic::error::{PathFailure, PathSuccess};
use noetic::prelude::*;
use tokio::time::{Instant, sleep};

type S = Step<u32, String>;

/// Log of events (path starts, completions) shared between paths and the test.
type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// A path that records its start, sleeps `ms` (virtual time), records its completion and returns `out`.
fn ok_after(id: &str, ms: u64, out: &str, log: &Log) -> S {
    let (name, out, log) = (id.to_owned(), out.to_owned(), log.clone());
    Step::run(id, move |_x: u32, _ctx: Context| {
        let (name, out, log) = (name.clone(), out.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push(format!("done {name}"));
            Ok(out)
        }
    })
    .build()
    .unwrap()
}

/// A path that records its start, sleeps `ms` (virtual time) and fails with `message`.
fn fail_after(id: &str, ms: u64, message: &str, log: &Log) -> S {
    let (name, message, log) = (id.to_owned(), message.to_owned(), log.clone());
    Step::run(id, move |_x: u32, _ctx: Context| {
        let (name, message, log) = (name.clone(), message.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push(format!("fail {name}"));
            Err(NoeticError::other(message))
        }
    })
    .build()
    .unwrap()
}

/// What a blocking path saw.
#[derive(Default)]
struct Probe {
    started: AtomicBool,
    /// The path's `ctx.cancelled()` resolved.
    observed_cancel: AtomicBool,
    /// The path's future was dropped or finished.
    stopped: AtomicBool,
    /// `ctx.is_cancelled()` when the path stopped.
    cancelled_at_stop: AtomicBool,
}

/// Records that a path stopped (on drop, so it also fires when the path's future is dropped).
struct StopGuard {
    probe: Arc<Probe>,
    ctx: Context,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.probe.cancelled_at_stop.store(self.ctx.is_cancelled(), SeqCst);
        self.probe.stopped.store(true, SeqCst);
    }
}

/// A path that blocks until its context is cancelled, then returns the cancellation error.
fn blocker(id: &str, probe: &Arc<Probe>, log: &Log) -> S {
    let (name, probe, log) = (id.to_owned(), probe.clone(), log.clone());
    Step::run(id, move |_x: u32, ctx: Context| {
        let (name, probe, log) = (name.clone(), probe.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            probe.started.store(true, SeqCst);
            let _guard = StopGuard { probe: probe.clone(), ctx: ctx.clone() };
            ctx.cancelled().await;
            probe.observed_cancel.store(true, SeqCst);
            Err(ctx.cancelled_error())
        }
    })
    .build()
    .unwrap()
}

/// A path that sleeps for a long time, recording whether it ever finished its sleep and when it stopped.
fn long_sleeper(id: &str, probe: &Arc<Probe>, log: &Log) -> S {
    let (name, probe, log) = (id.to_owned(), probe.clone(), log.clone());
    Step::run(id, move |_x: u32, ctx: Context| {
        let (name, probe, log) = (name.clone(), probe.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            probe.started.store(true, SeqCst);
            let _guard = StopGuard { probe: probe.clone(), ctx: ctx.clone() };
            sleep(Duration::from_secs(3600)).await;
            log.lock().unwrap().push(format!("done {name}"));
            Ok(format!("{name} slept"))
        }
    })
    .build()
    .unwrap()
}

/// Counts how many paths run at once.
#[derive(Default)]
struct Gauge {
    current: AtomicUsize,
    max: AtomicUsize,
    started: AtomicUsize,
}

struct GaugeGuard(Arc<Gauge>);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, SeqCst);
    }
}

fn enter(gauge: &Arc<Gauge>) -> GaugeGuard {
    let now = gauge.current.fetch_add(1, SeqCst) + 1;
    gauge.max.fetch_max(now, SeqCst);
    gauge.started.fetch_add(1, SeqCst);
    GaugeGuard(gauge.clone())
}

/// Six paths of different lengths that register with `gauge`; they fail when `fail` is set.
fn gauged_paths(gauge: &Arc<Gauge>, fail: bool) -> Vec<S> {
    (0..6u64)
        .map(|i| {
            let gauge = gauge.clone();
            Step::run(format!("g{i}"), move |_x: u32, _ctx: Context| {
                let gauge = gauge.clone();
                async move {
                    let _g = enter(&gauge);
                    sleep(Duration::from_millis(10 * ((i * 7) % 5 + 1))).await;
                    if fail { Err(NoeticError::other(format!("g{i} failed"))) } else { Ok(format!("g{i}")) }
                }
            })
            .build()
            .unwrap()
        })
        .collect()
}

/// Cancels `ctx` from another task after `ms` of virtual time.
fn cancel_after(ctx: &Context, ms: u64) -> tokio::task::JoinHandle<()> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        sleep(Duration::from_millis(ms)).await;
        ctx.cancel("parent stopped");
    })
}

fn unpack_partial(err: NoeticError) -> (String, Vec<PathSuccess>, Vec<PathFailure>) {
    match err {
        NoeticError::ForkPartial { step_id, succeeded, failed } => (step_id, succeeded, failed),
        other => panic!("expected ForkPartial, got {other:?}"),
    }
}

/// Awaits `fut`, failing the test (instead of hanging it) if it has not finished after a minute of virtual time.
async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.expect("the fork hung: a path was never cancelled")
}

fn assert_cancelled_by_parent(result: Result<String, NoeticError>) {
    match result {
        Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some("parent stopped")),
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// All
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn all_merges_in_path_order_whatever_the_completion_order() {
    let log = log();
    let merged_input = Arc::new(Mutex::new(Vec::new()));
    let seen = merged_input.clone();
    let fork = Step::fork("f", ForkMode::All)
        .paths([ok_after("a", 30, "A", &log), ok_after("b", 20, "B", &log), ok_after("c", 10, "C", &log)])
        .merge(move |parts: Vec<String>, _ctx| {
            *seen.lock().unwrap() = parts.clone();
            Ok(parts.join(","))
        })
        .build()
        .unwrap();

    let out = fork.execute(0, &Context::new()).await.unwrap();

    let completions: Vec<String> = entries(&log).into_iter().filter(|e| e.starts_with("done")).collect();
    assert_eq!(completions, ["done c", "done b", "done a"], "later paths finished first");
    assert_eq!(*merged_input.lock().unwrap(), ["A", "B", "C"]);
    assert_eq!(out, "A,B,C");
}

#[tokio::test(start_paused = true)]
async fn all_runs_paths_concurrently() {
    let log = log();
    let fork = Step::fork("f", ForkMode::All)
        .paths([ok_after("a", 100, "A", &log), ok_after("b", 100, "B", &log), ok_after("c", 100, "C", &log)])
        .merge(|parts: Vec<String>, _ctx| Ok(parts.concat()))
        .build()
        .unwrap();
    let start = Instant::now();
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "ABC");
    assert_eq!(start.elapsed(), Duration::from_millis(100), "three 100 ms paths overlap");
}

#[tokio::test(start_paused = true)]
async fn all_fails_fast_cancelling_running_siblings_and_never_starting_queued_paths() {
    let log = log();
    let p1 = Arc::new(Probe::default());
    let p3 = Arc::new(Probe::default());
    let merged = Arc::new(AtomicBool::new(false));
    let merged_flag = merged.clone();
    // Concurrency 3: p0, p1, p2 start; p0 succeeds at 5 ms so p3 starts; p2 fails at 10 ms while p4 is queued.
    let fork = Step::fork("f", ForkMode::All)
        .paths([
            ok_after("p0", 5, "zero", &log),
            blocker("p1", &p1, &log),
            fail_after("p2", 10, "p2 broke", &log),
            blocker("p3", &p3, &log),
            ok_after("p4", 1, "four", &log),
        ])
        .merge(move |parts: Vec<String>, _ctx| {
            merged_flag.store(true, SeqCst);
            Ok(parts.concat())
        })
        .concurrency(3)
        .build()
        .unwrap();

    let err = within(fork.execute(0, &Context::new())).await.unwrap_err();

    for (name, probe) in [("p1", &p1), ("p3", &p3)] {
        assert!(probe.started.load(SeqCst), "{name} started");
        assert!(probe.observed_cancel.load(SeqCst), "{name} observed the cancellation");
        assert!(probe.stopped.load(SeqCst), "{name} stopped before the fork returned");
    }
    let started: Vec<String> = entries(&log).into_iter().filter(|e| e.starts_with("start")).collect();
    assert_eq!(started, ["start p0", "start p1", "start p2", "start p3"], "the queued path p4 never started");
    assert!(!merged.load(SeqCst), "merge does not run after a failure");

    let (step_id, succeeded, failed) = unpack_partial(err);
    assert_eq!(step_id, "f");
    assert_eq!(succeeded.len(), 1);
    assert_eq!((succeeded[0].index, succeeded[0].step_id.as_str()), (0, "p0"));
    assert_eq!(succeeded[0].value.as_ref().unwrap().downcast_ref::<String>().unwrap(), "zero");

    let order: Vec<(usize, &str)> = failed.iter().map(|f| (f.index, f.step_id.as_str())).collect();
    assert_eq!(order, [(1, "p1"), (2, "p2"), (3, "p3"), (4, "p4")], "failures in path order");
    assert!(failed[0].error.is_cancelled());
    match &failed[1].error {
        NoeticError::StepFailed { step_id, cause, .. } => {
            assert_eq!(step_id, "p2");
            assert_eq!(cause.to_string(), "p2 broke");
        }
        other => panic!("expected StepFailed for p2, got {other:?}"),
    }
    assert!(failed[2].error.is_cancelled());
    assert!(failed[3].error.is_cancelled(), "a never-started path is reported as cancelled");
}

#[tokio::test(start_paused = true)]
async fn all_failure_ends_the_fork_without_waiting_for_long_siblings() {
    let log = log();
    let probe = Arc::new(Probe::default());
    let fork = Step::fork("f", ForkMode::All)
        .paths([long_sleeper("slow", &probe, &log), fail_after("bad", 10, "nope", &log)])
        .merge(|parts: Vec<String>, _ctx| Ok(parts.concat()))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = within(fork.execute(0, &Context::new())).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(10), "the hour-long sibling was cut short");
    assert!(probe.stopped.load(SeqCst) && probe.cancelled_at_stop.load(SeqCst), "sibling stopped, cancelled");
    assert!(!entries(&log).contains(&"done slow".to_owned()));
    let (_, succeeded, failed) = unpack_partial(err);
    assert!(succeeded.is_empty());
    assert_eq!(failed.iter().map(|f| f.index).collect::<Vec<_>>(), [0, 1]);
}

// ---------------------------------------------------------------------------------------------------------------
// Race
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn race_first_success_wins_and_losers_are_cancelled_and_stopped_before_it_returns() {
    let log = log();
    let blocked = Arc::new(Probe::default());
    let sleeping = Arc::new(Probe::default());
    let fork = Step::fork("race", ForkMode::Race)
        .paths([
            blocker("blocked", &blocked, &log),
            ok_after("fast", 10, "winner", &log),
            long_sleeper("slow", &sleeping, &log),
        ])
        .build()
        .unwrap();

    let start = Instant::now();
    let out = within(fork.execute(0, &Context::new())).await.unwrap();

    assert_eq!(out, "winner");
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert!(blocked.observed_cancel.load(SeqCst), "the blocked loser observed its cancellation");
    for (name, probe) in [("blocked", &blocked), ("slow", &sleeping)] {
        assert!(probe.stopped.load(SeqCst), "loser {name} stopped before the fork returned");
        assert!(probe.cancelled_at_stop.load(SeqCst), "loser {name} was cancelled");
    }
    assert!(!entries(&log).contains(&"done slow".to_owned()), "the slow loser did not finish");
}

#[tokio::test(start_paused = true)]
async fn race_never_starts_queued_paths_once_a_path_has_won() {
    let log = log();
    let probe = Arc::new(Probe::default());
    let fork = Step::fork("race", ForkMode::Race)
        .paths([
            ok_after("p0", 10, "first", &log),
            blocker("p1", &probe, &log),
            ok_after("p2", 1, "queued", &log),
            ok_after("p3", 1, "queued", &log),
        ])
        .concurrency(2)
        .build()
        .unwrap();
    assert_eq!(within(fork.execute(0, &Context::new())).await.unwrap(), "first");
    assert!(probe.observed_cancel.load(SeqCst));
    let started: Vec<String> = entries(&log).into_iter().filter(|e| e.starts_with("start")).collect();
    assert_eq!(started, ["start p0", "start p1"]);
}

#[tokio::test(start_paused = true)]
async fn race_failure_launches_the_next_queued_path() {
    let log = log();
    let fork = Step::fork("race", ForkMode::Race)
        .paths([
            fail_after("p0", 10, "p0 failed", &log),
            fail_after("p1", 10, "p1 failed", &log),
            ok_after("p2", 10, "third time lucky", &log),
            ok_after("p3", 10, "never", &log),
        ])
        .concurrency(1)
        .build()
        .unwrap();
    let start = Instant::now();
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "third time lucky");
    assert_eq!(start.elapsed(), Duration::from_millis(30), "paths ran one after another");
    assert_eq!(
        entries(&log),
        ["start p0", "fail p0", "start p1", "fail p1", "start p2", "done p2"],
        "each failure launched the next path; p3 never started"
    );
}

#[tokio::test(start_paused = true)]
async fn race_with_every_path_failing_reports_all_failures_in_path_order() {
    let log = log();
    let fork = Step::fork("race", ForkMode::Race)
        .paths([
            fail_after("a", 30, "a failed", &log),
            fail_after("b", 20, "b failed", &log),
            fail_after("c", 10, "c failed", &log),
        ])
        .build()
        .unwrap();
    let err = fork.execute(0, &Context::new()).await.unwrap_err();
    let (step_id, succeeded, failed) = unpack_partial(err);
    assert_eq!(step_id, "race");
    assert!(succeeded.is_empty());
    let got: Vec<(usize, String, String)> = failed
        .iter()
        .map(|f| match &f.error {
            NoeticError::StepFailed { cause, .. } => (f.index, f.step_id.clone(), cause.to_string()),
            other => panic!("expected StepFailed, got {other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (0, "a".to_owned(), "a failed".to_owned()),
            (1, "b".to_owned(), "b failed".to_owned()),
            (2, "c".to_owned(), "c failed".to_owned()),
        ]
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Settle
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn settle_reports_every_outcome_in_path_order_and_does_not_fail_for_path_errors() {
    let log = log();
    let fork = Step::fork("s", ForkMode::Settle)
        .paths([ok_after("a", 30, "A", &log), fail_after("b", 10, "b broke", &log), ok_after("c", 20, "C", &log)])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| {
            let ids: Vec<&str> = results.iter().map(|r| r.step_id.as_str()).collect();
            assert_eq!(ids, ["a", "b", "c"]);
            let statuses: Vec<SettleStatus> = results.iter().map(SettleResult::status).collect();
            assert_eq!(statuses, [SettleStatus::Fulfilled, SettleStatus::Rejected, SettleStatus::Fulfilled]);
            assert_eq!(results[0].value().map(String::as_str), Some("A"));
            assert!(results[0].error().is_none());
            assert!(results[1].value().is_none());
            assert_eq!(results[2].value().map(String::as_str), Some("C"));
            let err = results[1].error().unwrap();
            assert!(matches!(err, NoeticError::StepFailed { step_id, .. } if step_id == "b"), "{err:?}");
            Ok(results
                .iter()
                .map(|r| match r.value() {
                    Some(v) => v.clone(),
                    None => format!("<{}>", r.error().unwrap()),
                })
                .collect::<Vec<_>>()
                .join("|"))
        })
        .build()
        .unwrap();
    let out = fork.execute(0, &Context::new()).await.unwrap();
    assert_eq!(out, "A|<step 'b' failed: b broke>|C");
    let completions: Vec<String> = entries(&log).into_iter().filter(|e| !e.starts_with("start")).collect();
    assert_eq!(completions, ["fail b", "done c", "done a"], "completion order differed from path order");
}

#[tokio::test(start_paused = true)]
async fn settle_runs_every_path_to_its_end_even_after_a_failure() {
    let log = log();
    let fork = Step::fork("s", ForkMode::Settle)
        .paths([fail_after("early", 1, "x", &log), ok_after("late", 50, "L", &log)])
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(format!("{}", results.len())))
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "2");
    assert!(entries(&log).contains(&"done late".to_owned()), "the failure did not cancel the sibling");
}

#[tokio::test(start_paused = true)]
async fn settle_merges_even_when_every_path_rejects() {
    let log = log();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let fork = Step::fork("s", ForkMode::Settle)
        .paths([fail_after("a", 5, "a failed", &log), fail_after("b", 1, "b failed", &log)])
        .merge_settled(move |results: Vec<SettleResult<String>>, _ctx| {
            counter.fetch_add(1, SeqCst);
            assert!(results.iter().all(|r| r.status() == SettleStatus::Rejected));
            Ok(format!("{} rejected", results.len()))
        })
        .build()
        .unwrap();
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "2 rejected");
    assert_eq!(calls.load(SeqCst), 1);
}

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
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "g0,g1,g2,g3,g4,g5");
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
    assert_eq!(fork.execute(0, &Context::new()).await.unwrap(), "6");
    assert_eq!(gauge.started.load(SeqCst), 6);
    assert_eq!(gauge.max.load(SeqCst), 3, "three at a time, never more");
}

#[tokio::test(start_paused = true)]
async fn race_never_runs_more_paths_than_the_concurrency_limit() {
    let gauge = Arc::new(Gauge::default());
    let fork = Step::fork("f", ForkMode::Race).paths(gauged_paths(&gauge, true)).concurrency(2).build().unwrap();
    let err = fork.execute(0, &Context::new()).await.unwrap_err();
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
    let ctx = Context::new();
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
    let ctx = Context::new();
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
    let ctx = Context::new();
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
        let ctx = Context::new();
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
    assert_eq!(all.execute(0, &Context::new()).await.unwrap(), "all merged 0");

    let settle = Step::<u32, String>::fork("settle", ForkMode::Settle)
        .paths(Vec::new())
        .merge_settled(|results: Vec<SettleResult<String>>, _ctx| Ok(format!("settle merged {}", results.len())))
        .build()
        .unwrap();
    assert_eq!(settle.execute(0, &Context::new()).await.unwrap(), "settle merged 0");
}

#[tokio::test]
async fn race_with_no_paths_fails_with_an_empty_fork_partial() {
    let race = Step::<u32, String>::fork("race", ForkMode::Race).paths(Vec::new()).build().unwrap();
    let (step_id, succeeded, failed) = unpack_partial(race.execute(0, &Context::new()).await.unwrap_err());
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
            Step::run(format!("p{i}"), move |_x: u32, ctx: Context| {
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

    let ctx = Context::new();
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
        .paths([Step::run("self-cancel", |_x: u32, ctx: Context| async move {
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
    let ctx = Context::new();
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
                    Step::run(format!("p{i}"), move |x: u32, _ctx: Context| async move { Ok(format!("{i}/{x}")) })
                        .build()
                        .unwrap()
                })
                .collect()
        })
        .merge(|parts: Vec<String>, _ctx| Ok(parts.join(" ")))
        .concurrency(1)
        .build()
        .unwrap();

    let ctx = Context::new();
    assert_eq!(fork.execute(3, &ctx).await.unwrap(), "0/3 1/3 2/3");
    assert_eq!(calls.load(SeqCst), 1, "one call for one execution, even with queued paths");
    assert_eq!(fork.execute(2, &ctx).await.unwrap(), "0/2 1/2");
    assert_eq!(calls.load(SeqCst), 2);
    assert_eq!(*inputs.lock().unwrap(), [3, 2]);
}

#[tokio::test]
async fn a_path_whose_future_panics_becomes_a_path_error_not_a_crash() {
    let log = log();
    let panicking = Step::run("boom", |x: u32, _ctx: Context| async move {
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
    let (_, succeeded, failed) = unpack_partial(all.execute(0, &Context::new()).await.unwrap_err());
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
    assert_eq!(settle.execute(0, &Context::new()).await.unwrap(), "Rejected,Fulfilled");
}

#[tokio::test]
async fn a_path_closure_that_panics_before_returning_its_future_becomes_an_error_not_a_crash() {
    let log = log();
    let panicking = Step::run("boom", |x: u32, _ctx: Context| {
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
    let out = tokio::spawn(async move { settle.execute(0, &Context::new()).await }).await;
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
    let msg = fork.execute(0, &Context::new()).await.unwrap_err().to_string();
    assert!(msg.contains("panicked") && msg.contains("no paths today"), "{msg}");

    let log = log();
    let fork = Step::<u32, String>::fork("f", ForkMode::All)
        .paths([ok_after("p", 0, "P", &log)])
        .merge(|_parts, _ctx| panic!("merge exploded"))
        .build()
        .unwrap();
    let msg = fork.execute(0, &Context::new()).await.unwrap_err().to_string();
    assert!(msg.contains("panicked") && msg.contains("merge exploded"), "{msg}");
}
