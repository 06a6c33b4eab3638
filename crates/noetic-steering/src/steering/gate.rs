//! Evaluating the rules for one gating hook: predicates, sync judges under the hook's deadline, async judges
//! fired and forgotten; the aggregate decision and its ledger entry.
//!
//! A configuration error — no model to judge with (`MISSING_CALL_MODEL`), or any `ConfigError` the judge's
//! model call returns (`NO_MODEL_PROVIDER` …) — never goes to a rule's failure policy: it is recorded in the
//! ledger as a deny and fails the step (SPEC 2.6, 3.3). An async judge's configuration error resolves after its
//! hook returned, so it fails the *next* gate or recall of the execution that fired it (or, when that execution
//! has ended, of its parent, or of its thread's next execution).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::Instrument;

mod record;

use super::escalation::Turn;
use super::feedback::{self, CarryOver, Feedback, Inner, Late};
use super::judge::{self, failure_decision};
use super::layer::SteeringLayer;
use super::ledger::{self, Evaluator, FailureCause, JudgeVerdict, LedgerEntry, LedgerKind, RuleFailure};
use super::rules::{FailurePolicy, HookParams, LlmMode, SteeringRule};
use super::{SteeringAction, SteeringDecision};
use crate::context::{HookContext, lock};
use crate::error::{ConfigCode, ConfigError, NoeticError, panicked};
use crate::exec::guard;
use crate::layer::Hook;
use record::Started;

/// The outcome of evaluating the rules for one hook call.
pub(super) struct Evaluation {
    pub(super) decision: SteeringDecision,
    pub(super) deciders: Vec<(String, Evaluator)>,
    pub(super) failures: Vec<RuleFailure>,
    /// A configuration error that ended evaluation: the hook fails with it (boxed: an evaluation is moved
    /// between the steps of every gate, and this is rarely set).
    fault: Option<Box<ConfigError>>,
    /// The decision is a DENY an escalating rule made of a GUIDE.
    pub(super) escalated: bool,
    /// The blocking judges that gave a verdict (or whose failure policy decided), with their fingerprints.
    judges: Vec<JudgeVerdict>,
}

impl Evaluation {
    /// Allow, decided by no rule: what a gate whose rules all allowed (or that has none) records.
    fn allow() -> Self {
        Evaluation {
            decision: SteeringDecision::allow(),
            deciders: Vec::new(),
            failures: Vec::new(),
            fault: None,
            escalated: false,
            judges: Vec::new(),
        }
    }

    /// True for an allow that no rule made, with nothing else to record: the usual gate's evaluation.
    fn no_rule_decided(&self) -> bool {
        self.decision.action == SteeringAction::Allow
            && self.decision.guidance.is_none()
            && self.deciders.is_empty()
            && self.failures.is_empty()
            && self.fault.is_none()
            && !self.escalated
            && self.judges.is_empty()
    }
}

/// What the predicates of a hook whose rules are all predicates came to.
pub(super) enum Predicates {
    /// No rule concerns the call: an allow, with nothing evaluated.
    NoRule,
    /// Every predicate allowed.
    Allowed,
    /// A rule guided or denied (or panicked): the evaluation to record.
    Decided(Evaluation),
}

impl Predicates {
    /// The evaluation, also of an allow.
    pub(super) fn evaluation(self) -> Evaluation {
        match self {
            Predicates::Decided(evaluation) => evaluation,
            Predicates::NoRule | Predicates::Allowed => Evaluation::allow(),
        }
    }
}

