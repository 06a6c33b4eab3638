//! Until predicates and combinators, checked against hand-built snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::model::{StepMeta, ToolCall, Usage};
use noetic::prelude::*;
use noetic::step::until::{Snapshot, Verification, default_text};
use serde_json::json;

/// A snapshot after one successful iteration, with no usage, cost, time or model metadata.
fn snap<'a, O>(output: &'a O, text: &'a str, history: &'a VecDeque<O>) -> Snapshot<'a, O> {
    Snapshot {
        step_count: 1,
        usage: Usage::default(),
        cost: 0.0,
        elapsed: Duration::ZERO,
        last_output: output,
        last_text: text,
        history,
        depth: 0,
        last_step_meta: None,
    }
}

/// Evaluates `p` on a text snapshot (`String` output equal to its text).
fn check_text(p: &Until<String>, text: &str) -> Verdict {
    let output = text.to_owned();
    let history = VecDeque::from([output.clone()]);
    p.check(&snap(&output, text, &history))
}

/// Evaluates `p` with a given step count.
fn check_steps(p: &Until<String>, step_count: u32) -> Verdict {
    let output = String::new();
    let history = VecDeque::new();
    p.check(&Snapshot { step_count, ..snap(&output, "", &history) })
}

fn stop(reason: &str) -> Verdict {
    Verdict { stop: true, reason: Some(reason.to_owned()), feedback: None }
}

/// A custom predicate counting its evaluations and answering `verdict`.
fn counted(calls: &Arc<AtomicU32>, verdict: Verdict) -> Until<String> {
    let calls = calls.clone();
    until::custom(move |_s| {
        calls.fetch_add(1, Ordering::SeqCst);
        verdict.clone()
    })
}

#[test]
fn max_steps_stops_at_the_step_count() {
    let p = until::max_steps(3);
    assert_eq!(check_steps(&p, 2), Verdict::keep_going());
    assert_eq!(check_steps(&p, 3), stop("Reached max steps (3)"));
    assert_eq!(check_steps(&p, 4), stop("Reached max steps (3)"));
}

#[test]
fn max_steps_zero_stops_at_the_first_check() {
    let p = until::max_steps(0);
    assert_eq!(check_steps(&p, 0), stop("Reached max steps (0)"));
    assert_eq!(check_steps(&p, 1), stop("Reached max steps (0)"));
}

#[test]
fn max_cost_stops_once_cost_reaches_the_limit() {
    let p: Until<String> = until::max_cost(0.5);
    let (output, history) = (String::new(), VecDeque::new());
    assert_eq!(p.check(&Snapshot { cost: 0.49, ..snap(&output, "", &history) }), Verdict::keep_going());
    assert_eq!(p.check(&Snapshot { cost: 0.5, ..snap(&output, "", &history) }), stop("Reached max cost ($0.5)"));
    assert!(p.check(&Snapshot { cost: 3.0, ..snap(&output, "", &history) }).stop);
}

#[test]
fn max_duration_stops_once_elapsed_reaches_the_limit() {
    let p: Until<String> = until::max_duration(Duration::from_secs(2));
    let (output, history) = (String::new(), VecDeque::new());
    let at = |ms: u64| p.check(&Snapshot { elapsed: Duration::from_millis(ms), ..snap(&output, "", &history) });
    assert_eq!(at(1999), Verdict::keep_going());
    assert_eq!(at(2000), stop("Reached max duration (2000ms)"));
    assert!(at(60_000).stop);
}

#[test]
fn no_tool_calls_never_stops_before_the_first_step() {
    let p: Until<String> = until::no_tool_calls();
    let (output, history) = (String::new(), VecDeque::new());
    let empty = Some(Arc::new(StepMeta::default()));
    assert_eq!(p.check(&Snapshot { step_count: 0, ..snap(&output, "", &history) }), Verdict::keep_going());
    assert_eq!(
        p.check(&Snapshot { step_count: 0, last_step_meta: empty, ..snap(&output, "", &history) }),
        Verdict::keep_going()
    );
}

#[test]
fn no_tool_calls_stops_when_the_last_response_had_no_tool_calls() {
    let p: Until<String> = until::no_tool_calls();
    let (output, history) = (String::new(), VecDeque::new());
    let empty = Some(Arc::new(StepMeta::default()));
    assert_eq!(
        p.check(&Snapshot { last_step_meta: empty, ..snap(&output, "", &history) }),
        stop("No tool calls in last response")
    );
    assert_eq!(p.check(&snap(&output, "", &history)), stop("No tool calls in last response"), "absent meta");
}

