//! A judge that cannot be evaluated because of configuration fails closed (SPEC 2.6, 3.3), and the
//! `after_model_call` judge sees the whole response (SPEC 3.2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic::layer::{ModelCallParams, ToolCallParams};
use noetic::prelude::*;
use noetic::steering::{Evaluator, FailureCause, FailurePolicy, LlmMode};
use noetic::testing::{Counter, JudgeRouter, steering_state, until};
use serde_json::{Value, json};

fn no_provider() -> NoeticError {
    ConfigError::new(ConfigCode::NoModelProvider, "no provider serves model 'judge/x'", "configure a provider").into()
}

fn judged(mode: LlmMode, policy: FailurePolicy) -> Arc<SteeringLayer> {
    let eval = LlmEval { mode, prompt: "Is it safe?".into(), model: Some("judge/x".into()), on_failure: policy };
    steering(SteeringConfig::new([SteeringRule::llm("safe", [Hook::BeforeToolCall, Hook::AfterModelCall], eval)]))
        .unwrap()
}

fn failing_judge() -> ScriptedModel {
    ScriptedModel::responder(|_| Err(no_provider()))
}

fn assert_no_provider(err: &NoeticError) {
    match err {
        NoeticError::Config(c) => assert_eq!(c.code, ConfigCode::NoModelProvider, "{err}"),
        other => panic!("expected the judge's configuration error, got {other:?}"),
    }
}

#[tokio::test]
async fn judge_config_error_fails_the_step_whatever_on_failure_says() {
    for policy in [FailurePolicy::Allow, FailurePolicy::Deny] {
        let layer = judged(LlmMode::Sync, policy);
        let ctx = StepContext::builder().model(Arc::new(failing_judge())).build();
        let err = layer
            .before_tool_call(&HookContext::from(&ctx), ToolCallParams { call_id: "c1", name: "t", args: &json!({}) })
            .await
            .unwrap_err();
        assert_no_provider(&err);
        let ledger = steering_state(&layer, &ctx).ledger;
        assert_eq!(ledger.len(), 1, "the failed evaluation is recorded");
        assert_eq!(ledger[0].action, SteeringAction::Deny);
        assert_eq!(ledger[0].rule_id.as_deref(), Some("safe"));
        assert!(
            matches!(&ledger[0].failures[0].cause, FailureCause::Config { error } if error.code == ConfigCode::NoModelProvider),
            "{:?}",
            ledger[0].failures
        );

        // Through a direct tool step and its lifecycle: the tool never runs.
        let runs = Counter::new();
        let ctx = StepContext::builder()
            .model(Arc::new(failing_judge()))
            .layers([judged(LlmMode::Sync, policy) as Arc<dyn MemoryLayer>])
            .build();
        let step: Step<Value, Value> = Step::tool("call", runs.tool("t", Value::Null).unwrap()).build().unwrap();
        assert_no_provider(&noetic::run(&step, json!({}), &ctx).await.unwrap_err());
        assert_eq!(runs.count(), 0, "policy {policy:?} must not let the tool run");
    }
}

#[tokio::test]
async fn judge_config_error_after_a_model_call_fails_the_turn_and_runs_no_tool() {
    let runs = Counter::new();
    let agent = ScriptedModel::new([ModelResponse::tool_calls([("c1", "t", json!({}))])]);
    let rt = Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), failing_judge()))
        .tool(runs.tool("t", Value::Null).unwrap())
        .layer(judged(LlmMode::Sync, FailurePolicy::Allow) as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let err = rt.session("s").send("go").await.unwrap().await.unwrap_err();
    assert_no_provider(&err);
    assert_eq!(runs.count(), 0);
    assert_eq!(agent.calls(), 1);
}

