//! `loop` steps: until, max_iterations, on_error, inbox, prepare_next, history, builder validation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::prelude::*;
use noetic::step::until::Verification;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A body step `x -> x + 1` that records every input it sees.
fn add_one(log: Arc<Mutex<Vec<u32>>>) -> Step<u32, u32> {
    Step::run("add_one", move |x: u32, _ctx| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(x);
            Ok(x + 1)
        }
    })
    .build()
    .unwrap()
}

/// A body step `x -> x + 1` that fails on the calls (1-based) listed in `fail_on`, recording every input.
fn flaky(calls: Arc<Mutex<Vec<u32>>>, fail_on: &'static [usize]) -> Step<u32, u32> {
    Step::run("flaky", move |x: u32, _ctx| {
        let calls = calls.clone();
        async move {
            let n = {
                let mut c = calls.lock().unwrap();
                c.push(x);
                c.len()
            };
            if fail_on.contains(&n) { Err(NoeticError::other(format!("boom on call {n}"))) } else { Ok(x + 1) }
        }
    })
    .build()
    .unwrap()
}

fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

fn log<T>() -> Arc<Mutex<Vec<T>>> {
    Arc::new(Mutex::new(Vec::new()))
}

#[tokio::test]
async fn loop_stops_when_until_says_stop_and_returns_the_last_output() {
    let inputs = log();
    let step = Step::loop_("count", [add_one(inputs.clone())]).until(until::max_steps(3)).build().unwrap();
    let out = step.execute(10, &StepContext::new()).await.unwrap();
    assert_eq!(out, 13);
    assert_eq!(*inputs.lock().unwrap(), vec![10, 11, 12], "each output is the next iteration's input");
}

#[tokio::test]
async fn loop_pipes_output_through_multi_step_body_and_into_next_iteration() {
    let first_inputs = log();
    let second_inputs = log();
    let (f, s) = (first_inputs.clone(), second_inputs.clone());
    let inc = Step::run("inc", move |x: u32, _ctx| {
        let f = f.clone();
        async move {
            f.lock().unwrap().push(x);
            Ok(x + 1)
        }
    })
    .build()
    .unwrap();
    let double = Step::run("double", move |x: u32, _ctx| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(x);
            Ok(x * 2)
        }
    })
    .build()
    .unwrap();
    let step = Step::loop_("pipe", [inc, double]).until(until::max_steps(3)).build().unwrap();
    let out = step.execute(0, &StepContext::new()).await.unwrap();
    // 0 -> 1 -> 2; 2 -> 3 -> 6; 6 -> 7 -> 14
    assert_eq!(out, 14);
    assert_eq!(*first_inputs.lock().unwrap(), vec![0, 2, 6]);
    assert_eq!(*second_inputs.lock().unwrap(), vec![1, 3, 7]);
}

#[tokio::test]
async fn loop_exceeding_max_iterations_is_an_error_not_a_silent_stop() {
    let inputs = log();
    let step =
        Step::loop_("forever", [add_one(inputs.clone())]).until(until::never()).max_iterations(5).build().unwrap();
    let err = step.execute(0, &StepContext::new()).await.unwrap_err();
    match err {
        NoeticError::LoopLimitExceeded { step_id, max_iterations } => {
            assert_eq!(step_id, "forever");
            assert_eq!(max_iterations, 5);
        }
        other => panic!("expected LoopLimitExceeded, got {other:?}"),
    }
    assert_eq!(inputs.lock().unwrap().len(), 5, "exactly max_iterations iterations ran");
}

