//! The steering ledger's fast path: a full ledger makes each new entry in the place of its oldest one, so the new
//! entry must carry nothing over from the one it replaced; a ledger that may keep no entries keeps none and the
//! decision still stands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod steering_common;

use std::time::SystemTime;

use noetic::layer::ModelCallParams;
use noetic::prelude::*;
use noetic::steering::{Evaluator, FailureCause, LedgerEntry, LedgerKind};
use serde_json::json;

use steering_common::before;
use steering_common::deny_rm_and_panic_on_boom as rules;

fn ledger(layer: &SteeringLayer, ctx: &Context) -> Vec<LedgerEntry> {
    layer.state_for(ctx).unwrap_or_default().ledger
}

/// What an entry holds apart from its timestamp and duration, which differ from entry to entry.
fn without_times(mut entry: LedgerEntry) -> LedgerEntry {
    entry.timestamp = SystemTime::UNIX_EPOCH;
    entry.duration = std::time::Duration::ZERO;
    entry
}

#[tokio::test]
async fn a_full_ledger_s_new_entry_keeps_nothing_of_the_entry_it_replaces() {
    let mut config = SteeringConfig::new(rules());
    config.max_ledger_entries = 1;
    let layer = steering(config).unwrap();
    let ctx = Context::new();

    // A deny with guidance, the deciding rule and the tool's arguments …
    assert_eq!(before(&layer, &ctx, "rm", json!({"path": "/"})).await.action, SteeringAction::Deny);
    let [denied] = ledger(&layer, &ctx).try_into().unwrap();
    assert_eq!(
        (denied.rule_id.as_deref(), denied.guidance.as_deref(), denied.evaluator),
        (Some("no-rm"), Some("never rm"), Some(Evaluator::Predicate))
    );

    // … then a model turn no rule looks at: a bare allow entry with the response's usage, in the deny's place.
    let response = ModelResponse::text("done");
    layer
        .after_model_call(&HookContext::from(&ctx), ModelCallParams { step_id: "s", model: "m", response: &response })
        .await
        .unwrap();
    let [turn] = ledger(&layer, &ctx).try_into().unwrap();
    let mut expected = LedgerEntry::new(LedgerKind::ModelTurn, SteeringAction::Allow);
    expected.usage = Some(response.usage);
    assert_eq!(without_times(turn), without_times(expected));

    // A panicking rule records its failure; the allow after it has none, and its tool name alone.
    assert_eq!(before(&layer, &ctx, "boom", json!({"n": 1})).await.action, SteeringAction::Deny);
    let [failed] = ledger(&layer, &ctx).try_into().unwrap();
    assert!(matches!(failed.failures.as_slice(), [f] if matches!(f.cause, FailureCause::PredicatePanicked { .. })));
    assert_eq!(before(&layer, &ctx, "ls", json!({})).await.action, SteeringAction::Allow);
    let [allowed] = ledger(&layer, &ctx).try_into().unwrap();
    let mut expected = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow);
    expected.tool_name = Some("ls".to_owned());
    expected.tool_args = Some(json!({}));
    assert_eq!(without_times(allowed), without_times(expected));
}

#[tokio::test]
async fn entries_made_in_a_full_ledger_are_stamped_when_made_and_kept_in_order() {
    let mut config = SteeringConfig::new(rules());
    config.max_ledger_entries = 2;
    let layer = steering(config).unwrap();
    let ctx = Context::new();
    let mut stamps = Vec::new();
    for name in ["a", "rm", "bb", "c", "rm"] {
        let before_call = SystemTime::now();
        before(&layer, &ctx, name, json!({ "tool": name })).await;
        let entry = ledger(&layer, &ctx).pop().unwrap();
        assert!(entry.timestamp >= before_call, "the entry of '{name}' is stamped when made, not when first made");
        stamps.push(entry.timestamp);
    }
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
    let kept: Vec<_> = ledger(&layer, &ctx)
        .into_iter()
        .map(|e| (e.tool_name.unwrap(), e.tool_args.unwrap(), e.action, e.rule_id))
        .collect();
    assert_eq!(
        kept,
        vec![
            ("c".to_owned(), json!({"tool": "c"}), SteeringAction::Allow, None),
            ("rm".to_owned(), json!({"tool": "rm"}), SteeringAction::Deny, Some("no-rm".to_owned())),
        ]
    );
}

#[tokio::test]
async fn a_ledger_that_may_keep_no_entries_keeps_none_and_still_decides() {
    let mut config = SteeringConfig::new(rules());
    config.max_ledger_entries = 0;
    let layer = steering(config).unwrap();
    let ctx = Context::new();
    assert_eq!(before(&layer, &ctx, "rm", json!({})).await.action, SteeringAction::Deny);
    assert_eq!(before(&layer, &ctx, "ls", json!({})).await.action, SteeringAction::Allow);
    assert!(ledger(&layer, &ctx).is_empty());
}
