//! The steering layer (seed 1): its defaults, rule order, short-circuit, aggregation, the ledger, children's
//! copies, ended executions and panicking predicates (LLM judges and async feedback: `steering_judges.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod steering_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic::layer::{MemoryLayer, ModelCallParams, ToolCallParams};
use noetic::prelude::*;
use noetic::steering::{Evaluator, FailureCause, LedgerKind, SteeringState};
use serde_json::json;

use steering_common::*;

#[tokio::test]
async fn the_layer_has_the_seed_defaults() {
    let layer = steering(SteeringConfig::new([])).unwrap();
    assert_eq!(layer.id(), "steering");
    assert_eq!(layer.slot(), Slot::STEERING);
    assert_eq!(layer.slot().0, 90);
    assert_eq!(layer.scope(), Scope::Execution);
    assert_eq!((layer.budget().min, layer.budget().max), (0, 500));
    let config = layer.config();
    assert_eq!((config.max_ledger_entries, config.max_retries), (100, 1));
    assert_eq!(config.before_tool_call_timeout, Duration::from_millis(5000));
    assert_eq!(config.after_model_call_timeout, Duration::from_millis(10000));
}

#[tokio::test]
async fn deny_short_circuits_later_rules() {
    let (a, b, c) = (Arc::default(), Arc::default(), Arc::default());
    let layer = steering(SteeringConfig::new([
        counted("first", vec![Hook::BeforeToolCall], SteeringDecision::allow(), &a),
        counted("blocker", vec![Hook::BeforeToolCall], SteeringDecision::deny("no"), &b),
        counted("never", vec![Hook::BeforeToolCall], SteeringDecision::allow(), &c),
        SteeringRule::llm("judge-never", [Hook::BeforeToolCall], LlmEval::sync("anything")),
    ]))
    .unwrap();
    let model = judge(&["ALLOW"]);
    let ctx = StepContext::builder().model(Arc::new(model.clone())).build();
    let d = before(&layer, &ctx, "rm", json!({})).await;
    assert_eq!(d, SteeringDecision::deny("no"));
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst), c.load(Ordering::SeqCst)), (1, 1, 0));
    assert_eq!(model.calls(), 0, "the LLM rule after the deny never ran");
}

#[tokio::test]
async fn guide_then_deny_aggregates_to_the_deny_with_its_guidance() {
    let n = Arc::default();
    let layer = steering(SteeringConfig::new([
        counted("g", vec![Hook::BeforeToolCall], SteeringDecision::guide("use a dry run"), &n),
        counted("d", vec![Hook::BeforeToolCall], SteeringDecision::deny("forbidden path"), &n),
    ]))
    .unwrap();
    let ctx = StepContext::new();
    assert_eq!(before(&layer, &ctx, "rm", json!({})).await, SteeringDecision::deny("forbidden path"));
    let entry = state(&layer, &ctx).ledger.pop().unwrap();
    assert_eq!(entry.rule_id.as_deref(), Some("d"), "the ledger names the deciding rule");
    assert_eq!(entry.evaluator, Some(Evaluator::Predicate));
}

#[tokio::test]
async fn several_guides_join_their_texts_and_name_every_rule() {
    let n = Arc::default();
    let layer = steering(SteeringConfig::new([
        counted("g1", vec![Hook::BeforeToolCall], SteeringDecision::guide("first"), &n),
        counted(
            "quiet",
            vec![Hook::BeforeToolCall],
            SteeringDecision { action: SteeringAction::Guide, guidance: None },
            &n,
        ),
        counted("g2", vec![Hook::BeforeToolCall], SteeringDecision::guide("second"), &n),
    ]))
    .unwrap();
    let ctx = StepContext::new();
    assert_eq!(before(&layer, &ctx, "x", json!({})).await, SteeringDecision::guide("first\nsecond"));
    assert_eq!(state(&layer, &ctx).ledger[0].rule_id.as_deref(), Some("g1,quiet,g2"));
}

