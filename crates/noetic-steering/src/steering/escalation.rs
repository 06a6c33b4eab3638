//! Escalation (`escalate_after = N`): a rule that has guided N times in one turn denies its next GUIDE, and
//! the model is told why. Counted per rule and turn in the scope's state; a new turn starts from zero.

use std::sync::{Arc, Mutex};

use super::feedback::Inner;
use super::layer::SteeringLayer;
use super::{SteeringAction, SteeringDecision};
use crate::context::{ExecutionId, lock};

/// Where a hook call's verdicts are counted: the scope's state and the turn (execution) making the call.
#[derive(Clone, Copy)]
pub(super) struct Turn<'a> {
    pub(super) state: &'a Arc<Mutex<Inner>>,
    pub(super) execution: ExecutionId,
}

impl SteeringLayer {
    /// Counts a GUIDE of rule `index` if the rule escalates, and turns it into a DENY once the rule has guided
    /// `escalate_after` times this turn. True when it did.
    pub(super) fn escalate(&self, index: usize, decision: &mut SteeringDecision, turn: Turn<'_>) -> bool {
        if decision.action != SteeringAction::Guide {
            return false;
        }
        let Some(rule) = self.config().rules.get(index) else { return false };
        let Some(limit) = rule.escalate_after else { return false };
        let count = lock(turn.state).guides.bump(turn.execution, index);
        if count <= limit {
            return false;
        }
        let advice = decision.guidance.as_deref().map(|g| format!(" The advice was: {g}")).unwrap_or_default();
        *decision = SteeringDecision::deny(format!(
            "Rule '{}' already guided {limit} time(s) this turn and the advice was not followed, so this is now \
             denied.{advice} Follow it, or ask the user.",
            rule.id
        ));
        true
    }

    /// [`escalate`](Self::escalate) for every kept decision of one evaluation, in rule order; the rule indices
    /// that escalated.
    pub(super) fn escalate_all(
        &self,
        decided: &mut [(usize, super::ledger::Evaluator, SteeringDecision)],
        turn: Turn<'_>,
    ) -> Vec<usize> {
        let mut escalated = Vec::new();
        for (index, _, decision) in decided.iter_mut().filter(|(_, _, d)| d.action == SteeringAction::Guide) {
            if self.escalate(*index, decision, turn) {
                escalated.push(*index);
            }
        }
        escalated
    }
}
