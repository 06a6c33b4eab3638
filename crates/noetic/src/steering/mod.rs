//! The steering layer (seed 1): rules checked before every tool call and after every model response.

mod verdict;

use serde::{Deserialize, Serialize};

pub use verdict::parse_verdict;

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