#[tokio::test]
async fn applies_to_limits_a_rule_to_its_hooks() {
    let (tool_rule, model_rule) = (Arc::default(), Arc::default());
    let layer = steering(SteeringConfig::new([
        counted("tools-only", vec![Hook::BeforeToolCall], SteeringDecision::allow(), &tool_rule),
        counted("models-only", vec![Hook::AfterModelCall], SteeringDecision::allow(), &model_rule),
    ]))
    .unwrap();
    let ctx = StepContext::new();
    before(&layer, &ctx, "x", json!({})).await;
    assert_eq!((tool_rule.load(Ordering::SeqCst), model_rule.load(Ordering::SeqCst)), (1, 0));
    let response = ModelResponse::text("hi");
    layer
        .after_model_call(&HookContext::from(&ctx), ModelCallParams { step_id: "s", model: "m", response: &response })
        .await
        .unwrap();
    assert_eq!((tool_rule.load(Ordering::SeqCst), model_rule.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn the_predicate_sees_the_tool_name_and_arguments() {
    let layer = steering(SteeringConfig::new([SteeringRule::predicate(
        "no-delete-outside-workspace",
        [Hook::BeforeToolCall],
        |p| match p.tool_call() {
            Some(c) if c.name == "deleteFile" && !c.args["path"].as_str().unwrap_or("").starts_with("/workspace/") => {
                SteeringDecision::deny("Deletion outside /workspace/ is not allowed.")
            }
            _ => SteeringDecision::allow(),
        },
    )]))
    .unwrap();
    let ctx = StepContext::new();
    let denied = before(&layer, &ctx, "deleteFile", json!({"path": "/etc/passwd"})).await;
    assert_eq!(denied.action, SteeringAction::Deny);
    let allowed = before(&layer, &ctx, "deleteFile", json!({"path": "/workspace/a.txt"})).await;
    assert_eq!(allowed.action, SteeringAction::Allow);
    let ledger = state(&layer, &ctx).ledger;
    assert_eq!(ledger[0].tool_name.as_deref(), Some("deleteFile"));
    assert_eq!(ledger[0].tool_args, Some(json!({"path": "/etc/passwd"})));
    assert_eq!(ledger[0].kind, LedgerKind::ToolCall);
    assert_eq!(ledger[1].action, SteeringAction::Allow);
    assert_eq!(ledger[1].rule_id, None, "an allow names no deciding rule");
}

#[tokio::test]
async fn the_ledger_keeps_the_newest_entries_in_order() {
    let mut config =
        SteeringConfig::new([SteeringRule::predicate("r", [Hook::BeforeToolCall], |_| SteeringDecision::allow())]);
    config.max_ledger_entries = 3;
    let layer = steering(config).unwrap();
    let ctx = StepContext::new();
    for i in 0..7 {
        before(&layer, &ctx, &format!("tool{i}"), json!({})).await;
    }
    let names: Vec<_> = state(&layer, &ctx).ledger.into_iter().map(|e| e.tool_name.unwrap()).collect();
    assert_eq!(names, vec!["tool4", "tool5", "tool6"]);
}

#[tokio::test]
async fn a_spawned_child_gets_a_copy_of_the_ledger_and_an_empty_feedback_queue() {
    let layer = steering(SteeringConfig::new([SteeringRule::predicate("r", [Hook::BeforeToolCall], |p| {
        SteeringDecision::guide(format!("checked {}", p.tool_call().map(|c| c.name).unwrap_or("")))
    })]))
    .unwrap();
    let parent = StepContext::builder().layers([layer.clone() as Arc<dyn MemoryLayer>]).build();
    before(&layer, &parent, "parent-tool", json!({})).await;
    let l = layer.clone();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    let child = Step::run("child", move |_: (), ctx: StepContext| {
        let (l, s) = (l.clone(), s.clone());
        async move {
            *s.lock().unwrap() = l.state_for(&ctx);
            l.before_tool_call(
                &HookContext::from(&ctx),
                ToolCallParams { call_id: "c", name: "child-tool", args: &json!({}) },
            )
            .await?;
            Ok(())
        }
    })
    .build()
    .unwrap();
    Step::spawn("spawn", child).build().unwrap().execute((), &parent).await.unwrap();
    let at_start = seen.lock().unwrap().clone().unwrap();
    assert_eq!(at_start.ledger.len(), 1);
    assert_eq!(at_start.ledger[0].tool_name.as_deref(), Some("parent-tool"));
    assert!(at_start.pending_feedback.is_empty());
    let parent_ledger = state(&layer, &parent).ledger;
    assert_eq!(parent_ledger.len(), 1, "the child's entries stay in the child");
}

#[tokio::test]
async fn the_outcome_is_appended_on_complete_and_the_state_stays_readable_after_dispose() {
    let layer = steering(SteeringConfig::new([])).unwrap();
    let ctx = StepContext::builder().layers([layer.clone() as Arc<dyn MemoryLayer>]).build();
    let step = Step::run("s", |_: (), _| async { Err::<(), _>(NoeticError::other("x")) }).build().unwrap();
    noetic::run(&step, (), &ctx).await.unwrap_err();
    let ledger = layer.ledger(ctx.execution_id());
    assert_eq!(ledger.last().unwrap().kind, LedgerKind::Custom);
    assert_eq!(ledger.last().unwrap().outcome, Some(Outcome::Failure));
    let via_lifecycle: SteeringState =
        noetic::layer::lifecycle::get_layer_state(ctx.layers(), ctx.execution_id(), "steering").unwrap();
    assert_eq!(via_lifecycle.ledger.len(), 1);
}

#[tokio::test]
async fn ended_executions_stay_readable_the_newest_always_and_about_64_at_most() {
    let layer = steering(SteeringConfig::new([])).unwrap();
    let step = Step::run("s", |_: (), _| async { Ok(()) }).build().unwrap();
    let mut ids = Vec::new();
    for _ in 0..200 {
        let ctx = StepContext::builder().layers([layer.clone() as Arc<dyn MemoryLayer>]).build();
        noetic::run(&step, (), &ctx).await.unwrap();
        ids.push(ctx.execution_id());
    }
    let kept: Vec<bool> = ids.iter().map(|id| layer.state_of(*id).is_some()).collect();
    assert!(kept[kept.len() - 8..].iter().all(|k| *k), "one of the 8 newest ended executions was dropped");
    let count = kept.iter().filter(|k| **k).count();
    assert!((8..=64).contains(&count), "{count} ended executions kept");
    assert!(!kept[0], "the oldest of 200 is still kept");
}

#[tokio::test]
async fn a_panicking_predicate_denies_and_is_recorded() {
    let layer = steering(SteeringConfig::new([SteeringRule::predicate("buggy", [Hook::BeforeToolCall], |_| {
        panic!("index out of bounds")
    })]))
    .unwrap();
    let ctx = StepContext::new();
    assert_eq!(before(&layer, &ctx, "t", json!({})).await.action, SteeringAction::Deny);
    let failures = &state(&layer, &ctx).ledger[0].failures;
    assert!(
        matches!(&failures[0].cause, FailureCause::PredicatePanicked { message } if message.contains("index out of bounds"))
    );
}

#[tokio::test]
async fn a_panicking_predicate_ends_the_run_as_its_own_deny_after_the_guides_before_it() {
    let later = Arc::new(AtomicUsize::new(0));
    let counted = later.clone();
    let rules = [
        SteeringRule::predicate("careful", [Hook::BeforeToolCall], |_| SteeringDecision::guide("be careful")),
        SteeringRule::predicate("buggy", [Hook::BeforeToolCall], |_| panic!("index out of bounds")),
        SteeringRule::predicate("later", [Hook::BeforeToolCall], move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            SteeringDecision::allow()
        }),
    ];
    let layer = steering(SteeringConfig::new(rules)).unwrap();
    let ctx = StepContext::new();
    let decision = before(&layer, &ctx, "t", json!({})).await;
    assert_eq!(decision.action, SteeringAction::Deny);
    assert!(decision.guidance.unwrap().contains("rule 'buggy' could not be evaluated"));
    assert_eq!(later.load(Ordering::SeqCst), 0, "a deny ends the run");
    let entry = &state(&layer, &ctx).ledger[0];
    assert_eq!(entry.rule_id.as_deref(), Some("buggy"));
    assert_eq!(entry.failures.len(), 1);
    assert_eq!(entry.failures[0].rule_id, "buggy");
    assert!(matches!(&entry.failures[0].cause, FailureCause::PredicatePanicked { message }
        if message.contains("the steering predicate of step 'buggy' panicked: index out of bounds")));
}

#[test]
fn malformed_rule_sets_are_rejected() {
    let p = |id: &str| SteeringRule::predicate(id, [Hook::BeforeToolCall], |_| SteeringDecision::allow());
    assert_eq!(steering(SteeringConfig::new([p("a"), p("a")])).err().unwrap().code, ConfigCode::InvalidRule);
    assert_eq!(steering(SteeringConfig::new([p(" ")])).err().unwrap().code, ConfigCode::EmptyStepId);
    let no_hook = SteeringRule::predicate("x", Vec::<Hook>::new(), |_| SteeringDecision::allow());
    assert_eq!(steering(SteeringConfig::new([no_hook])).err().unwrap().code, ConfigCode::InvalidRule);
}
