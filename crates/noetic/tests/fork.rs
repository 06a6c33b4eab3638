//! Behaviour of `fork` steps: merge order, fail-fast, races and settling (concurrency limits, configuration,
//! cancellation, child contexts and panics: `fork_limits.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fork_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::prelude::*;
use tokio::time::Instant;

use fork_common::*;

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

    let out = fork.execute(0, &StepContext::new()).await.unwrap();

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
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "ABC");
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

    let err = within(fork.execute(0, &StepContext::new())).await.unwrap_err();

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
    let err = within(fork.execute(0, &StepContext::new())).await.unwrap_err();
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
    let out = within(fork.execute(0, &StepContext::new())).await.unwrap();

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
    assert_eq!(within(fork.execute(0, &StepContext::new())).await.unwrap(), "first");
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
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "third time lucky");
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
    let err = fork.execute(0, &StepContext::new()).await.unwrap_err();
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
    let out = fork.execute(0, &StepContext::new()).await.unwrap();
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
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "2");
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
    assert_eq!(fork.execute(0, &StepContext::new()).await.unwrap(), "2 rejected");
    assert_eq!(calls.load(SeqCst), 1);
}
