//! `every` steps: immediate first run, interval and jitter spacing, wake_on, error policy, cancellation, builder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::prelude::*;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// When a body ran and what it read from a channel.
type Run = (Duration, Option<String>);

/// A body that records the time of each run (relative to `origin`) and cancels the context after `stop_after`
/// runs.
fn recorder(origin: Instant, times: Arc<Mutex<Vec<Duration>>>, stop_after: usize) -> Step<(), ()> {
    Step::run("tick", move |(): (), ctx: StepContext| {
        let times = times.clone();
        async move {
            let n = {
                let mut t = times.lock().unwrap();
                t.push(origin.elapsed());
                t.len()
            };
            if n >= stop_after {
                ctx.cancel("enough runs");
            }
            Ok(())
        }
    })
    .build()
    .unwrap()
}

fn gaps(times: &[Duration]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

fn assert_cancelled(err: &NoeticError, reason: &str) {
    match err {
        NoeticError::Cancelled { reason: r } => assert_eq!(r.as_deref(), Some(reason)),
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_runs_the_body_immediately() {
    let origin = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(origin, times.clone(), 1), 1000.0).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "enough runs");
    assert_eq!(*times.lock().unwrap(), vec![Duration::ZERO], "first run happens at time zero");
    assert_eq!(origin.elapsed(), Duration::ZERO, "no interval elapsed before the first run");
}

#[tokio::test(start_paused = true)]
async fn every_spaces_runs_by_the_interval_without_jitter() {
    let origin = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(origin, times.clone(), 5), 100.0).jitter(0.0).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "enough runs");
    let times = times.lock().unwrap().clone();
    assert_eq!(times, (0..5).map(|k| k * 100 * MS).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn every_spaces_runs_within_interval_plus_minus_jitter() {
    let origin = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(origin, times.clone(), 40), 100.0).jitter(30.0).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "enough runs");
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), 40);
    assert_eq!(times[0], Duration::ZERO);
    let gaps = gaps(&times);
    for gap in &gaps {
        assert!(*gap >= 70 * MS && *gap <= 130 * MS, "gap {gap:?} outside 100 ± 30 ms");
    }
    assert!(gaps.iter().any(|g| *g != gaps[0]), "jitter varies the gaps: {gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn every_wake_on_ends_the_park_early_without_consuming_the_message() {
    let origin = Instant::now();
    let wake = Channel::<String>::queue("wake", 4).unwrap();
    let runs: Arc<Mutex<Vec<Run>>> = Arc::new(Mutex::new(Vec::new()));
    let (r, ch) = (runs.clone(), wake.clone());
    let body = Step::run("drain", move |(): (), ctx: StepContext| {
        let (r, ch) = (r.clone(), ch.clone());
        async move {
            let n = {
                let mut runs = r.lock().unwrap();
                runs.push((origin.elapsed(), ch.try_recv()));
                runs.len()
            };
            if n >= 2 {
                ctx.cancel("woken");
            }
            Ok(())
        }
    })
    .build()
    .unwrap();
    let step: Step<(), ()> = Step::every("e", body, 10_000.0).wake_on(&wake).build().unwrap();
    let sender = wake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        sender.try_send("wake up".to_owned()).unwrap();
    });
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "woken");
    assert_eq!(
        *runs.lock().unwrap(),
        vec![(Duration::ZERO, None), (250 * MS, Some("wake up".to_owned()))],
        "the send woke the park at 250 ms (not 10 s) and the body could still read the message"
    );
}

#[tokio::test(start_paused = true)]
async fn every_on_error_continue_keeps_going_and_emits_iteration_error_events() {
    let sink = EventSink::new(256);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let runs = Arc::new(Mutex::new(0u32));
    let r = runs.clone();
    let body = Step::run("sometimes_fails", move |(): (), ctx: StepContext| {
        let r = r.clone();
        async move {
            let n = {
                let mut runs = r.lock().unwrap();
                *runs += 1;
                *runs
            };
            if n == 4 {
                ctx.cancel("done");
            }
            if n <= 2 { Err(NoeticError::other(format!("failure {n}"))) } else { Ok(()) }
        }
    })
    .build()
    .unwrap();
    let step: Step<(), ()> = Step::every("poller", body, 50.0).build().unwrap();
    let err = step.execute((), &ctx).await.unwrap_err();
    assert_cancelled(&err, "done");
    assert_eq!(*runs.lock().unwrap(), 4, "failing iterations did not stop the schedule");

    let mut iteration_errors = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let EventKind::EveryIterationError { step_id, error } = &event.kind {
            iteration_errors.push((step_id.to_string(), error.to_string()));
        }
    }
    assert_eq!(iteration_errors.len(), 2, "one event per failed iteration: {iteration_errors:?}");
    for (k, (step_id, message)) in iteration_errors.iter().enumerate() {
        assert_eq!(step_id, "poller");
        assert!(message.contains(&format!("failure {}", k + 1)), "event {k} carries the error: {message}");
    }
}

