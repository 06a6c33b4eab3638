//! `tool` steps: preset arguments, schema validation, approval, errors, cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use noetic::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize)]
struct Query {
    path: String,
    limit: u32,
}

#[derive(Deserialize, Debug, PartialEq)]
struct Listing {
    path: String,
    limit: u32,
}

fn echo_tool() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::builder("list", "Lists a folder.")
            .input_schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "maximum": 100}},
                "required": ["path", "limit"]
            }))
            .output_schema(json!({"type": "object", "required": ["path", "limit"]}))
            .handler(|args, _| async move { Ok(args) })
            .build()
            .unwrap(),
    )
}

fn tool_failure(err: &NoeticError) -> String {
    match err {
        NoeticError::StepFailed { cause, .. } => match &**cause {
            NoeticError::ToolFailed { message, .. } => message.clone(),
            other => panic!("expected ToolFailed inside StepFailed, got {other:?}"),
        },
        other => panic!("expected StepFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn preset_args_override_the_input() {
    let mut preset = serde_json::Map::new();
    preset.insert("limit".into(), json!(5));
    let step: Step<Query, Listing> = Step::tool("ls", echo_tool()).args(preset).build().unwrap();
    let out = step.execute(Query { path: "/workspace".into(), limit: 50 }, &StepContext::new()).await.unwrap();
    assert_eq!(out, Listing { path: "/workspace".into(), limit: 5 });
}

#[tokio::test]
async fn arguments_that_break_the_input_schema_are_rejected_before_the_tool_runs() {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let tool = FnTool::builder("strict", "Needs a number.")
        .input_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
        .handler(move |_, _| {
            r.store(true, Ordering::SeqCst);
            async { Ok(Value::Null) }
        })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let err = step.execute(json!({"n": "seven"}), &StepContext::new()).await.unwrap_err();
    let msg = tool_failure(&err);
    assert!(msg.contains("invalid arguments") && msg.contains("/n"), "{msg}");
    assert!(!ran.load(Ordering::SeqCst), "the tool never ran");
}

#[tokio::test]
async fn a_result_that_breaks_the_output_schema_fails_the_step() {
    let tool = FnTool::builder("liar", "Returns the wrong shape.")
        .output_schema(json!({"type": "object", "required": ["ok"]}))
        .handler(|_, _| async { Ok(json!({"nope": 1})) })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let msg = tool_failure(&step.execute(json!({}), &StepContext::new()).await.unwrap_err());
    assert!(msg.contains("output schema"), "{msg}");
}

#[tokio::test]
async fn a_tool_error_is_reported_with_its_message() {
    let tool = FnTool::builder("broken", "Always fails.")
        .handler(|_, _| async { Err(ToolError::new("disk full; free some space")) })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let msg = tool_failure(&step.execute(json!({}), &StepContext::new()).await.unwrap_err());
    assert_eq!(msg, "disk full; free some space");
}

#[tokio::test]
async fn a_tool_error_stays_reachable_as_a_typed_source_through_the_step_failure() {
    use noetic::model::ToolErrorKind;
    let tool = FnTool::builder("broken", "Always fails.")
        .handler(|_, _| async { Err(ToolError::of(ToolErrorKind::Upstream, "the index server is down")) })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let err = step.execute(json!({}), &StepContext::new()).await.unwrap_err();
    // StepFailed → ToolFailed → the tool's own error, walked with std's `source`.
    let tool_failed = std::error::Error::source(&err).expect("the step failure names its cause");
    let tools_own = tool_failed.source().expect("the tool failure keeps the tool's error");
    let tool_error = tools_own.downcast_ref::<noetic::error::ErrorSource>().and_then(|s| s.downcast_ref::<ToolError>());
    let tool_error = tool_error.expect("the source is the ToolError the tool returned");
    assert_eq!(tool_error.kind, ToolErrorKind::Upstream);
    // A copy keeps it; the serialised form carries the message only.
    let copy = err.clone();
    assert!(std::error::Error::source(&copy).and_then(|e| e.source()).is_some());
    let wire = serde_json::to_value(&err).unwrap();
    assert!(!wire.to_string().contains("\"source\""), "{wire}");
    let back: NoeticError = serde_json::from_value(wire).unwrap();
    assert_eq!(back.to_string(), err.to_string());
}

#[tokio::test]
async fn a_tool_needing_approval_is_rejected_when_no_approver_is_configured() {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let tool = FnTool::builder("rm", "Deletes things.")
        .needs_approval(true)
        .handler(move |_, _| {
            r.store(true, Ordering::SeqCst);
            async { Ok(Value::Null) }
        })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let msg = tool_failure(&step.execute(json!({}), &StepContext::new()).await.unwrap_err());
    assert!(msg.contains("approval"), "{msg}");
    assert!(!ran.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_non_object_input_cannot_take_preset_args() {
    let mut preset = serde_json::Map::new();
    preset.insert("x".into(), json!(1));
    let step: Step<u32, Value> = Step::tool("t", echo_tool()).args(preset).build().unwrap();
    let msg = tool_failure(&step.execute(3, &StepContext::new()).await.unwrap_err());
    assert!(msg.contains("JSON object"), "{msg}");
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_context_reaches_a_running_tool() {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let s = saw_cancel.clone();
    let tool = FnTool::builder("wait", "Waits.")
        .handler(move |_, tcx| {
            let s = s.clone();
            async move {
                let token = tcx.ctx.cancellation_token().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    s.store(true, Ordering::SeqCst);
                });
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    let ctx = StepContext::new();
    let c = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.cancel("stop");
    });
    assert!(step.execute(json!({}), &ctx).await.unwrap_err().is_cancelled());
    tokio::task::yield_now().await;
    assert!(saw_cancel.load(Ordering::SeqCst), "the tool's context token was cancelled");
}

#[test]
fn tool_builders_validate_names_handlers_and_schemas() {
    let no_name = FnTool::builder(" ", "d").handler(|a, _| async move { Ok(a) }).build().unwrap_err();
    assert_eq!(no_name.code, ConfigCode::EmptyToolName);
    let no_handler = FnTool::builder("t", "d").build().unwrap_err();
    assert_eq!(no_handler.code, ConfigCode::MissingExecuteFunction);
    let bad_schema = FnTool::builder("t", "d")
        .input_schema(json!({"type": 12}))
        .handler(|a, _| async move { Ok(a) })
        .build()
        .unwrap_err();
    assert_eq!(bad_schema.code, ConfigCode::InvalidSchema);
}

fn tool_call_events(rx: &mut noetic::EventReceiver) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match &event.kind {
            EventKind::ToolCallStarted { call_id, tool, .. } => seen.push(format!("started {call_id} {tool}")),
            EventKind::ToolCallCompleted { call_id, tool, is_error, output, .. } => {
                seen.push(format!("completed {call_id} {tool} error={is_error} {output}"))
            }
            _ => {}
        }
    }
    seen
}

#[tokio::test]
async fn a_direct_tool_step_emits_tool_call_started_and_completed_like_a_model_driven_call() {
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let step: Step<Value, Value> = Step::tool("ls-step", echo_tool()).build().unwrap();
    step.execute(json!({"path": "src", "limit": 3}), &ctx).await.unwrap();
    assert_eq!(
        tool_call_events(&mut rx),
        ["started ls-step list", r#"completed ls-step list error=false {"limit":3,"path":"src"}"#]
    );
}

#[tokio::test]
async fn a_failing_direct_tool_step_completes_its_call_with_the_error() {
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).build();
    let step: Step<Value, Value> = Step::tool("ls-step", echo_tool()).build().unwrap();
    let err = step.execute(json!({"path": "src", "limit": 1000}), &ctx).await.unwrap_err();
    let events = tool_call_events(&mut rx);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], "started ls-step list");
    assert_eq!(events[1], format!("completed ls-step list error=true {err}"));
}

