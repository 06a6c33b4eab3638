//! Steering decisions in full agent turns on the scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic::prelude::*;
use noetic::steering::LedgerKind;
use noetic::testing::EventCollector;
use noetic::testing::{delete_file_tool, workspace_rule};
use serde_json::{Value, json};

fn tool_results(items: &[Item]) -> Vec<(String, String, bool)> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some((r.call_id.to_string(), r.content.to_string(), r.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_the_model_sees_why_and_changes_course() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "deleteFile", json!({"path": "/etc/passwd"}))]),
        ModelResponse::tool_calls([("c2", "deleteFile", json!({"path": "/workspace/tmp.txt"}))]),
        ModelResponse::text("Cleaned the workspace instead."),
    ]);
    let layer = steering(SteeringConfig::new([workspace_rule()])).unwrap();
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(delete_file_tool(&runs).unwrap())
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    assert_eq!(session.send("free some disk").await.unwrap().await.unwrap(), "Cleaned the workspace instead.");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the allowed call ran");
    let second_request = &model.requests()[1];
    assert_eq!(
        tool_results(second_request.history.as_slice()),
        vec![("c1".into(), "Steering denied: Deletion outside /workspace/ is not allowed.".into(), true)],
        "the model saw the denial before choosing its next call"
    );
    let mut denied_events = 0;
    let mut execution = None;
    for e in events.events() {
        if let EventKind::TurnStarted { .. } = e.kind {
            execution = Some(e.execution_id);
        }
        if let EventKind::SteeringDenied { call_id, error, .. } = &e.kind {
            assert_eq!(&**call_id, "c1");
            assert!(matches!(error, NoeticError::SteeringDenied { guidance: Some(g) } if g.contains("/workspace/")));
            denied_events += 1;
        }
    }
    assert_eq!(denied_events, 1);
    let ledger = layer.ledger(execution.unwrap());
    let via_runtime: noetic::steering::SteeringState = rt.get_layer_state(execution.unwrap(), "steering").unwrap();
    assert_eq!(via_runtime.ledger, ledger, "the runtime reads the same state");
    let actions: Vec<_> = ledger.iter().map(|e| (e.kind, e.tool_name.clone(), e.action, e.outcome)).collect();
    let (turn, call, custom) = (LedgerKind::ModelTurn, LedgerKind::ToolCall, LedgerKind::Custom);
    let delete = || Some("deleteFile".to_owned());
    assert_eq!(
        actions,
        vec![
            (turn, None, SteeringAction::Allow, None),
            (call, delete(), SteeringAction::Deny, None),
            (turn, None, SteeringAction::Allow, None),
            (call, delete(), SteeringAction::Allow, None),
            (turn, None, SteeringAction::Allow, None),
            (custom, None, SteeringAction::Allow, Some(Outcome::Success)),
        ],
        "every evaluation of either hook is recorded, then the outcome"
    );
}

#[tokio::test]
async fn a_guided_call_does_not_run_and_the_model_gets_the_guidance() {
    let runs = Arc::new(AtomicUsize::new(0));
    let rule = SteeringRule::predicate("dry-run-first", [Hook::BeforeToolCall], |_| {
        SteeringDecision::guide("List the files first and ask the user.")
    });
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "deleteFile", json!({"path": "/workspace/a"}))]),
        ModelResponse::text("Here are the files; shall I delete them?"),
    ]);
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    rt.session("s").send("delete a").await.unwrap().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        tool_results(model.requests()[1].history.as_slice()),
        vec![("c1".into(), "Steering guidance: List the files first and ask the user.".into(), true)]
    );
}

#[tokio::test]
async fn a_judge_guiding_a_response_makes_the_step_ask_again_with_the_guidance() {
    // The agent model and the judge share the scripted model: replies alternate agent, judge, agent, judge.
    let model = ScriptedModel::new([
        ModelResponse::text("whatever, figure it out yourself"),
        ModelResponse::text("GUIDE: Be polite and concrete."),
        ModelResponse::text("Happy to help: run `cargo build`."),
        ModelResponse::text("ALLOW"),
    ]);
    let rule = SteeringRule::llm("polite", [Hook::AfterModelCall], LlmEval::sync("Answers must be polite."));
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    assert_eq!(session.send("how do I build?").await.unwrap().await.unwrap(), "Happy to help: run `cargo build`.");
    let retry = &model.requests()[2];
    assert_eq!(retry.tail, vec![Item::developer("Be polite and concrete.")], "the guidance rides after the history");
    let history = session.history();
    assert!(
        history.iter().all(|i| i.text() != Some("whatever, figure it out yourself")),
        "the guided-away response was discarded"
    );
}

