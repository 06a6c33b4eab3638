//! The steering layer: evaluates rules at both gating hooks, keeps the ledger, delivers async feedback.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::time::Instant;

use super::judge::{self, failure_decision};
use super::ledger::{self, Evaluator, FailureCause, LedgerEntry, LedgerKind, RuleFailure};
use super::rules::{HookParams, LlmMode, SteeringConfig, SteeringRule};
use super::{SteeringAction, SteeringDecision};
use crate::context::{Context, ExecutionId, lock};
use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::exec::guard;
use crate::layer::{
    Budget, Hook, HookTimeouts, LayerState, MemoryLayer, ModelCallParams, Outcome, Scope, ScopeKey, Slot,
    ToolCallParams,
};
use crate::model::Item;

/// The steering layer's id.
pub const STEERING_LAYER_ID: &str = "steering";
/// Completed executions whose steering state stays readable after `dispose`.
const RECENT_EXECUTIONS: usize = 64;

/// An async verdict waiting to be shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feedback {
    /// The rule that produced it.
    pub rule_id: String,
    /// What the model should know.
    pub guidance: String,
}

/// A copy of the layer's state for one scope: the ledger, oldest first, and the undelivered feedback.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SteeringState {
    /// Decisions, oldest first, at most `max_ledger_entries`.
    pub ledger: Vec<LedgerEntry>,
    /// Async verdicts not yet delivered.
    pub pending_feedback: Vec<Feedback>,
}

#[derive(Default)]
struct Inner {
    ledger: VecDeque<LedgerEntry>,
    pending: VecDeque<Feedback>,
}

/// The steering layer. Build it with [`steering`].
pub struct SteeringLayer {
    config: SteeringConfig,
    states: LayerState<Inner>,
    recent: Mutex<VecDeque<(ExecutionId, Arc<Mutex<Inner>>)>>,
}

/// Builds the steering layer: slot 90, budget {0, 500}, hook timeouts 5000 ms / 10000 ms.
///
/// Rules are checked when built: non-empty unique ids, at least one hook, exactly one of predicate or judge.
pub fn steering(config: SteeringConfig) -> Result<Arc<SteeringLayer>, ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for rule in &config.rules {
        let bad = |message: String, hint: &str| Err(ConfigError::new(ConfigCode::InvalidRule, message, hint));
        if rule.id.trim().is_empty() {
            return Err(ConfigError::new(
                ConfigCode::EmptyStepId,
                "a steering rule has an empty id",
                "give every rule an id",
            ));
        }
        if !seen.insert(rule.id.as_str()) {
            return bad(format!("two steering rules share the id '{}'", rule.id), "give every rule its own id");
        }
        if rule.applies_to.is_empty() {
            return bad(
                format!("steering rule '{}' applies to no hook", rule.id),
                "list BeforeToolCall and/or AfterModelCall",
            );
        }
        if rule.predicate.is_some() == rule.llm_eval.is_some() {
            return bad(
                format!("steering rule '{}' needs exactly one of a predicate and an llm_eval", rule.id),
                "build it with SteeringRule::predicate or SteeringRule::llm",
            );
        }
    }
    Ok(Arc::new(SteeringLayer { config, states: LayerState::default(), recent: Mutex::new(VecDeque::new()) }))
}

/// The outcome of evaluating the rules for one hook call.
struct Evaluation {
    decision: SteeringDecision,
    deciders: Vec<(String, Evaluator)>,
    failures: Vec<RuleFailure>,
}

impl SteeringLayer {
    /// The configuration.
    pub fn config(&self) -> &SteeringConfig {
        &self.config
    }

    fn key(&self, ctx: &Context) -> ScopeKey {
        ScopeKey::for_context(ctx, self.config.scope)
    }

    fn entry(&self, ctx: &Context) -> Arc<Mutex<Inner>> {
        self.states.entry(&self.key(ctx))
    }

    fn snapshot(inner: &Mutex<Inner>) -> SteeringState {
        let inner = lock(inner);
        SteeringState {
            ledger: inner.ledger.iter().cloned().collect(),
            pending_feedback: inner.pending.iter().cloned().collect(),
        }
    }