#[test]
fn no_tool_calls_keeps_going_while_the_model_calls_tools() {
    let p: Until<String> = until::no_tool_calls();
    let (output, history) = (String::new(), VecDeque::new());
    let call = ToolCall { id: "c1".into(), name: "search".into(), arguments: "{}".into() };
    let meta = Some(Arc::new(StepMeta { tool_calls: vec![call].into(), ..StepMeta::default() }));
    assert_eq!(
        p.check(&Snapshot { step_count: 5, last_step_meta: meta, ..snap(&output, "", &history) }),
        Verdict::keep_going()
    );
}

#[test]
fn never_never_stops() {
    let p: Until<String> = until::never();
    let (output, history) = ("DONE".to_owned(), VecDeque::new());
    let v = p.check(&Snapshot {
        step_count: u32::MAX,
        cost: 1e9,
        elapsed: Duration::from_secs(1_000_000),
        ..snap(&output, "DONE", &history)
    });
    assert_eq!(v, Verdict::keep_going());
}

#[test]
fn verified_stops_on_pass_and_carries_feedback_in_both_cases() {
    let p: Until<u32> = until::verified(|n: &u32| {
        if *n >= 10 {
            Verification { pass: true, feedback: Some("well done".into()) }
        } else {
            Verification { pass: false, feedback: Some(format!("need {} more", 10 - n)) }
        }
    });
    let history = VecDeque::new();
    assert_eq!(
        p.check(&snap(&7, "", &history)),
        Verdict { stop: false, reason: None, feedback: Some("need 3 more".into()) }
    );
    assert_eq!(
        p.check(&snap(&12, "", &history)),
        Verdict { stop: true, reason: Some("Verification passed".into()), feedback: Some("well done".into()) }
    );
}

#[test]
fn converged_never_stops_on_the_first_call_and_stops_on_equal_text() {
    let p = until::converged();
    assert_eq!(check_text(&p, "a"), Verdict::keep_going(), "first call never stops");
    assert_eq!(check_text(&p, "a"), stop("Output converged"));
    assert_eq!(check_text(&p, "b"), Verdict::keep_going());
    assert_eq!(check_text(&p, "b"), stop("Output converged"));

    let fresh = until::converged();
    assert_eq!(check_text(&fresh, "b"), Verdict::keep_going(), "each predicate instance has its own state");
}

#[test]
fn converged_by_stops_when_similarity_reaches_the_threshold() {
    let pairs = Arc::new(Mutex::new(Vec::new()));
    let seen = pairs.clone();
    let p = until::converged_by(0.8, move |prev: &str, cur: &str| {
        seen.lock().unwrap().push((prev.to_owned(), cur.to_owned()));
        let (a, b) = (prev.len() as f64, cur.len() as f64);
        a.min(b) / a.max(b)
    });
    assert_eq!(check_text(&p, "aaaaaaaaaa"), Verdict::keep_going(), "first call never stops");
    assert_eq!(check_text(&p, "aaaaa"), Verdict::keep_going(), "similarity 0.5 < 0.8");
    assert_eq!(check_text(&p, "aaaa"), stop("Output converged (similarity: 0.800)"));
    assert_eq!(
        *pairs.lock().unwrap(),
        vec![("aaaaaaaaaa".to_owned(), "aaaaa".to_owned()), ("aaaaa".to_owned(), "aaaa".to_owned())],
        "similarity compares the previous text with the current one"
    );
}

#[test]
fn output_contains_stops_on_the_marker() {
    let p = until::output_contains("DONE");
    assert_eq!(check_text(&p, "still working"), Verdict::keep_going());
    assert_eq!(check_text(&p, "all DONE now"), stop("Output contains marker: DONE"));
}

#[test]
fn output_contains_with_an_empty_marker_always_stops() {
    let p = until::output_contains("");
    assert_eq!(check_text(&p, ""), stop("Output contains marker: "));
    assert!(check_text(&p, "anything").stop);
}

#[test]
fn output_equals_stops_only_on_the_exact_sentinel() {
    let p = until::output_equals("END");
    assert_eq!(check_text(&p, "END"), stop("Output matched sentinel: END"));
    assert_eq!(check_text(&p, "END "), Verdict::keep_going());
    assert_eq!(check_text(&p, "THE END"), Verdict::keep_going());
}

