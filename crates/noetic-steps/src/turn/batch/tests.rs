//! The turn core's groups of calls that run together, as plain tests: inputs in, actions out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::super::tests::{allow, calls, none_pending, pending, result, step};
use super::super::{Input, SKIPPED_RESULT, TurnCore};
use super::{CANCELLED_RESULT, cancelled_result, interrupts};
use crate::error::NoeticError;
use crate::turn::Polled;

/// A session turn of a step running up to `limit` calls at once, past its turn-start checkpoint.
fn started(limit: u32) -> TurnCore {
    let mut core = TurnCore::new("agent", 10, true).with_parallel_tools(limit);
    assert_eq!(step(&mut core, Input::Start), ["poll at turn start"]);
    assert_eq!(step(&mut core, none_pending()), ["call model round 0 tail []"]);
    core
}

/// `started`, then a response asking for `ids`, accepted: the core asks which calls may run together.
fn classifying(limit: u32, ids: &[&str]) -> TurnCore {
    let mut core = started(limit);
    step(&mut core, Input::response(calls(ids)));
    let lines = step(&mut core, allow());
    assert_eq!(lines.last().unwrap(), &format!("classify {} call(s)", ids.len()));
    core
}

fn safe(flags: &[bool]) -> Input {
    Input::Classified(flags.to_vec())
}

#[test]
fn a_single_call_runs_alone_without_asking_which_calls_may_run_together() {
    let mut core = started(4);
    step(&mut core, Input::response(calls(&["c1"])));
    assert_eq!(step(&mut core, allow()).last().unwrap(), "run c1");
}

#[test]
fn consecutive_concurrent_safe_calls_run_together_up_to_the_limit_and_a_call_not_declared_safe_runs_alone() {
    let mut core = classifying(2, &["c1", "c2", "c3", "c4", "c5", "c6"]);
    // c1 c2 c3 are safe (the limit 2 splits them), c4 is not, c5 c6 are.
    assert_eq!(step(&mut core, safe(&[true, true, true, false, true, true])), ["run together c1 c2"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["run together c2"]);
    assert_eq!(step(&mut core, result("c2", "two", false)), ["append <- c1 one | <- c2 two", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["run c3"], "a run of one safe call is a call alone");
    assert_eq!(step(&mut core, result("c3", "three", false)), ["append <- c3 three", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["run c4"]);
    assert_eq!(step(&mut core, result("c4", "four", false)), ["append <- c4 four", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["run together c5 c6"]);
    step(&mut core, result("c6", "six", false));
    assert_eq!(step(&mut core, result("c5", "five", false)), ["append <- c5 five | <- c6 six", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["call model round 1 tail []"]);
}

#[test]
fn results_of_a_group_are_appended_in_call_order_whatever_order_they_finish_in() {
    let mut core = classifying(10, &["c1", "c2", "c3"]);
    assert_eq!(step(&mut core, safe(&[true, true, true])), ["run together c1 c2 c3"]);
    assert_eq!(step(&mut core, result("c3", "three", false)), ["run together c1 c2"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["run together c2"]);
    assert_eq!(
        step(&mut core, result("c2", "two", true)),
        ["append <- c1 one | <- c2 ERROR two | <- c3 three", "poll"]
    );
}

#[test]
fn steering_found_after_a_group_skips_the_calls_after_it() {
    let mut core = classifying(2, &["c1", "c2", "c3"]);
    step(&mut core, safe(&[true, true, true]));
    step(&mut core, result("c1", "one", false));
    step(&mut core, result("c2", "two", false));
    assert_eq!(
        step(&mut core, pending()),
        [
            format!("append <- c3 ERROR {SKIPPED_RESULT}"),
            "skipped c3".to_owned(),
            "call model round 1 tail []".to_owned()
        ]
    );
}

#[test]
fn calls_cancelled_by_steering_complete_the_group_and_the_checkpoint_after_it_skips_the_rest() {
    let mut core = classifying(3, &["c1", "c2", "c3", "c4"]);
    step(&mut core, safe(&[true, true, true, false]));
    step(&mut core, result("c2", "two", false));
    // The driver took the message while c1 and c3 ran, and cancelled them.
    step(&mut core, Input::ToolDone(cancelled_result("c1")));
    assert_eq!(
        step(&mut core, Input::ToolDone(cancelled_result("c3"))),
        [
            format!("append <- c1 ERROR {CANCELLED_RESULT} | <- c2 two | <- c3 ERROR {CANCELLED_RESULT}"),
            "poll".to_owned()
        ]
    );
    assert_eq!(
        step(&mut core, pending()),
        [
            format!("append <- c4 ERROR {SKIPPED_RESULT}"),
            "skipped c4".to_owned(),
            "call model round 1 tail []".to_owned()
        ]
    );
}

#[test]
fn only_pending_steering_that_skips_the_rest_of_a_batch_cancels_running_calls_and_only_when_configured() {
    let Input::Polled(found) = pending() else { unreachable!() };
    assert!(interrupts(&found, true));
    assert!(!interrupts(&found, false), "without interrupt_running running calls finish");
    assert!(!interrupts(&Polled { skip_rest: false, ..found }, true), "the finish-batch policy lets them finish");
    assert!(!interrupts(&Polled { pending: false, ..found }, true));
}

#[test]
fn a_failure_while_a_group_runs_keeps_the_results_in_and_gives_every_other_call_one() {
    let mut core = classifying(2, &["c1", "c2", "c3"]);
    step(&mut core, safe(&[true, true, false]));
    step(&mut core, result("c2", "two", false));
    let cancelled = NoeticError::Cancelled { reason: Some("stop".to_owned()) };
    assert_eq!(
        step(&mut core, Input::Failed(cancelled)),
        [
            "append <- c1 ERROR Tool call not completed: cancelled: stop | <- c2 two | <- c3 ERROR Tool call not \
             completed: cancelled: stop",
            "fail: cancelled: stop",
        ]
    );
}

#[test]
fn a_group_replayed_from_its_inputs_resumes_with_its_recorded_results_and_offers_the_others_as_interrupted() {
    let inputs = [
        Input::Start,
        none_pending(),
        Input::response(calls(&["c1", "c2", "c3"])),
        allow(),
        safe(&[true, true, true]),
        result("c2", "two", false),
    ];
    let mut replayed = TurnCore::new("agent", 10, true).with_parallel_tools(4);
    for input in inputs {
        replayed.advance(input);
    }
    assert!(replayed.is_at_durable_point());
    assert_eq!(step(&mut replayed, Input::Resume), ["resume together c1 c3"]);
    let saved = serde_json::to_string(&replayed).unwrap();
    let mut restored: TurnCore = serde_json::from_str(&saved).unwrap();
    assert_eq!(restored, replayed);
    step(&mut restored, result("c3", "three", false));
    assert_eq!(step(&mut restored, result("c1", "one", false)), ["append <- c1 one | <- c2 two | <- c3 three", "poll"]);
}

#[test]
fn a_step_that_runs_calls_one_after_another_saves_its_core_as_before() {
    let mut core = started(1);
    step(&mut core, Input::response(calls(&["c1", "c2"])));
    assert_eq!(step(&mut core, allow()).last().unwrap(), "run c1");
    let saved = serde_json::to_value(&core).unwrap();
    for field in ["parallel", "interrupt_running", "concurrent"] {
        assert!(saved.get(field).is_none(), "a sequential core has no '{field}': {saved}");
    }
}
