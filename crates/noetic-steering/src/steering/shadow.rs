//! Shadow rules: evaluated after the live rules of a hook call, each on its own, never enforced. Each one that
//! concerns the call leaves its would-be decision in the ledger, marked [`Shadow`] with the live decision, so a
//! rule can be watched on real traffic before `noetic rules promote` makes it live.
//!
//! A shadow rule never changes what happens: a panicking predicate, a failing or misconfigured judge are recorded
//! in its entry (with the decision its failure policy — or, for a configuration error, a live rule — would have
//! made) and the hook goes on. A shadow judge is always awaited, also one written async, so its decision sits
//! next to the live one; it runs under the hook's time limit, counted from when the shadow rules start.

use tokio::time::Instant;

use super::escalation::Turn;
use super::judge::{self, failure_decision};
use super::layer::SteeringLayer;
use super::ledger::{Evaluator, FailureCause, LedgerEntry, LedgerKind, RuleFailure, Shadow};
use super::rules::{FailurePolicy, HookParams, SteeringRule};
use super::{SteeringAction, SteeringDecision};
use crate::context::HookContext;
use crate::exec::guard;
use crate::layer::Hook;

impl SteeringLayer {
    /// The would-be decisions of the shadow rules that concern this hook call, in rule order, each marked with
    /// the `live` decision.
    pub(super) async fn shadow(
        &self,
        ctx: &HookContext<'_>,
        params: &HookParams<'_>,
        turn: Turn<'_>,
        live: SteeringAction,
    ) -> Vec<LedgerEntry> {
        let timeout = match params.hook() {
            Hook::BeforeToolCall => self.config().before_tool_call_timeout,
            Hook::AfterModelCall => self.config().after_model_call_timeout,
        };
        let deadline = Instant::now() + timeout;
        let mut entries = Vec::new();
        for (index, rule) in self.shadow_rules().filter(|(_, r)| r.applies_to_params(params)) {
            let started = Instant::now();
            let (mut decision, evaluator, failure) = self.would_decide(ctx, params, rule, deadline).await;
            let escalated = self.escalate(index, &mut decision, turn);
            let mut entry = LedgerEntry::new(
                match params {
                    HookParams::BeforeToolCall(_) => LedgerKind::ToolCall,
                    HookParams::AfterModelCall(_) => LedgerKind::ModelTurn,
                },
                decision.action,
            );
            match params {
                HookParams::BeforeToolCall(c) => {
                    entry.tool_name = Some(c.name.to_owned());
                    entry.tool_args = Some(c.args.clone());
                }
                HookParams::AfterModelCall(m) => entry.usage = Some(m.response.usage),
            }
            entry.guidance = decision.guidance;
            entry.rule_id = Some(rule.id.clone());
            entry.evaluator = Some(evaluator);
            entry.failures = failure.into_iter().collect();
            entry.duration = started.elapsed();
            entry.shadow = Some(Shadow { live });
            entry.escalated = escalated;
            entries.push(entry);
        }
        entries
    }

    /// What `rule` would decide, how it evaluated, and why it could not decide on its own, if so.
    async fn would_decide(
        &self,
        ctx: &HookContext<'_>,
        params: &HookParams<'_>,
        rule: &SteeringRule,
        deadline: Instant,
    ) -> (SteeringDecision, Evaluator, Option<RuleFailure>) {
        let failed = |policy, cause: FailureCause| {
            let decision = failure_decision(&rule.id, policy, &cause);
            (decision, Some(RuleFailure { rule_id: rule.id.clone(), cause }))
        };
        if let Some(predicate) = &rule.predicate {
            return match guard(&rule.id, "steering predicate", || predicate(params)) {
                Ok(decision) => (decision, Evaluator::Predicate, None),
                Err(e) => {
                    let (d, f) =
                        failed(FailurePolicy::Deny, FailureCause::PredicatePanicked { message: e.to_string() });
                    (d, Evaluator::Predicate, f)
                }
            };
        }
        let Some(eval) = &rule.llm_eval else { return (SteeringDecision::allow(), Evaluator::Predicate, None) };
        let Some(model) = ctx.model().cloned() else {
            let error = crate::error::ConfigError::new(
                crate::error::ConfigCode::MissingCallModel,
                format!("shadow steering rule \"{}\" needs a model to judge with, but none is available", rule.id),
                "configure a model on the runtime or the context; the shadow rule is recorded as denying until then",
            );
            let (d, f) = failed(FailurePolicy::Deny, FailureCause::Config { error });
            return (d, Evaluator::LlmSync, f);
        };
        let prompt = judge::prompt(&eval.prompt, &judge::summary(params));
        let call =
            judge::judge(model, ctx.context().clone(), ctx.meter().cloned(), eval, prompt, self.config().max_retries);
        let verdict = match Box::pin(tokio::time::timeout_at(deadline, call)).await {
            Ok(verdict) => verdict,
            Err(_) => Err(FailureCause::Timeout),
        };
        match verdict {
            Ok(decision) => (decision, Evaluator::LlmSync, None),
            Err(cause @ FailureCause::Config { .. }) => {
                let (d, f) = failed(FailurePolicy::Deny, cause);
                (d, Evaluator::LlmSync, f)
            }
            Err(cause) => {
                let (d, f) = failed(eval.on_failure, cause);
                (d, Evaluator::LlmSync, f)
            }
        }
    }
}