    /// The state for an execution (execution scope), also after the execution ended (the last 64 are kept).
    pub fn state_of(&self, execution_id: ExecutionId) -> Option<SteeringState> {
        self.lookup(&ScopeKey::Execution(execution_id)).map(|s| Self::snapshot(&s))
    }

    /// The ledger for an execution.
    pub fn ledger(&self, execution_id: ExecutionId) -> Vec<LedgerEntry> {
        self.state_of(execution_id).map(|s| s.ledger).unwrap_or_default()
    }

    /// The state for a context's scope (any scope).
    pub fn state_for(&self, ctx: &Context) -> Option<SteeringState> {
        self.lookup(&self.key(ctx)).map(|s| Self::snapshot(&s))
    }

    fn lookup(&self, key: &ScopeKey) -> Option<Arc<Mutex<Inner>>> {
        self.states.get(key).or_else(|| match key {
            ScopeKey::Execution(id) => lock(&self.recent).iter().find(|(e, _)| e == id).map(|(_, s)| s.clone()),
            _ => None,
        })
    }

    async fn evaluate(
        &self,
        ctx: &Context,
        params: HookParams<'_>,
        state: &Arc<Mutex<Inner>>,
    ) -> Result<Evaluation, NoeticError> {
        let hook = params.hook();
        let timeout = match hook {
            Hook::BeforeToolCall => self.config.before_tool_call_timeout,
            Hook::AfterModelCall => self.config.after_model_call_timeout,
        };
        // The hook's time limit only matters for judges; predicates are synchronous.
        let mut deadline = None;
        // Non-allow decisions only (allows never change the aggregate), by rule index: no allocation per rule.
        let mut decided: Vec<(usize, Evaluator, SteeringDecision)> = Vec::new();
        let mut failures = Vec::new();
        let mut summary: Option<String> = None;
        for (index, rule) in self.config.rules.iter().enumerate().filter(|(_, r)| r.applies(hook)) {
            let (decision, evaluator) = if let Some(predicate) = &rule.predicate {
                match guard(&rule.id, "steering predicate", || predicate(&params)) {
                    Ok(d) => (d, Evaluator::Predicate),
                    Err(e) => {
                        // A broken programmatic rule fails closed: it guards something.
                        let cause = FailureCause::PredicatePanicked { message: e.to_string() };
                        let d = failure_decision(&rule.id, super::rules::FailurePolicy::Deny, &cause);
                        failures.push(RuleFailure { rule_id: rule.id.clone(), cause });
                        (d, Evaluator::Predicate)
                    }
                }
            } else if let Some(eval) = &rule.llm_eval {
                let model = ctx.model().cloned().ok_or_else(|| missing_call_model(rule))?;
                let summary = summary.get_or_insert_with(|| judge::summary(&params));
                let prompt = judge::prompt(&eval.prompt, summary);
                if eval.mode == LlmMode::Async {
                    self.fire_async(rule, model, ctx.clone(), prompt, state.clone());
                    continue;
                }
                let call = judge::judge(model, ctx.clone(), eval, prompt, self.config.max_retries);
                let deadline = *deadline.get_or_insert_with(|| Instant::now() + timeout);
                let verdict = match tokio::time::timeout_at(deadline, call).await {
                    Ok(v) => v,
                    Err(_) => Err(FailureCause::Timeout),
                };
                match verdict {
                    Ok(d) => (d, Evaluator::LlmSync),
                    Err(cause) => {
                        let d = failure_decision(&rule.id, eval.on_failure, &cause);
                        failures.push(RuleFailure { rule_id: rule.id.clone(), cause });
                        (d, Evaluator::LlmSync)
                    }
                }
            } else {
                continue;
            };
            match decision.action {
                SteeringAction::Allow => {}
                SteeringAction::Guide => decided.push((index, evaluator, decision)),
                SteeringAction::Deny => {
                    decided.push((index, evaluator, decision));
                    break;
                }
            }
        }
        Ok(self.aggregate(decided, failures))
    }

