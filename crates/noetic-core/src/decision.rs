//! The decision a review gives (`allow`, `guide`, `deny`): made by steering rules, aggregated by the memory-layer
//! lifecycle, acted on by the interpreter, reported in events. It sits at the bottom of the module layers so all
//! of them can name it; its public home is the `steering` module.

use serde::{Deserialize, Serialize};

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteeringAction {
    /// Let it happen.
    Allow,
    /// Do not let it happen; tell the agent how to correct course.
    Guide,
    /// Do not let it happen.
    Deny,
}

/// A rule's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeringDecision {
    /// The action.
    pub action: SteeringAction,
    /// Why, and what to do instead.
    pub guidance: Option<String>,
}

impl SteeringDecision {
    /// Allow.
    pub fn allow() -> Self {
        SteeringDecision { action: SteeringAction::Allow, guidance: None }
    }

    /// Deny with guidance.
    pub fn deny(guidance: impl Into<String>) -> Self {
        SteeringDecision { action: SteeringAction::Deny, guidance: Some(guidance.into()) }
    }

    /// Guide with guidance.
    pub fn guide(guidance: impl Into<String>) -> Self {
        SteeringDecision { action: SteeringAction::Guide, guidance: Some(guidance.into()) }
    }
}