#[test]
fn custom_returns_the_functions_verdict_as_is() {
    let p: Until<u32> = until::custom(|s| {
        if *s.last_output > 2 && s.history.len() == 3 {
            Verdict { stop: true, reason: Some("custom".into()), feedback: Some("fb".into()) }
        } else {
            Verdict { stop: false, reason: None, feedback: Some("keep".into()) }
        }
    });
    let history = VecDeque::from([1, 2, 3]);
    assert_eq!(
        p.check(&snap(&3, "", &history)),
        Verdict { stop: true, reason: Some("custom".into()), feedback: Some("fb".into()) }
    );
    assert_eq!(p.check(&snap(&1, "", &history)), Verdict { stop: false, reason: None, feedback: Some("keep".into()) });
}

#[test]
fn any_returns_the_first_stopping_verdict_and_skips_later_predicates() {
    let (before, after) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let first_stop = Verdict { stop: true, reason: Some("first".into()), feedback: Some("fb1".into()) };
    let second_stop = Verdict { stop: true, reason: Some("second".into()), feedback: None };
    let p = until::any([
        counted(&before, Verdict::keep_going()),
        until::custom(move |_s| first_stop.clone()),
        counted(&after, second_stop),
    ]);
    assert_eq!(
        check_text(&p, "x"),
        Verdict { stop: true, reason: Some("first".into()), feedback: Some("fb1".into()) },
        "the first stopping verdict is returned as-is"
    );
    assert_eq!(before.load(Ordering::SeqCst), 1);
    assert_eq!(after.load(Ordering::SeqCst), 0, "predicates after the stopping one are not evaluated");
}

#[test]
fn any_without_a_stopping_predicate_keeps_going_without_reason_or_feedback() {
    let p = until::any([
        until::verified(|_: &String| Verification { pass: false, feedback: Some("lost".into()) }),
        until::max_steps(10),
    ]);
    assert_eq!(check_text(&p, "x"), Verdict::keep_going());
}

#[test]
fn any_of_nothing_never_stops() {
    let p: Until<String> = until::any([]);
    assert_eq!(check_text(&p, "x"), Verdict::keep_going());
}

#[test]
fn all_stops_when_every_predicate_stops_joining_reasons() {
    let p = until::all([
        until::max_steps(1),
        until::output_contains("x"),
        until::custom(|_s| Verdict { stop: true, reason: None, feedback: Some("dropped".into()) }),
        until::verified(|_: &String| Verification { pass: true, feedback: Some("also dropped".into()) }),
    ]);
    assert_eq!(
        check_text(&p, "x"),
        stop("Reached max steps (1); Output contains marker: x; Verification passed"),
        "non-empty reasons joined with \"; \", feedback dropped"
    );
}

#[test]
fn all_short_circuits_at_the_first_non_stopping_predicate() {
    let after = Arc::new(AtomicU32::new(0));
    let p = until::all([
        until::custom(|_s| Verdict::stop("yes")),
        until::custom(|_s| Verdict { stop: false, reason: Some("no".into()), feedback: Some("fb".into()) }),
        counted(&after, Verdict::stop("later")),
    ]);
    assert_eq!(check_text(&p, "x"), Verdict::keep_going());
    assert_eq!(after.load(Ordering::SeqCst), 0, "predicates after the first non-stopping one are not evaluated");
}

#[test]
fn all_without_reasons_stops_with_all_predicates_satisfied() {
    let p = until::all([until::custom(|_s| Verdict { stop: true, reason: None, feedback: None })]);
    assert_eq!(check_text(&p, "x"), stop("All predicates satisfied"));
}

#[test]
fn all_of_nothing_stops() {
    let p: Until<String> = until::all([]);
    assert_eq!(check_text(&p, "x"), stop("All predicates satisfied"));
}

#[test]
fn default_text_of_strings_and_json() {
    assert_eq!(default_text(&"plain".to_owned()), "plain");
    assert_eq!(default_text(&json!("a json string")), "a json string");
    assert_eq!(default_text(&json!({"text": "the text", "other": 1})), "the text");
    assert_eq!(default_text(&json!({"answer": 42})), r#"{"answer":42}"#);
    assert_eq!(default_text(&json!([1, 2])), "[1,2]");
    assert_eq!(default_text(&json!(42)), "42");
    assert_eq!(default_text(&json!(true)), "true");
}