impl SteeringLayer {
    async fn evaluate(&self, ctx: &HookContext<'_>, params: HookParams<'_>, turn: Turn<'_>) -> Evaluation {
        let hook = params.hook();
        if self.only_predicates(hook) {
            return self.evaluate_predicates(&params, turn).evaluation();
        }
        let timeout = match hook {
            Hook::BeforeToolCall => self.config().before_tool_call_timeout,
            Hook::AfterModelCall => self.config().after_model_call_timeout,
        };
        // The hook's time limit only matters for judges; predicates are synchronous.
        let mut deadline = None;
        // Non-allow decisions, and the allows of sync LLM judges (an allow they decided names them), by rule
        // index. A predicate's allow is not kept: a predicate-only gate allocates nothing here.
        let mut decided: Vec<(usize, Evaluator, SteeringDecision)> = Vec::new();
        let mut failures = Vec::new();
        let mut summary: Option<String> = None;
        let mut judges = Vec::new();
        for (index, rule) in self.rules_for(&params) {
            let (decision, evaluator) = if let Some(predicate) = &rule.predicate {
                match guard(&rule.id, "steering predicate", || predicate(&params)) {
                    Ok(d) => (d, Evaluator::Predicate),
                    Err(e) => {
                        // A broken programmatic rule fails closed: it guards something.
                        let cause = FailureCause::PredicatePanicked { message: e.to_string() };
                        let d = failure_decision(&rule.id, FailurePolicy::Deny, &cause);
                        failures.push(RuleFailure { rule_id: rule.id.clone(), cause });
                        (d, Evaluator::Predicate)
                    }
                }
            } else if let Some(eval) = &rule.llm_eval {
                let evaluator = if eval.mode == LlmMode::Async { Evaluator::LlmAsync } else { Evaluator::LlmSync };
                let Some(model) = ctx.model().cloned() else {
                    return config_failure(evaluator, rule, missing_call_model(rule), failures);
                };
                let summary = summary.get_or_insert_with(|| judge::summary(&params));
                let prompt = judge::prompt(&eval.prompt, summary);
                if eval.mode == LlmMode::Async {
                    self.fire_async(rule, model, ctx, prompt, turn.state.clone());
                    continue;
                }
                let call = judge::judge(
                    model,
                    ctx.context().clone(),
                    ctx.meter().cloned(),
                    eval,
                    prompt,
                    self.config().max_retries,
                );
                let deadline = *deadline.get_or_insert_with(|| Instant::now() + timeout);
                // Boxed: a judge call's state is large, and inline it would be carried (and copied) by every
                // gate future, also when only predicates run.
                let verdict = match Box::pin(tokio::time::timeout_at(deadline, call)).await {
                    Ok(v) => v,
                    Err(_) => Err(FailureCause::Timeout),
                };
                let decision = match verdict {
                    Ok(d) => d,
                    Err(FailureCause::Config { error }) => {
                        return config_failure(evaluator, rule, error, failures);
                    }
                    Err(cause) => {
                        let d = failure_decision(&rule.id, eval.on_failure, &cause);
                        failures.push(RuleFailure { rule_id: rule.id.clone(), cause });
                        d
                    }
                };
                judges.push(JudgeVerdict {
                    rule_id: rule.id.clone(),
                    fingerprint: rule.fingerprint().unwrap_or_default(),
                    action: decision.action,
                    guidance: decision.guidance.clone(),
                });
                (decision, Evaluator::LlmSync)
            } else {
                continue;
            };
            if note(&mut decided, (index, evaluator, decision)) {
                break;
            }
        }
        Evaluation { judges, ..self.aggregate(decided, failures, turn) }
    }

