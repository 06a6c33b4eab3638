//! The interpreter's common rules: depth limit, cancellation before start, events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, OnceLock};

use noetic::context::MAX_DEPTH;
use noetic::prelude::*;

#[tokio::test]
async fn runaway_recursion_stops_at_the_depth_limit() {
    let cell: Arc<OnceLock<Step<u32, u32>>> = Arc::new(OnceLock::new());
    let inner = cell.clone();
    let recurse = Step::branch("recurse", move |_: &u32, _| inner.get().cloned()).build().unwrap();
    cell.set(recurse.clone()).unwrap();
    let err = recurse.execute(0, &StepContext::new()).await.unwrap_err();
    match err {
        NoeticError::DepthExceeded { step_id, depth, limit } => {
            assert_eq!(step_id, "recurse");
            assert_eq!((depth, limit), (MAX_DEPTH, MAX_DEPTH));
        }
        other => panic!("expected DepthExceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn steps_emit_started_and_completed_events_in_nesting_order() {
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let inner = Step::run("inner", |x: u8, _| async move { Ok(x) }).build().unwrap();
    let outer = Step::spawn("outer", inner).build().unwrap();
    outer.execute(1, &ctx).await.unwrap();
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push(match &e.kind {
            EventKind::StepStarted { step_id, kind } => format!("start {kind} {step_id}"),
            EventKind::StepCompleted { step_id, kind } => format!("done {kind} {step_id}"),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, vec!["start spawn outer", "start run inner", "done run inner", "done spawn outer"]);
}

#[tokio::test]
async fn a_failing_step_emits_step_failed_with_the_error() {
    let sink = EventSink::new(8);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let step = Step::run("bad", |_: (), _| async { Err::<(), _>(NoeticError::other("x")) }).build().unwrap();
    step.execute((), &ctx).await.unwrap_err();
    let _started = rx.try_recv().unwrap();
    match &rx.try_recv().unwrap().kind {
        EventKind::StepFailed { step_id, error, .. } => {
            assert_eq!(&**step_id, "bad");
            assert_eq!(error.kind(), "step_failed");
        }
        other => panic!("expected StepFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn events_serialise_to_json_with_a_type_tag() {
    let sink = EventSink::new(8);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    Step::run("s", |x: u8, _| async move { Ok(x) }).build().unwrap().execute(0, &ctx).await.unwrap();
    let json = serde_json::to_value(rx.try_recv().unwrap()).unwrap();
    assert_eq!(json["type"], "step_started");
    assert_eq!(json["step_id"], "s");
    assert_eq!(json["kind"], "run");
    assert_eq!(json["execution_id"], ctx.execution_id().to_string());
}

#[tokio::test]
async fn steps_are_cheap_clones_that_share_their_definition() {
    let step = Step::run("shared", |x: u8, _| async move { Ok(x + 1) }).build().unwrap();
    let copy = step.clone();
    assert_eq!(copy.id(), "shared");
    assert_eq!(copy.kind(), StepKind::Run);
    assert_eq!(copy.execute(1, &StepContext::new()).await.unwrap(), 2);
}