#[tokio::test]
async fn loop_on_error_retry_reruns_the_iteration_with_the_same_input() {
    let calls = log();
    let handler_calls = counter();
    let h = handler_calls.clone();
    // Call 2 (first try of iteration 2) and call 3 (its retry) fail.
    let step = Step::loop_("retry", [flaky(calls.clone(), &[2, 3])])
        .until(until::max_steps(2))
        .on_error(move |_err, _ctx| {
            h.fetch_add(1, Ordering::SeqCst);
            LoopErrorAction::Retry
        })
        .build()
        .unwrap();
    let out = step.execute(5, &StepContext::new()).await.unwrap();
    assert_eq!(out, 7);
    assert_eq!(*calls.lock().unwrap(), vec![5, 6, 6, 6], "retries rerun with the same input");
    assert_eq!(handler_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn loop_on_error_skip_with_previous_output_reuses_it_and_evaluates_until() {
    let calls = log();
    let seen = log();
    let seen_in_until = seen.clone();
    let step = Step::loop_("skip", [flaky(calls.clone(), &[2])])
        .until(until::custom(move |s| {
            seen_in_until.lock().unwrap().push((s.step_count, *s.last_output, s.history.len()));
            if s.step_count >= 2 { Verdict::stop("two") } else { Verdict::keep_going() }
        }))
        .on_error(|_err, _ctx| LoopErrorAction::Skip)
        .build()
        .unwrap();
    let out = step.execute(0, &StepContext::new()).await.unwrap();
    assert_eq!(out, 2);
    // Call 1: 0 -> 1. Call 2 fails: skip reuses 1 (until sees it, step_count unchanged). Call 3: 1 -> 2.
    assert_eq!(*calls.lock().unwrap(), vec![0, 1, 1]);
    assert_eq!(*seen.lock().unwrap(), vec![(1, 1, 1), (1, 1, 2), (2, 2, 3)]);
}

#[tokio::test]
async fn loop_on_error_skip_without_previous_output_runs_again() {
    let calls = log();
    let until_calls = counter();
    let u = until_calls.clone();
    let step = Step::loop_("skip_first", [flaky(calls.clone(), &[1])])
        .until(until::custom(move |s| {
            u.fetch_add(1, Ordering::SeqCst);
            if s.step_count >= 1 { Verdict::stop("one") } else { Verdict::keep_going() }
        }))
        .on_error(|_err, _ctx| LoopErrorAction::Skip)
        .build()
        .unwrap();
    let out = step.execute(3, &StepContext::new()).await.unwrap();
    assert_eq!(out, 4);
    assert_eq!(*calls.lock().unwrap(), vec![3, 3], "the failed first iteration runs again with the same input");
    assert_eq!(until_calls.load(Ordering::SeqCst), 1, "until is not evaluated for a skip with nothing to reuse");
}

#[tokio::test]
async fn loop_on_error_abort_returns_the_error() {
    let calls = log();
    let handler_calls = counter();
    let h = handler_calls.clone();
    let step = Step::loop_("abort", [flaky(calls.clone(), &[1])])
        .until(until::max_steps(3))
        .on_error(move |err, _ctx| {
            assert!(err.to_string().contains("boom on call 1"), "handler sees the error: {err}");
            h.fetch_add(1, Ordering::SeqCst);
            LoopErrorAction::Abort
        })
        .build()
        .unwrap();
    let err = step.execute(0, &StepContext::new()).await.unwrap_err();
    match &err {
        NoeticError::StepFailed { step_id, cause, .. } => {
            assert_eq!(step_id, "flaky");
            assert_eq!(cause.to_string(), "boom on call 1");
        }
        other => panic!("expected the body's StepFailed, got {other:?}"),
    }
    assert_eq!(handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(calls.lock().unwrap().len(), 1, "nothing runs after abort");
}

#[tokio::test]
async fn loop_without_on_error_returns_the_error() {
    let calls = log();
    let step = Step::loop_("plain", [flaky(calls.clone(), &[2])]).until(until::max_steps(5)).build().unwrap();
    let err = step.execute(0, &StepContext::new()).await.unwrap_err();
    assert!(matches!(&err, NoeticError::StepFailed { step_id, .. } if step_id == "flaky"), "got {err:?}");
    assert!(err.to_string().contains("boom on call 2"));
    assert_eq!(*calls.lock().unwrap(), vec![0, 1], "the loop stops at the first failure");
}

#[tokio::test]
async fn loop_retries_count_toward_max_iterations() {
    let calls = log();
    let handler_calls = counter();
    let h = handler_calls.clone();
    let step = Step::loop_("always_fails", [flaky(calls.clone(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])])
        .until(until::max_steps(1))
        .max_iterations(4)
        .on_error(move |_err, _ctx| {
            h.fetch_add(1, Ordering::SeqCst);
            LoopErrorAction::Retry
        })
        .build()
        .unwrap();
    let err = step.execute(0, &StepContext::new()).await.unwrap_err();
    assert!(
        matches!(err, NoeticError::LoopLimitExceeded { max_iterations: 4, .. }),
        "expected LoopLimitExceeded, got {err:?}"
    );
    assert_eq!(calls.lock().unwrap().len(), 4, "retries are iterations");
    assert_eq!(handler_calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn loop_never_hands_cancellation_to_on_error() {
    let started = Arc::new(Notify::new());
    let handler_calls = counter();
    let h = handler_calls.clone();
    let s = started.clone();
    let body = Step::run("waits", move |_x: u32, ctx: StepContext| {
        let s = s.clone();
        async move {
            s.notify_one();
            ctx.cancelled().await;
            Err::<u32, _>(ctx.cancelled_error())
        }
    })
    .build()
    .unwrap();
    let step = Step::loop_("cancellable", [body])
        .until(until::never())
        .on_error(move |_err, _ctx| {
            h.fetch_add(1, Ordering::SeqCst);
            LoopErrorAction::Retry
        })
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let canceller = {
        let ctx = ctx.clone();
        async move {
            started.notified().await;
            ctx.cancel("user stop");
        }
    };
    let (result, ()) = tokio::join!(step.execute(0, &ctx), canceller);
    let err = result.unwrap_err();
    assert!(err.is_cancelled(), "expected Cancelled, got {err:?}");
    assert_eq!(handler_calls.load(Ordering::SeqCst), 0, "on_error must never see a cancellation");
}

#[tokio::test]
async fn loop_continues_on_inbox_message_appending_it_as_developer_message() {
    let inbox = Channel::<String>::queue("inbox", 8).unwrap();
    inbox.try_send("also check tests".to_owned()).unwrap();
    inbox.try_send("and docs".to_owned()).unwrap();
    let inputs = log();
    let step = Step::loop_("agent", [add_one(inputs.clone())])
        .until(until::max_steps(1))
        .inbox(inbox.clone())
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let out = step.execute(0, &ctx).await.unwrap();
    assert_eq!(out, 3, "one iteration per inbox message, then a final stop on an empty inbox");
    assert_eq!(*inputs.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(ctx.items(), vec![Item::developer("also check tests"), Item::developer("and docs")]);
    assert!(inbox.is_empty());
}

#[tokio::test(start_paused = true)]
async fn loop_with_park_timeout_waits_for_a_later_inbox_message() {
    let inbox = Channel::<String>::queue("inbox", 8).unwrap();
    let times = log();
    let origin = Instant::now();
    let t = times.clone();
    let body = Step::run("stamp", move |x: u32, _ctx| {
        let t = t.clone();
        async move {
            t.lock().unwrap().push(origin.elapsed());
            Ok(x + 1)
        }
    })
    .build()
    .unwrap();
    let step = Step::loop_("parked", [body])
        .until(until::max_steps(1))
        .inbox(inbox.clone())
        .park_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let sender = inbox.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sender.try_send("late message".to_owned()).unwrap();
    });
    let ctx = StepContext::new();
    let out = step.execute(0, &ctx).await.unwrap();
    late.await.unwrap();
    assert_eq!(out, 2, "the late message kept the loop running for one more iteration");
    assert_eq!(*times.lock().unwrap(), vec![Duration::ZERO, Duration::from_millis(500)]);
    assert_eq!(ctx.items(), vec![Item::developer("late message")]);
    assert_eq!(origin.elapsed(), Duration::from_millis(1500), "the final park waited the full timeout");
}

#[tokio::test(start_paused = true)]
async fn loop_with_zero_park_timeout_does_not_wait_for_the_inbox() {
    let inbox = Channel::<String>::queue("inbox", 8).unwrap();
    let inputs = log();
    let step = Step::loop_("nowait", [add_one(inputs.clone())])
        .until(until::max_steps(1))
        .inbox(inbox.clone())
        .park_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let sender = inbox.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sender.try_send("too late".to_owned()).unwrap();
    });
    let origin = Instant::now();
    let ctx = StepContext::new();
    let out = step.execute(0, &ctx).await.unwrap();
    assert_eq!(origin.elapsed(), Duration::ZERO, "no time passed: the loop did not park");
    assert_eq!(out, 1);
    assert_eq!(*inputs.lock().unwrap(), vec![0]);
    assert!(ctx.items().is_empty());
    late.await.unwrap();
    assert_eq!(inbox.len(), 1, "the late message was never consumed");
}

#[tokio::test]
async fn loop_prepare_next_receives_output_and_verdict_feedback() {
    let body_inputs: Arc<Mutex<Vec<String>>> = log();
    let prepared = log();
    let b = body_inputs.clone();
    let body = Step::run("draft", move |input: String, _ctx| {
        let b = b.clone();
        async move {
            b.lock().unwrap().push(input.clone());
            Ok(if input.contains("mention tests") { "draft with tests".to_owned() } else { "draft".to_owned() })
        }
    })
    .build()
    .unwrap();
    let p = prepared.clone();
    let step = Step::loop_("refine", [body])
        .until(until::verified(|out: &String| {
            if out.contains("tests") {
                Verification { pass: true, feedback: Some("looks good".into()) }
            } else {
                Verification { pass: false, feedback: Some("mention tests".into()) }
            }
        }))
        .prepare_next(move |output, verdict, _ctx| {
            p.lock().unwrap().push((output.clone(), verdict.stop, verdict.feedback.clone()));
            format!("{output} | feedback: {}", verdict.feedback.clone().unwrap_or_default())
        })
        .build()
        .unwrap();
    let out = step.execute("write".to_owned(), &StepContext::new()).await.unwrap();
    assert_eq!(out, "draft with tests");
    assert_eq!(*prepared.lock().unwrap(), vec![("draft".to_owned(), false, Some("mention tests".to_owned()))]);
    assert_eq!(*body_inputs.lock().unwrap(), vec!["write".to_owned(), "draft | feedback: mention tests".to_owned()]);
}

#[tokio::test]
async fn loop_map_turns_outputs_of_another_type_into_next_inputs() {
    let inputs = log();
    let i = inputs.clone();
    let body = Step::run("xs", move |n: u32, _ctx| {
        let i = i.clone();
        async move {
            i.lock().unwrap().push(n);
            Ok("x".repeat(n as usize))
        }
    })
    .build()
    .unwrap();
    let step: Step<u32, String> = Step::loop_map("grow", body, |out: String, _verdict, _ctx| out.len() as u32 + 1)
        .until(until::output_equals("xxx"))
        .build()
        .unwrap();
    let out = step.execute(1, &StepContext::new()).await.unwrap();
    assert_eq!(out, "xxx");
    assert_eq!(*inputs.lock().unwrap(), vec![1, 2, 3]);
}

#[tokio::test]
async fn loop_max_history_size_bounds_snapshot_history() {
    let histories = log();
    let h = histories.clone();
    let step = Step::loop_("hist", [add_one(log())])
        .max_history_size(3)
        .until(until::custom(move |s| {
            h.lock().unwrap().push(s.history.iter().copied().collect::<Vec<u32>>());
            if s.step_count >= 5 { Verdict::stop("five") } else { Verdict::keep_going() }
        }))
        .build()
        .unwrap();
    assert_eq!(step.execute(0, &StepContext::new()).await.unwrap(), 5);
    assert_eq!(
        *histories.lock().unwrap(),
        vec![vec![1], vec![1, 2], vec![1, 2, 3], vec![2, 3, 4], vec![3, 4, 5]],
        "oldest entries are dropped beyond max_history_size"
    );
}

#[tokio::test]
async fn loop_default_history_keeps_every_output_below_the_default_bound() {
    let lengths = log();
    let l = lengths.clone();
    let step = Step::loop_("hist_default", [add_one(log())])
        .until(until::custom(move |s| {
            l.lock().unwrap().push(s.history.len());
            if s.step_count >= 4 { Verdict::stop("four") } else { Verdict::keep_going() }
        }))
        .build()
        .unwrap();
    assert_eq!(step.execute(0, &StepContext::new()).await.unwrap(), 4);
    assert_eq!(*lengths.lock().unwrap(), vec![1, 2, 3, 4]);
}

#[test]
fn loop_builder_rejects_invalid_configuration() {
    let body = || Step::run("b", |x: u32, _ctx| async move { Ok(x) }).build().unwrap();

    let err = Step::<u32, u32>::loop_("empty", []).until(until::max_steps(1)).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::MissingLoopBody);

    let err = Step::loop_("no_until", [body()]).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::MissingUntilPredicate);

    let err = Step::loop_("zero", [body()]).until(until::max_steps(1)).max_iterations(0).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::InvalidMaxIterations);

    let err = Step::loop_("", [body()]).until(until::max_steps(1)).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::EmptyStepId);
    let err = Step::loop_("   ", [body()]).until(until::max_steps(1)).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::EmptyStepId);

    assert!(Step::loop_("ok", [body()]).until(until::max_steps(1)).max_iterations(1).build().is_ok());
}

