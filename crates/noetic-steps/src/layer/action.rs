//! What a gating layer decides about a tool call: let it run, guide or deny it (a review decision), or run it
//! with other arguments.

use serde_json::Value;

use crate::decision::{SteeringAction, SteeringDecision};

/// A gating layer's answer to [`Gates::before_tool_call`](super::Gates::before_tool_call).
///
/// A [`SteeringDecision`] converts into one (`decision.into()`), so a layer that only reviews keeps its code.
///
/// **Rewrites.** [`ToolCallAction::Rewrite`] runs the call with other arguments. The gates are asked again from the
/// first layer with the new arguments (so every gate, the steering layer's rules included, has judged the
/// arguments that run, wherever the rewriting layer sits); a layer that "rewrites" to the arguments it was shown
/// allows. After [`MAX_REWRITES`] rewrites of one call the call is denied (the layers did not settle). The new
/// arguments are checked against the tool's input schema before the call runs — a rewrite that breaks the schema
/// gives the model an invalid-arguments error, and the tool does not run — and an approval, if the tool needs one,
/// asks about them. Each rewrite is kept in the session's ledger (a decision entry naming the layer, the arguments
/// before and after, and the reason) and reported as a `tool_call_rewritten` event. The model's own tool call in
/// the conversation keeps the arguments it wrote; the result it reads is the rewritten call's.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallAction {
    /// Let the call run.
    Allow,
    /// Do not run the call; tell the model how to correct course (it may try again).
    Guide(Option<String>),
    /// Do not run the call.
    Deny(Option<String>),
    /// Run the call with these arguments instead.
    Rewrite(Rewrite),
}

/// New arguments for a call, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// The arguments the call runs with (a JSON object the tool's input schema accepts).
    pub args: Value,
    /// Why they were changed (kept in the ledger and shown in the event).
    pub reason: String,
}

/// How many times the gates may rewrite one call's arguments before the call is denied.
pub const MAX_REWRITES: usize = 4;

impl ToolCallAction {
    /// Let the call run.
    pub fn allow() -> Self {
        ToolCallAction::Allow
    }

    /// Do not run the call; `guidance` tells the model how to correct course.
    pub fn guide(guidance: impl Into<String>) -> Self {
        ToolCallAction::Guide(Some(guidance.into()))
    }

    /// Do not run the call; `guidance` says why.
    pub fn deny(guidance: impl Into<String>) -> Self {
        ToolCallAction::Deny(Some(guidance.into()))
    }

    /// Run the call with `args` instead; `reason` says why.
    pub fn rewrite(args: Value, reason: impl Into<String>) -> Self {
        ToolCallAction::Rewrite(Rewrite { args, reason: reason.into() })
    }
}

impl ToolCallAction {
    /// The review decision this is (`None` for a rewrite).
    pub fn decision(self) -> Option<SteeringDecision> {
        let (action, guidance) = match self {
            ToolCallAction::Allow => (SteeringAction::Allow, None),
            ToolCallAction::Guide(guidance) => (SteeringAction::Guide, guidance),
            ToolCallAction::Deny(guidance) => (SteeringAction::Deny, guidance),
            ToolCallAction::Rewrite(_) => return None,
        };
        Some(SteeringDecision { action, guidance })
    }
}

impl From<SteeringDecision> for ToolCallAction {
    fn from(decision: SteeringDecision) -> Self {
        match decision.action {
            SteeringAction::Allow => ToolCallAction::Allow,
            SteeringAction::Guide => ToolCallAction::Guide(decision.guidance),
            SteeringAction::Deny => ToolCallAction::Deny(decision.guidance),
        }
    }
}