#[tokio::test]
async fn an_approval_is_asked_and_recorded_with_the_sha256_of_the_exact_arguments() {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let approver = noetic::tool::FnApprover(move |request: noetic::tool::ApprovalRequest| {
        seen.lock().unwrap().push(request.arguments_sha256.clone());
        async { noetic::tool::Approval::Approve }
    });
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().events(sink).approver(Arc::new(approver)).build();
    let tool = FnTool::builder("rm", "Deletes things.")
        .needs_approval(true)
        .handler(|_, _| async { Ok(Value::Null) })
        .build()
        .unwrap();
    let step: Step<Value, Value> = Step::tool("t", Arc::new(tool)).build().unwrap();
    step.execute(json!({"path": "a.txt", "force": false}), &ctx).await.unwrap();
    // sha256 of {"force":false,"path":"a.txt"}: keys sorted, no spaces.
    let expected = "d4d47f76d23fd5254df34cb7ca5c733a66cfe88fb586adb3b5ff7299b063181c";
    let canonical = noetic::digest::canonical_json(&json!({"path": "a.txt", "force": false}));
    assert_eq!(canonical, r#"{"force":false,"path":"a.txt"}"#);
    assert_eq!(noetic::digest::sha256_hex(canonical.as_bytes()), expected);
    assert_eq!(*asked.lock().unwrap(), [expected]);
    let mut recorded = Vec::new();
    while let Ok(e) = rx.try_recv() {
        match &e.kind {
            EventKind::ApprovalRequested { arguments_sha256, .. } => recorded.push(("asked", arguments_sha256.clone())),
            EventKind::ApprovalDecided { arguments_sha256, approved, .. } => {
                assert!(approved);
                recorded.push(("decided", arguments_sha256.clone()));
            }
            _ => {}
        }
    }
    assert_eq!(recorded, [("asked", expected.to_owned()), ("decided", expected.to_owned())]);
}
