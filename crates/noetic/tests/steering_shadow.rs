//! Shadow rules (issue 31, item 2): evaluated like any rule, never enforced; their would-be decisions follow
//! the live one in the ledger, marked shadow.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod steering_common;

use std::sync::Arc;

use noetic::prelude::*;
use noetic::steering::{Evaluator, FailureCause, LedgerEntry, LedgerKind, Shadow};
use serde_json::json;
use steering_common::before;

fn ledger(layer: &SteeringLayer, ctx: &Context) -> Vec<LedgerEntry> {
    layer.state_for(ctx).unwrap_or_default().ledger
}

fn deny_tool(id: &str, tool: &'static str) -> SteeringRule {
    SteeringRule::predicate(id, [Hook::BeforeToolCall], move |p| match p.tool_call() {
        Some(c) if c.name == tool => SteeringDecision::deny(format!("no {tool}")),
        _ => SteeringDecision::allow(),
    })
}

/// (rule, action, shadow marker) of each entry: what the ledger shows side by side.
fn sides(entries: &[LedgerEntry]) -> Vec<(Option<&str>, SteeringAction, Option<Shadow>)> {
    entries.iter().map(|e| (e.rule_id.as_deref(), e.action, e.shadow)).collect()
}

#[tokio::test]
async fn a_shadow_rule_is_ledgered_next_to_the_live_decision_but_never_enforced() {
    let layer =
        steering(SteeringConfig::new([deny_tool("no-rm", "rm"), deny_tool("no-curl", "curl").shadow()])).unwrap();
    let ctx = Context::new();
    assert_eq!(before(&layer, &ctx, "curl", json!({"url": "x"})).await, SteeringDecision::allow());
    assert_eq!(before(&layer, &ctx, "rm", json!({})).await, SteeringDecision::deny("no rm"));
    let entries = ledger(&layer, &ctx);
    let live_allow = Some(Shadow { live: SteeringAction::Allow });
    let live_deny = Some(Shadow { live: SteeringAction::Deny });
    assert_eq!(
        sides(&entries),
        [
            (None, SteeringAction::Allow, None),
            (Some("no-curl"), SteeringAction::Deny, live_allow),
            (Some("no-rm"), SteeringAction::Deny, None),
            (Some("no-curl"), SteeringAction::Allow, live_deny),
        ]
    );
    assert_eq!(entries[1].guidance.as_deref(), Some("no curl"));
    assert_eq!((entries[1].kind, entries[1].tool_name.as_deref()), (LedgerKind::ToolCall, Some("curl")));
    assert_eq!(entries[1].evaluator, Some(Evaluator::Predicate));
    assert_eq!(entries.iter().map(LedgerEntry::disagrees).collect::<Vec<_>>(), [false, true, false, true]);
}

#[tokio::test]
async fn a_shadow_rule_still_runs_when_a_live_rule_denied_first() {
    let layer =
        steering(SteeringConfig::new([deny_tool("no-rm", "rm"), deny_tool("also-no-rm", "rm").shadow()])).unwrap();
    let ctx = Context::new();
    assert_eq!(before(&layer, &ctx, "rm", json!({})).await, SteeringDecision::deny("no rm"));
    let entries = ledger(&layer, &ctx);
    assert_eq!(
        sides(&entries),
        [
            (Some("no-rm"), SteeringAction::Deny, None),
            (Some("also-no-rm"), SteeringAction::Deny, Some(Shadow { live: SteeringAction::Deny }))
        ]
    );
    assert!(!entries[1].disagrees());
}

#[tokio::test]
async fn a_shadow_judge_is_asked_and_its_deny_does_not_stop_the_call() {
    let judge = ScriptedModel::new([ModelResponse::text("DENY: too risky")]);
    let layer = steering(SteeringConfig::new([SteeringRule::llm(
        "careful",
        [Hook::BeforeToolCall],
        LlmEval::asynchronous("Is it safe?"),
    )
    .shadow()]))
    .unwrap();
    let ctx = StepContext::builder().model(Arc::new(judge.clone())).build();
    assert_eq!(before(&layer, &ctx, "run_command", json!({"command": "make"})).await, SteeringDecision::allow());
    assert_eq!(judge.calls(), 1, "a shadow judge is awaited, also one written async");
    let entries = ledger(&layer, &ctx);
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (entries[1].action, entries[1].guidance.as_deref(), entries[1].evaluator),
        (SteeringAction::Deny, Some("too risky"), Some(Evaluator::LlmSync))
    );
    assert_eq!(entries[1].shadow, Some(Shadow { live: SteeringAction::Allow }));
}

#[tokio::test]
async fn a_broken_shadow_rule_is_recorded_and_the_hook_goes_on() {
    let layer = steering(SteeringConfig::new([
        SteeringRule::llm("no-model", [Hook::BeforeToolCall], LlmEval::sync("Is it safe?")).shadow(),
        SteeringRule::predicate("panics", [Hook::BeforeToolCall], |_| panic!("bug in the rule")).shadow(),
    ]))
    .unwrap();
    let ctx = Context::new();
    assert_eq!(before(&layer, &ctx, "ls", json!({})).await, SteeringDecision::allow());
    let entries = ledger(&layer, &ctx);
    assert_eq!(entries.len(), 3);
    assert!(matches!(entries[1].failures[0].cause, FailureCause::Config { .. }), "{:?}", entries[1].failures);
    assert_eq!(entries[1].action, SteeringAction::Deny);
    assert!(matches!(entries[2].failures[0].cause, FailureCause::PredicatePanicked { .. }));
    assert!(entries[1..].iter().all(|e| e.shadow == Some(Shadow { live: SteeringAction::Allow })));
}

#[test]
fn the_shadow_and_escalated_marks_are_written_only_when_set_and_older_entries_still_read() {
    let mut entry = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Deny);
    let plain = serde_json::to_value(&entry).unwrap();
    assert!(plain.get("shadow").is_none() && plain.get("escalated").is_none(), "{plain}");
    entry.shadow = Some(Shadow { live: SteeringAction::Allow });
    entry.escalated = true;
    let marked = serde_json::to_value(&entry).unwrap();
    assert_eq!((&marked["shadow"], &marked["escalated"]), (&json!({"live": "allow"}), &json!(true)));
    let older: LedgerEntry = serde_json::from_value(plain).unwrap();
    assert_eq!((older.shadow, older.escalated), (None, false));
}
