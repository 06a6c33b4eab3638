//! What the steering layer tests share: counting rules, a `before_tool_call` shortcut, the layer's state and a
//! scripted judge.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic::layer::ToolCallParams;
use noetic::prelude::*;
use noetic::steering::SteeringState;
use serde_json::Value;

pub fn counted(id: &str, hooks: Vec<Hook>, decision: SteeringDecision, calls: &Arc<AtomicUsize>) -> SteeringRule {
    let calls = calls.clone();
    SteeringRule::predicate(id, hooks, move |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        decision.clone()
    })
}

pub async fn before<'c>(
    layer: &SteeringLayer,
    ctx: impl Into<HookContext<'c>>,
    name: &str,
    args: Value,
) -> SteeringDecision {
    layer
        .before_tool_call(&ctx.into(), ToolCallParams { call_id: "c1", name, args: &args })
        .await
        .unwrap()
        .decision()
        .unwrap()
}

pub fn state(layer: &SteeringLayer, ctx: &Context) -> SteeringState {
    layer.state_for(ctx).unwrap_or_default()
}

/// A judge that answers from a list of replies, then repeats the last one.
pub fn judge(replies: &[&str]) -> ScriptedModel {
    let model = ScriptedModel::new(replies.iter().map(|r| ModelResponse::text(*r)));
    let last = replies.last().copied().unwrap_or("ALLOW").to_owned();
    model.with_responder(move |_| Ok(ModelResponse::text(last.clone())))
}

/// Two tool-call rules: `no-rm` denies `rm`, `fragile` panics on `boom`; both allow anything else.
pub fn deny_rm_and_panic_on_boom() -> Vec<SteeringRule> {
    vec![
        SteeringRule::predicate("no-rm", [Hook::BeforeToolCall], |p| match p.tool_call() {
            Some(c) if c.name == "rm" => SteeringDecision::deny("never rm"),
            _ => SteeringDecision::allow(),
        }),
        SteeringRule::predicate("fragile", [Hook::BeforeToolCall], |p| match p.tool_call() {
            Some(c) if c.name == "boom" => panic!("fragile rule broke"),
            _ => SteeringDecision::allow(),
        }),
    ]
}