    /// Starts an async judge; a non-allow verdict is queued as feedback on the state captured now, and every
    /// verdict is written to the ledger when it resolves.
    fn fire_async(
        &self,
        rule: &SteeringRule,
        model: Arc<dyn crate::model::Model>,
        ctx: Context,
        prompt: String,
        state: Arc<Mutex<Inner>>,
    ) {
        let Some(eval) = rule.llm_eval.clone() else { return };
        let rule_id = rule.id.clone();
        let (max_retries, max_ledger) = (self.config.max_retries, self.config.max_ledger_entries);
        tokio::spawn(async move {
            let started = Instant::now();
            let verdict = judge::judge(model, ctx, &eval, prompt, max_retries).await;
            let (decision, failures) = match verdict {
                Ok(d) => (d, Vec::new()),
                Err(cause) => {
                    let d = failure_decision(&rule_id, eval.on_failure, &cause);
                    (d, vec![RuleFailure { rule_id: rule_id.clone(), cause }])
                }
            };
            let mut inner = lock(&state);
            if decision.action != SteeringAction::Allow {
                let guidance = decision.guidance.clone().unwrap_or_else(|| {
                    format!(
                        "Rule {rule_id}: {}",
                        if decision.action == SteeringAction::Deny { "deny" } else { "guide" }
                    )
                });
                inner.pending.push_back(Feedback { rule_id: rule_id.clone(), guidance });
            }
            let mut entry = LedgerEntry::new(LedgerKind::Custom, decision.action);
            entry.guidance = decision.guidance;
            entry.rule_id = Some(rule_id);
            entry.evaluator = Some(Evaluator::LlmAsync);
            entry.failures = failures;
            entry.duration = started.elapsed();
            ledger::append(&mut inner.ledger, entry, max_ledger);
        });
    }

    /// The most restrictive decision: the deny if any (it ended evaluation), else the guides with their texts
    /// joined, else allow.
    fn aggregate(&self, decided: Vec<(usize, Evaluator, SteeringDecision)>, failures: Vec<RuleFailure>) -> Evaluation {
        let id = |i: usize| self.config.rules.get(i).map(|r| r.id.clone()).unwrap_or_default();
        if let Some((i, ev, d)) = decided.iter().find(|(_, _, d)| d.action == SteeringAction::Deny) {
            return Evaluation { decision: d.clone(), deciders: vec![(id(*i), *ev)], failures };
        }
        if decided.is_empty() {
            return Evaluation { decision: SteeringDecision::allow(), deciders: Vec::new(), failures };
        }
        let texts: Vec<&str> =
            decided.iter().filter_map(|(_, _, d)| d.guidance.as_deref()).filter(|g| !g.is_empty()).collect();
        let guidance = (!texts.is_empty()).then(|| texts.join("\n"));
        Evaluation {
            decision: SteeringDecision { action: SteeringAction::Guide, guidance },
            deciders: decided.iter().map(|(i, ev, _)| (id(*i), *ev)).collect(),
            failures,
        }
    }

    async fn gate(&self, ctx: &Context, params: HookParams<'_>) -> Result<SteeringDecision, NoeticError> {
        let started = Instant::now();
        let state = self.entry(ctx);
        let evaluation = self.evaluate(ctx, params, &state).await?;
        let mut entry = LedgerEntry::new(
            match params {
                HookParams::BeforeToolCall(_) => LedgerKind::ToolCall,
                HookParams::AfterModelCall(_) => LedgerKind::ModelTurn,
            },
            evaluation.decision.action,
        );
        match params {
            HookParams::BeforeToolCall(c) => {
                entry.tool_name = Some(c.name.to_owned());
                entry.tool_args = Some(c.args.clone());
            }
            HookParams::AfterModelCall(m) => entry.usage = Some(m.response.usage),
        }
        entry.guidance = evaluation.decision.guidance.clone();
        if !evaluation.deciders.is_empty() {
            entry.rule_id = Some(evaluation.deciders.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(","));
            entry.evaluator = evaluation.deciders.first().map(|(_, e)| *e);
        }
        entry.failures = evaluation.failures;
        entry.duration = started.elapsed();
        ledger::append(&mut lock(&state).ledger, entry, self.config.max_ledger_entries);
        Ok(evaluation.decision)
    }
}