#[tokio::test]
async fn loop_stops_when_the_until_predicate_panics() {
    let inputs = log();
    let step = Step::loop_("panicky", [add_one(inputs.clone())])
        .until(until::custom(|_s| panic!("predicate exploded")))
        .build()
        .unwrap();
    let out = step.execute(0, &StepContext::new()).await.unwrap();
    assert_eq!(out, 1, "the loop stopped after the first iteration with its output");
    assert_eq!(*inputs.lock().unwrap(), vec![0]);
}

#[tokio::test]
async fn loop_panicking_predicate_yields_a_predicate_error_stop_verdict() {
    // The verdict is observable through prepare_next when an inbox message keeps the loop going.
    let inbox = Channel::<String>::queue("inbox", 4).unwrap();
    inbox.try_send("one more".to_owned()).unwrap();
    let verdicts = log();
    let v = verdicts.clone();
    let step = Step::loop_("panicky", [add_one(log())])
        .until(until::custom(|_s| panic!("predicate exploded")))
        .inbox(inbox)
        .prepare_next(move |out, verdict, _ctx| {
            v.lock().unwrap().push(verdict.clone());
            out
        })
        .build()
        .unwrap();
    let out = step.execute(0, &StepContext::new()).await.unwrap();
    assert_eq!(out, 2);
    let verdicts = verdicts.lock().unwrap();
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].stop);
    let reason = verdicts[0].reason.clone().unwrap();
    assert!(reason.starts_with("Predicate error: "), "reason was {reason:?}");
    assert!(reason.contains("predicate exploded"), "reason was {reason:?}");
}

#[tokio::test(start_paused = true)]
async fn loop_cancelled_while_parked_on_the_inbox_returns_cancelled() {
    let inbox = Channel::<String>::queue("inbox", 8).unwrap();
    let step = Step::loop_("parked", [add_one(log())])
        .until(until::max_steps(1))
        .inbox(inbox)
        .park_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let ctx = StepContext::new();
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel("user left");
    });
    let origin = Instant::now();
    let err = step.execute(0, &ctx).await.unwrap_err();
    assert!(matches!(&err, NoeticError::Cancelled { reason: Some(r) } if r == "user left"), "got {err:?}");
    assert_eq!(origin.elapsed(), Duration::from_millis(100), "cancellation ended the park at once");
}