#[tokio::test]
async fn guidance_on_responses_is_applied_at_most_three_times_then_the_response_is_accepted() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let rule = SteeringRule::predicate("never-happy", [Hook::AfterModelCall], move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        SteeringDecision::guide("try again")
    });
    let model = ScriptedModel::responder(|_| Ok(ModelResponse::text("an answer")));
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    assert_eq!(rt.session("s").send("q").await.unwrap().await.unwrap(), "an answer");
    assert_eq!(model.calls(), 4, "one call plus three guided retries");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_denied_response_fails_the_llm_step_with_steering_denied() {
    let rule = SteeringRule::predicate("no-secrets", [Hook::AfterModelCall], |p| {
        if p.response().map(|r| r.text_output().contains("password")).unwrap_or(false) {
            SteeringDecision::deny("Never reveal passwords.")
        } else {
            SteeringDecision::allow()
        }
    });
    let model = ScriptedModel::new([ModelResponse::text("the password is hunter2")]);
    let rt = Runtime::builder()
        .model(Arc::new(model))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    let err = session.send("what's the password?").await.unwrap().await.unwrap_err();
    assert!(
        matches!(err, NoeticError::SteeringDenied { guidance: Some(ref g) } if g == "Never reveal passwords."),
        "{err:?}"
    );
    assert!(session.history().iter().all(|i| i.text() != Some("the password is hunter2")), "the response was not kept");
}

#[tokio::test]
async fn a_denied_response_with_tool_calls_runs_none_of_them() {
    let runs = Arc::new(AtomicUsize::new(0));
    let rule = SteeringRule::predicate("no-tools-today", [Hook::AfterModelCall], |p| {
        if p.response().map(|r| r.tool_calls_iter().count() > 0).unwrap_or(false) {
            SteeringDecision::deny("no tools")
        } else {
            SteeringDecision::allow()
        }
    });
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "deleteFile", json!({"path": "/workspace/a"}))])]);
    let rt = Runtime::builder()
        .model(Arc::new(model))
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    assert!(rt.session("s").send("go").await.unwrap().await.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_direct_tool_step_fails_with_steering_denied_on_deny_and_on_guide() {
    let runs = Arc::new(AtomicUsize::new(0));
    for rule in [
        workspace_rule(),
        SteeringRule::predicate("guide", [Hook::BeforeToolCall], |_| SteeringDecision::guide("ask first")),
    ] {
        let layer = steering(SteeringConfig::new([rule])).unwrap();
        let ctx = StepContext::builder().layers([layer as Arc<dyn MemoryLayer>]).build();
        let step: Step<Value, Value> = Step::tool("delete", delete_file_tool(&runs).unwrap()).build().unwrap();
        let err = step.execute(json!({"path": "/etc/hosts"}), &ctx).await.unwrap_err();
        assert!(matches!(err, NoeticError::SteeringDenied { guidance: Some(_) }), "{err:?}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn async_feedback_reaches_the_model_on_a_later_llm_step() {
    // Agent and judge share a responder: judge prompts get a GUIDE verdict, agent calls get scripted replies.
    let agent_replies = Arc::new(std::sync::Mutex::new(vec![
        ModelResponse::text("second answer"),
        ModelResponse::text("first answer"),
        ModelResponse::tool_calls([("c1", "deleteFile", json!({"path": "/workspace/a"}))]),
    ]));
    let replies = agent_replies.clone();
    let model = ScriptedModel::responder(move |req| {
        let is_judge = req.history.iter().any(|i| i.text().is_some_and(|t| t.contains("Respond with exactly")));
        if is_judge {
            Ok(ModelResponse::text("GUIDE: mention which files were deleted"))
        } else {
            Ok(replies.lock().unwrap().pop().unwrap_or_else(|| ModelResponse::text("extra")))
        }
    });
    let rule =
        SteeringRule::llm("report", [Hook::BeforeToolCall], LlmEval::asynchronous("Deletions must be reported."));
    let runs = Arc::new(AtomicUsize::new(0));
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([rule]).with_scope(Scope::Thread)).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    session.send("clean").await.unwrap().await.unwrap();
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    session.send("and now?").await.unwrap().await.unwrap();
    let agent_requests: Vec<_> = model
        .requests()
        .into_iter()
        .filter(|r| !r.history.iter().any(|i| i.text().is_some_and(|t| t.contains("Respond with exactly"))))
        .collect();
    let last = agent_requests.last().unwrap();
    assert_eq!(
        last.context,
        vec![Item::developer("<steering_feedback>\n[report] mention which files were deleted\n</steering_feedback>")],
        "the verdict was recalled into the next turn's context"
    );
    let deliveries: usize = agent_requests.iter().map(|r| r.context.len()).sum();
    assert_eq!(deliveries, 1, "delivered exactly once");
}