fn missing_call_model(rule: &SteeringRule) -> NoeticError {
    ConfigError::new(
        ConfigCode::MissingCallModel,
        format!("LLM-evaluated steering rule \"{}\" requires a model to judge with, but none is available", rule.id),
        "configure a model on the runtime (Runtime::builder().model(...)) or the context; the rule fails closed until then",
    )
    .into()
}

/// Renders the feedback block.
fn render(lines: &[String]) -> String {
    format!("<steering_feedback>\n{}\n</steering_feedback>", lines.join("\n"))
}

fn tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4)).unwrap_or(u32::MAX)
}

impl MemoryLayer for SteeringLayer {
    fn id(&self) -> &str {
        STEERING_LAYER_ID
    }

    fn slot(&self) -> Slot {
        Slot::STEERING
    }

    fn scope(&self) -> Scope {
        self.config.scope
    }

    fn budget(&self) -> Budget {
        Budget { min: 0, max: 500 }
    }

    /// The gating hooks enforce their own time limits: the only part that can wait is a judge call, and it runs
    /// under the hook's deadline (a timeout is recorded in the ledger and decided by the rule's policy).
    /// Predicates are synchronous. So the lifecycle puts no second timer around them.
    fn timeouts(&self) -> HookTimeouts {
        HookTimeouts { before_tool_call: None, after_model_call: None, ..HookTimeouts::default() }
    }

    fn recall<'a>(&'a self, ctx: &'a Context, budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async move {
            let Some(state) = self.states.get(&self.key(ctx)) else { return Ok(Vec::new()) };
            let mut inner = lock(&state);
            let mut lines: Vec<String> = Vec::new();
            while let Some(next) = inner.pending.front() {
                let line = format!("[{}] {}", next.rule_id, next.guidance);
                let mut candidate = lines.clone();
                candidate.push(line);
                if tokens(&render(&candidate)) > budget {
                    if lines.is_empty() {
                        // One verdict alone is over budget: deliver it shortened rather than never.
                        let room = (budget as usize * 4).saturating_sub(render(&[String::new()]).len() + 16);
                        let short: String = candidate[0].chars().take(room).collect();
                        lines.push(format!("{short} [truncated]"));
                        inner.pending.pop_front();
                    }
                    break;
                }
                lines = candidate;
                inner.pending.pop_front();
            }
            if lines.is_empty() {
                return Ok(Vec::new());
            }
            Ok(vec![Item::developer(render(&lines))])
        })
    }

    fn before_tool_call<'a>(
        &'a self,
        ctx: &'a Context,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        Box::pin(self.gate(ctx, HookParams::BeforeToolCall(call)))
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: &'a Context,
        call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        Box::pin(self.gate(ctx, HookParams::AfterModelCall(call)))
    }

    fn on_spawn<'a>(
        &'a self,
        parent: &'a Context,
        child: &'a Context,
    ) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async move {
            let (parent_key, child_key) = (self.key(parent), self.key(child));
            if parent_key != child_key {
                let ledger = self.states.get(&parent_key).map(|s| lock(&s).ledger.clone()).unwrap_or_default();
                self.states.insert(child_key, Inner { ledger, pending: VecDeque::new() });
            }
            Ok(Vec::new())
        })
    }

    fn on_complete<'a>(&'a self, ctx: &'a Context, outcome: Outcome) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            let state = self.entry(ctx);
            let mut entry = LedgerEntry::new(LedgerKind::Custom, SteeringAction::Allow);
            entry.outcome = Some(outcome);
            ledger::append(&mut lock(&state).ledger, entry, self.config.max_ledger_entries);
            Ok(())
        })
    }

    fn dispose<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            if let key @ ScopeKey::Execution(id) = self.key(ctx)
                && let Some(state) = self.states.remove(&key)
            {
                let mut recent = lock(&self.recent);
                recent.push_back((id, state));
                while recent.len() > RECENT_EXECUTIONS {
                    recent.pop_front();
                }
            }
            Ok(())
        })
    }

    fn state(&self, key: &ScopeKey) -> Option<Box<dyn std::any::Any + Send>> {
        self.lookup(key).map(|s| Box::new(Self::snapshot(&s)) as Box<dyn std::any::Any + Send>)
    }
}