    /// [`evaluate`](Self::evaluate) when every rule of the hook is a predicate: the same decisions, with one
    /// unwind guard around the run instead of one per rule. A panicking predicate denies (fail closed) and so
    /// ends the run, exactly as the per-rule guard would.
    pub(super) fn evaluate_predicates(&self, params: &HookParams<'_>, turn: Turn<'_>) -> Predicates {
        let (candidates, check_scopes) = self.candidates(params);
        // No rule concerns the call (after a model response, in a layer whose rules all guard tool calls): allow.
        if candidates.is_empty() {
            return Predicates::NoRule;
        }
        let mut decided: Vec<(usize, Evaluator, SteeringDecision)> = Vec::new();
        // The rule whose predicate runs (to name it if it panics).
        let mut running = 0;
        let rules = &self.config().rules;
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            for candidate in candidates {
                let Some(predicate) = &candidate.predicate else { continue };
                if check_scopes && !rules.get(candidate.index).is_some_and(|rule| rule.concerns(params)) {
                    continue;
                }
                running = candidate.index;
                let decision = predicate(params);
                // The usual answer: nothing to keep (see `note`).
                if decision.action == SteeringAction::Allow {
                    continue;
                }
                if note(&mut decided, (candidate.index, Evaluator::Predicate, decision)) {
                    break;
                }
            }
        }));
        let mut failures = Vec::new();
        match run {
            // Every predicate allowed: nothing to aggregate, escalate or name.
            Ok(()) if decided.is_empty() => return Predicates::Allowed,
            Ok(()) => {}
            Err(payload) => {
                let index = running;
                let id = rules.get(index).map_or("", |rule| rule.id.as_str());
                let error = panicked(id, "steering predicate", &*payload);
                let cause = FailureCause::PredicatePanicked { message: error.to_string() };
                let decision = failure_decision(id, FailurePolicy::Deny, &cause);
                failures.push(RuleFailure { rule_id: id.to_owned(), cause });
                decided.push((index, Evaluator::Predicate, decision));
            }
        }
        Predicates::Decided(self.aggregate(decided, failures, turn))
    }

    /// Starts an async judge; a non-allow verdict is queued as feedback on the state captured now (or wherever
    /// that state forwards once its execution ended), and every verdict is written to that state's ledger.
    fn fire_async(
        &self,
        rule: &SteeringRule,
        model: Arc<dyn crate::model::Model>,
        ctx: &HookContext<'_>,
        prompt: String,
        state: Arc<Mutex<Inner>>,
    ) {
        let Some(eval) = rule.llm_eval.clone() else { return };
        let rule_id = rule.id.clone();
        let (max_retries, max_ledger) = (self.config().max_retries, self.config().max_ledger_entries);
        let carry: Arc<CarryOver> = self.carry_over().clone();
        // The verdict outlives the hook call: it takes the context and the services it uses with it.
        let (records, meter) = (ctx.records().cloned(), ctx.meter().cloned());
        let ctx = ctx.context().clone();
        // The verdict outlives the call it judges: it gets a span of its own, linked to the call's.
        let span = tracing::info_span!(
            parent: None,
            "steering_judge",
            otel.name = format_args!("steering_judge {rule_id}"),
            noetic.steering.rule_id = &*rule_id,
            noetic.steering.evaluator = Evaluator::LlmAsync.as_str(),
        );
        span.follows_from(tracing::Span::current().id());
        let task = async move {
            let started = Instant::now();
            let verdict = judge::judge(model, ctx, meter, &eval, prompt, max_retries).await;
            let (decision, failures, late) = match verdict {
                Ok(d) => {
                    let late = (d.action != SteeringAction::Allow).then(|| {
                        let guidance = d.guidance.clone().unwrap_or_else(|| {
                            let word = if d.action == SteeringAction::Deny { "deny" } else { "guide" };
                            format!("Rule {rule_id}: {word}")
                        });
                        Late::Feedback(Feedback { rule_id: rule_id.clone(), guidance })
                    });
                    (d, Vec::new(), late)
                }
                Err(FailureCause::Config { error }) => {
                    tracing::error!(rule_id = %rule_id, error = %error, "async steering judge is misconfigured");
                    let failure =
                        RuleFailure { rule_id: rule_id.clone(), cause: FailureCause::Config { error: error.clone() } };
                    (SteeringDecision::deny(error.to_string()), vec![failure], Some(Late::Fault(error)))
                }
                Err(cause) => {
                    let d = failure_decision(&rule_id, eval.on_failure, &cause);
                    let late = (d.action != SteeringAction::Allow).then(|| {
                        let guidance = d.guidance.clone().unwrap_or_else(|| format!("Rule {rule_id}: deny"));
                        Late::Feedback(Feedback { rule_id: rule_id.clone(), guidance })
                    });
                    (d, vec![RuleFailure { rule_id: rule_id.clone(), cause }], late)
                }
            };
            let mut entry = LedgerEntry::new(LedgerKind::Custom, decision.action);
            entry.guidance = decision.guidance;
            entry.rule_id = Some(rule_id);
            entry.evaluator = Some(Evaluator::LlmAsync);
            entry.failures = failures;
            entry.duration = started.elapsed();
            ledger::trace(&entry, "async");
            // Delivered before it is recorded: a session log that records a verdict resolving after its turn
            // ended saves the thread's carried feedback with it.
            if let Some(late) = late {
                feedback::deliver(&state, late, &carry);
            }
            if let Some(records) = records {
                records.ledger_entry(Box::new(entry.clone()));
            }
            lock(&state).ledger.push(entry, max_ledger);
        };
        tokio::spawn(task.instrument(span));
    }

    /// The most restrictive decision: the deny if any (it ended evaluation, or an escalating rule made it of a
    /// guide), else the guides with their texts joined and named, else allow — named after the LLM judges that
    /// allowed, if any looked.
    pub(super) fn aggregate(
        &self,
        mut decided: Vec<(usize, Evaluator, SteeringDecision)>,
        failures: Vec<RuleFailure>,
        turn: Turn<'_>,
    ) -> Evaluation {
        let escalated = self.escalate_all(&mut decided, turn);
        let id = |i: usize| self.config().rules.get(i).map(|r| r.id.clone()).unwrap_or_default();
        if let Some((i, ev, d)) = decided.iter().find(|(_, _, d)| d.action == SteeringAction::Deny) {
            let escalated = escalated.contains(i);
            return Evaluation {
                decision: d.clone(),
                deciders: vec![(id(*i), *ev)],
                failures,
                fault: None,
                escalated,
                judges: Vec::new(),
            };
        }
        if decided.is_empty() {
            let decision = SteeringDecision::allow();
            return Evaluation {
                decision,
                deciders: Vec::new(),
                failures,
                fault: None,
                escalated: false,
                judges: Vec::new(),
            };
        }
        let names = |action: SteeringAction| {
            decided.iter().filter(move |(_, _, d)| d.action == action).map(|(i, ev, _)| (id(*i), *ev)).collect()
        };
        if decided.iter().all(|(_, _, d)| d.action == SteeringAction::Allow) {
            let deciders = names(SteeringAction::Allow);
            let decision = SteeringDecision::allow();
            return Evaluation { decision, deciders, failures, fault: None, escalated: false, judges: Vec::new() };
        }
        let guides = decided.iter().filter(|(_, _, d)| d.action == SteeringAction::Guide);
        let texts: Vec<&str> = guides.filter_map(|(_, _, d)| d.guidance.as_deref()).filter(|g| !g.is_empty()).collect();
        let guidance = (!texts.is_empty()).then(|| texts.join("\n"));
        Evaluation {
            decision: SteeringDecision { action: SteeringAction::Guide, guidance },
            deciders: names(SteeringAction::Guide),
            failures,
            fault: None,
            escalated: false,
            judges: Vec::new(),
        }
    }

    /// Evaluates the rules for one hook call and records the decision. Fails with the configuration error an
    /// earlier async judge of this execution hit, or one met now.
    pub(super) async fn gate(
        &self,
        ctx: &HookContext<'_>,
        params: HookParams<'_>,
    ) -> Result<SteeringDecision, NoeticError> {
        let started = Started::Clock(Instant::now());
        let state = self.entry(ctx);
        self.surface_fault(ctx, &state)?;
        let turn = Turn { state: &state, execution: ctx.execution_id() };
        let evaluation = self.evaluate(ctx, params, turn).await;
        if !self.has_shadow_rules() {
            return self.record(ctx, params, &state, evaluation, started);
        }
        let (entry, result) = self.entry_of(params, evaluation, started);
        // The shadow rules' would-be decisions follow the live one, in the log and in the ledger.
        let shadows = self.shadow(ctx, &params, turn, entry.action).await;
        ctx.record_ledger(&entry);
        shadows.iter().for_each(|shadow| ctx.record_ledger(shadow));
        let mut inner = lock(&state);
        for entry in std::iter::once(entry).chain(shadows) {
            inner.ledger.push(entry, self.config().max_ledger_entries);
        }
        result
    }

    /// [`gate`](Self::gate) for a hook whose live rules are all predicates (or that has none) when there are no
    /// shadow rules: the same decision and ledger entry, made at once, so the hook needs no state machine.
    pub(super) fn gate_now(
        &self,
        ctx: &HookContext<'_>,
        params: HookParams<'_>,
    ) -> Result<SteeringDecision, NoeticError> {
        // Read from the clock that stamps the entry, so the entry takes one clock read less.
        let started = SystemTime::now();
        let state = self.entry(ctx);
        self.surface_fault(ctx, &state)?;
        let turn = Turn { state: &state, execution: ctx.execution_id() };
        match self.evaluate_predicates(&params, turn) {
            // Nothing was evaluated: the entry is stamped when the hook was called, and took no time.
            Predicates::NoRule => self.record_allow(ctx, &params, &state, started, Duration::ZERO),
            Predicates::Allowed => {
                let now = SystemTime::now();
                self.record_allow(ctx, &params, &state, now, now.duration_since(started).unwrap_or_default())
            }
            Predicates::Decided(evaluation) => self.record(ctx, params, &state, evaluation, Started::Wall(started)),
        }
    }
}