#[tokio::test]
async fn async_judge_config_error_fails_the_next_gate_of_its_execution() {
    let layer = judged(LlmMode::Async, FailurePolicy::Allow);
    let ctx = StepContext::builder().model(Arc::new(failing_judge())).build();
    let call = ToolCallParams { call_id: "c1", name: "t", args: &json!({}) };
    assert_eq!(
        layer.before_tool_call(&HookContext::from(&ctx), call).await.unwrap().decision().unwrap().action,
        SteeringAction::Allow,
        "async never blocks"
    );
    until("the async verdict resolved", || !steering_state(&layer, &ctx).ledger.iter().all(|e| e.evaluator.is_none()))
        .await
        .unwrap();
    let resolved = steering_state(&layer, &ctx).ledger;
    let entry = resolved.iter().find(|e| e.evaluator == Some(Evaluator::LlmAsync)).unwrap();
    assert!(matches!(&entry.failures[0].cause, FailureCause::Config { .. }), "{entry:?}");
    assert_eq!(entry.action, SteeringAction::Deny, "a configuration error is never recorded as allowed");
    assert!(steering_state(&layer, &ctx).pending_feedback.is_empty(), "the error is not feedback for the model");
    assert_no_provider(&layer.before_tool_call(&HookContext::from(&ctx), call).await.unwrap_err());
}

#[tokio::test]
async fn async_judge_config_error_fails_the_turn_at_the_next_model_request() {
    let agent =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "t", json!({}))]), ModelResponse::text("never reached")]);
    let layer = steering(SteeringConfig::new([SteeringRule::llm(
        "safe",
        [Hook::BeforeToolCall],
        LlmEval::asynchronous("Is it safe?"),
    )]))
    .unwrap();
    let l = layer.clone();
    let waits = Arc::new(AtomicUsize::new(0));
    let w = waits.clone();
    // The tool waits until the async verdict has resolved, so the next model request is the first chance to
    // surface it.
    let tool = FnTool::builder("t", "A tool.")
        .handler(move |_, tcx| {
            let (l, w) = (l.clone(), w.clone());
            async move {
                until("the async verdict resolved", || {
                    l.state_for(&tcx.ctx).is_some_and(|s| s.ledger.iter().any(|e| e.evaluator.is_some()))
                })
                .await
                .unwrap();
                w.fetch_add(1, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let rt = Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), failing_judge()))
        .tool(Arc::new(tool))
        .layer(layer as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let err = rt.session("s").send("go").await.unwrap().await.unwrap_err();
    assert_no_provider(&err);
    assert_eq!(waits.load(Ordering::SeqCst), 1);
    assert_eq!(agent.calls(), 1, "the configuration error surfaced before the next model request");
}

#[tokio::test]
async fn after_model_judge_sees_every_message_of_the_response_and_its_tool_calls() {
    let judge = ScriptedModel::responder(|_| Ok(ModelResponse::text("ALLOW")));
    let layer =
        steering(SteeringConfig::new([SteeringRule::llm("tone", [Hook::AfterModelCall], LlmEval::sync("Kind?"))]))
            .unwrap();
    let ctx = StepContext::builder().model(Arc::new(judge.clone())).build();
    let mut response = ModelResponse::tool_calls([("c1", "search", json!({"q": "cats"}))]);
    response.items.insert(0, Item::assistant("First, the plan."));
    response.items.push(Item::assistant("Then the summary."));
    response.items.push(Item::ToolCall(ToolCall {
        id: "c2".into(),
        name: "delete".into(),
        arguments: json!({"path": "/tmp/x"}).to_string().into(),
    }));
    layer
        .after_model_call(&HookContext::from(&ctx), ModelCallParams { step_id: "s", model: "m", response: &response })
        .await
        .unwrap();
    let prompt = judge.requests()[0].history.as_slice()[0].text().unwrap().to_owned();
    let summary: Vec<&str> =
        prompt.lines().filter(|l| l.starts_with("Response text: ") || l.starts_with("Tool call: ")).collect();
    assert_eq!(
        summary,
        vec![
            "Response text: First, the plan.",
            "Tool call: search {\"q\":\"cats\"}",
            "Response text: Then the summary.",
            "Tool call: delete {\"path\":\"/tmp/x\"}",
        ],
        "the judge sees every message and every tool call, in order:\n{prompt}"
    );
}
