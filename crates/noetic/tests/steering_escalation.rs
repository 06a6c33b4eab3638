//! Escalation (issue 31, item 5): after `escalate_after` GUIDE verdicts of a rule in one turn, its next GUIDE
//! is a DENY that tells the model why, ledgered as escalated.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod steering_common;

use std::sync::Arc;

use noetic::prelude::*;
use serde_json::json;
use steering_common::before;

fn dry_run() -> SteeringRule {
    SteeringRule::predicate("dry-run", [Hook::BeforeToolCall], |_| SteeringDecision::guide("use --dry-run first"))
}

const ESCALATED: &str = "Rule 'dry-run' already guided 2 time(s) this turn and the advice was not followed, so \
                         this is now denied. The advice was: use --dry-run first Follow it, or ask the user.";

#[tokio::test]
async fn a_rule_that_guided_n_times_in_a_turn_denies_the_next_guide_and_says_why() {
    let layer = steering(SteeringConfig::new([dry_run().escalate_after(2)])).unwrap();
    let ctx = Context::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(before(&layer, &ctx, "deploy", json!({})).await);
    }
    let guide = SteeringDecision::guide("use --dry-run first");
    assert_eq!(seen, [guide.clone(), guide, SteeringDecision::deny(ESCALATED), SteeringDecision::deny(ESCALATED)]);
    let ledger = layer.state_for(&ctx).unwrap().ledger;
    assert_eq!(ledger.iter().map(|e| e.escalated).collect::<Vec<_>>(), [false, false, true, true]);
    assert_eq!(ledger[2].rule_id.as_deref(), Some("dry-run"));
}

#[tokio::test]
async fn a_rule_without_escalate_after_keeps_guiding() {
    let layer = steering(SteeringConfig::new([dry_run()])).unwrap();
    let ctx = Context::new();
    for _ in 0..5 {
        assert_eq!(before(&layer, &ctx, "deploy", json!({})).await.action, SteeringAction::Guide);
    }
}

#[tokio::test]
async fn the_count_starts_again_in_the_next_turn_of_a_thread() {
    let layer = steering(SteeringConfig::new([dry_run().escalate_after(1)]).with_scope(Scope::Thread)).unwrap();
    let first = Context::builder().thread_id("t").build();
    assert_eq!(before(&layer, &first, "deploy", json!({})).await.action, SteeringAction::Guide);
    assert_eq!(before(&layer, &first, "deploy", json!({})).await.action, SteeringAction::Deny);
    let second = Context::builder().thread_id("t").build();
    assert_eq!(before(&layer, &second, "deploy", json!({})).await.action, SteeringAction::Guide);
    let ledger = layer.state_for(&second).unwrap().ledger;
    assert_eq!(ledger.iter().map(|e| e.escalated).collect::<Vec<_>>(), [false, true, false], "one thread ledger");
}

#[tokio::test]
async fn a_judged_rule_escalates_too() {
    let judge = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("GUIDE: ask first")));
    let layer = steering(SteeringConfig::new([SteeringRule::llm(
        "ask",
        [Hook::BeforeToolCall],
        LlmEval::sync("Did the user agree?"),
    )
    .escalate_after(1)]))
    .unwrap();
    let ctx = StepContext::builder().model(Arc::new(judge)).build();
    assert_eq!(before(&layer, &ctx, "send_mail", json!({})).await, SteeringDecision::guide("ask first"));
    let second = before(&layer, &ctx, "send_mail", json!({})).await;
    assert_eq!(second.action, SteeringAction::Deny);
    assert!(second.guidance.unwrap().starts_with("Rule 'ask' already guided 1 time(s) this turn"));
}

#[test]
fn escalating_after_zero_guides_is_refused_when_the_layer_is_built() {
    let Err(error) = steering(SteeringConfig::new([dry_run().escalate_after(0)])) else { panic!("accepted") };
    assert_eq!(
        error.to_string(),
        "INVALID_RULE: steering rule 'dry-run' escalates after 0 guides, so it could never guide (hint: give \
         escalate_after a count of 1 or more, or make the rule deny)"
    );
}