#[tokio::test(start_paused = true)]
async fn every_on_error_continue_is_the_default() {
    let runs = Arc::new(Mutex::new(0u32));
    let r = runs.clone();
    let body = Step::run("fails_once", move |(): (), ctx: StepContext| {
        let r = r.clone();
        async move {
            let n = {
                let mut runs = r.lock().unwrap();
                *runs += 1;
                *runs
            };
            if n == 2 {
                ctx.cancel("second run");
            }
            if n == 1 { Err(NoeticError::other("first fails")) } else { Ok(()) }
        }
    })
    .build()
    .unwrap();
    let step: Step<(), ()> = Step::every("e", body, 10.0).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "second run");
    assert_eq!(*runs.lock().unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn every_on_error_fail_returns_the_error() {
    let runs = Arc::new(Mutex::new(0u32));
    let r = runs.clone();
    let body = Step::run("fails", move |(): (), _ctx| {
        let r = r.clone();
        async move {
            *r.lock().unwrap() += 1;
            Err::<(), _>(NoeticError::other("broken"))
        }
    })
    .build()
    .unwrap();
    let step: Step<(), ()> = Step::every("e", body, 10.0).on_error(EveryOnError::Fail).build().unwrap();
    let origin = Instant::now();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    match &err {
        NoeticError::StepFailed { step_id, cause, .. } => {
            assert_eq!(step_id, "fails");
            assert_eq!(cause.to_string(), "broken");
        }
        other => panic!("expected the body's StepFailed, got {other:?}"),
    }
    assert_eq!(*runs.lock().unwrap(), 1);
    assert_eq!(origin.elapsed(), Duration::ZERO, "failed at once, without parking");
}

#[tokio::test(start_paused = true)]
async fn every_ends_with_cancelled_when_cancelled_during_a_park() {
    let origin = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(origin, times.clone(), usize::MAX), 100.0).build().unwrap();
    let ctx = StepContext::new();
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(350)).await;
        canceller.cancel("shutdown");
    });
    let err = step.execute((), &ctx).await.unwrap_err();
    assert_cancelled(&err, "shutdown");
    assert_eq!(*times.lock().unwrap(), vec![Duration::ZERO, 100 * MS, 200 * MS, 300 * MS]);
    assert_eq!(origin.elapsed(), 350 * MS, "the park ended as soon as the context was cancelled");
}

#[tokio::test(start_paused = true)]
async fn every_ends_with_cancelled_when_the_body_cancels_after_n_runs() {
    let origin = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(origin, times.clone(), 3), 20.0).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert_cancelled(&err, "enough runs");
    assert_eq!(times.lock().unwrap().len(), 3, "no run after cancellation");
}

#[tokio::test]
async fn every_does_not_start_on_a_cancelled_context() {
    let times = Arc::new(Mutex::new(Vec::new()));
    let step: Step<(), ()> = Step::every("e", recorder(Instant::now(), times.clone(), 1), 10.0).build().unwrap();
    let ctx = StepContext::new();
    ctx.cancel("before start");
    let err = step.execute((), &ctx).await.unwrap_err();
    assert_cancelled(&err, "before start");
    assert!(times.lock().unwrap().is_empty());
}

#[test]
fn every_builder_rejects_invalid_interval_and_jitter() {
    let body = || Step::run("b", |(): (), _ctx| async { Ok(()) }).build().unwrap();

    for ms in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = Step::every("e", body(), ms).build::<()>().unwrap_err();
        assert_eq!(err.code, ConfigCode::InvalidIntervalMs, "interval {ms}");
    }
    for jitter in [-0.5, f64::NAN, f64::INFINITY] {
        let err = Step::every("e", body(), 10.0).jitter(jitter).build::<()>().unwrap_err();
        assert_eq!(err.code, ConfigCode::InvalidJitter, "jitter {jitter}");
    }
    let err = Step::every(" ", body(), 10.0).build::<()>().unwrap_err();
    assert_eq!(err.code, ConfigCode::EmptyStepId);

    assert!(Step::every("e", body(), 0.0).build::<()>().is_ok(), "a zero interval is valid");
    assert!(Step::every("e", body(), 10.0).jitter(0.0).build::<u32>().is_ok(), "zero jitter is valid");
}