/// Keeps a rule's decision if it can change the aggregate or names who decided it (a predicate's allow does
/// neither); true when it denies, which ends the evaluation.
#[inline]
pub(super) fn note(
    decided: &mut Vec<(usize, Evaluator, SteeringDecision)>,
    rule: (usize, Evaluator, SteeringDecision),
) -> bool {
    match rule.2.action {
        // A sync judge's allow is kept too: an allow the LLM judges decided names them in the ledger.
        SteeringAction::Allow if rule.1 == Evaluator::LlmSync => {
            decided.push(rule);
            false
        }
        SteeringAction::Allow => false,
        SteeringAction::Guide => {
            decided.push(rule);
            false
        }
        SteeringAction::Deny => {
            decided.push(rule);
            true
        }
    }
}

/// Ends evaluation on a configuration error: the rule denies (recorded as such) and the hook fails with it.
fn config_failure(
    evaluator: Evaluator,
    rule: &SteeringRule,
    error: ConfigError,
    mut failures: Vec<RuleFailure>,
) -> Evaluation {
    let decision = SteeringDecision::deny(format!("rule '{}' cannot be evaluated: {error}", rule.id));
    failures.push(RuleFailure { rule_id: rule.id.clone(), cause: FailureCause::Config { error: error.clone() } });
    Evaluation {
        decision,
        deciders: vec![(rule.id.clone(), evaluator)],
        failures,
        fault: Some(Box::new(error)),
        escalated: false,
        judges: Vec::new(),
    }
}

fn missing_call_model(rule: &SteeringRule) -> ConfigError {
    ConfigError::new(
        ConfigCode::MissingCallModel,
        format!("LLM-evaluated steering rule \"{}\" requires a model to judge with, but none is available", rule.id),
        "configure a model on the runtime (Runtime::builder().model(...)) or the context; the rule fails closed until then",
    )
}
