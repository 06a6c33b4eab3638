//! Recording a gate's evaluation: its ledger entry (in the state's bounded ledger and the session's records), when
//! it started, and the hook's result.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::Evaluation;
use crate::context::{HookContext, lock};
use crate::error::NoeticError;
use crate::steering::SteeringDecision;
use crate::steering::feedback::Inner;
use crate::steering::layer::SteeringLayer;
use crate::steering::ledger::{self, LedgerEntry, LedgerKind};
use crate::steering::rules::HookParams;

impl SteeringLayer {
    /// Keeps the evaluation's ledger entry (the state's ledger, session records); its decision, or the
    /// configuration error that ended it. The usual allow, which no rule made, is kept as what the hook saw and
    /// when (see [`ledger::Ledger`]); the session's records get their copy once the state is unlocked (keeping
    /// one may read layer states).
    pub(super) fn record(
        &self,
        ctx: &HookContext<'_>,
        params: HookParams<'_>,
        state: &Mutex<Inner>,
        evaluation: Evaluation,
        started: Started,
    ) -> Result<SteeringDecision, NoeticError> {
        if evaluation.no_rule_decided() {
            let timestamp = SystemTime::now();
            return self.record_allow(ctx, &params, state, timestamp, started.elapsed(timestamp));
        }
        let records = ctx.records();
        let (entry, result) = self.entry_of(params, evaluation, started);
        let copy = records.is_some().then(|| Box::new(entry.clone()));
        lock(state).ledger.push(entry, self.config().max_ledger_entries);
        if let (Some(records), Some(copy)) = (records, copy) {
            records.ledger_entry(copy);
        }
        result
    }

    /// Keeps the entry of an allow that no rule made, stamped `timestamp`, the evaluation having taken `duration`
    /// (see [`record`](Self::record)).
    pub(super) fn record_allow(
        &self,
        ctx: &HookContext<'_>,
        params: &HookParams<'_>,
        state: &Mutex<Inner>,
        timestamp: SystemTime,
        duration: Duration,
    ) -> Result<SteeringDecision, NoeticError> {
        ledger::trace_allow(hook_name(params), duration);
        lock(state).ledger.push_allow(self.config().max_ledger_entries, params, timestamp, duration);
        if let Some(records) = ctx.records() {
            records.ledger_entry(Box::new(ledger::allowed_entry(params, timestamp, duration)));
        }
        Ok(SteeringDecision::allow())
    }

    /// The evaluation's ledger entry, traced, and the hook's result.
    pub(super) fn entry_of(
        &self,
        params: HookParams<'_>,
        evaluation: Evaluation,
        started: Started,
    ) -> (LedgerEntry, Result<SteeringDecision, NoeticError>) {
        let mut entry = LedgerEntry::new(ledger_kind(&params), evaluation.decision.action);
        let result = fill(&mut entry, params, evaluation, started);
        (entry, result)
    }
}

/// The kind of entry a hook call's decision makes.
fn ledger_kind(params: &HookParams<'_>) -> LedgerKind {
    match params {
        HookParams::BeforeToolCall(_) => LedgerKind::ToolCall,
        HookParams::AfterModelCall(_) => LedgerKind::ModelTurn,
    }
}

/// Fills in a new entry (stamped now, with the evaluation's action) from the hook call and its evaluation, traces
/// it, and gives the hook's result.
fn fill(
    entry: &mut LedgerEntry,
    params: HookParams<'_>,
    evaluation: Evaluation,
    started: Started,
) -> Result<SteeringDecision, NoeticError> {
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
    entry.escalated = evaluation.escalated;
    entry.judges = evaluation.judges;
    entry.duration = started.elapsed(entry.timestamp);
    ledger::trace(entry, hook_name(&params));
    match evaluation.fault {
        Some(error) => Err((*error).into()),
        None => Ok(evaluation.decision),
    }
}

/// When an evaluation started.
#[derive(Clone, Copy)]
pub(super) enum Started {
    /// On the runtime's clock (paused in tests): evaluations that wait on judges, whose time limits run on it.
    Clock(Instant),
    /// On the wall clock that stamps ledger entries: evaluations that never wait.
    Wall(SystemTime),
}

impl Started {
    /// The time since, for an entry stamped `now`.
    fn elapsed(self, now: SystemTime) -> Duration {
        match self {
            Started::Clock(at) => at.elapsed(),
            Started::Wall(at) => now.duration_since(at).unwrap_or_default(),
        }
    }
}

/// The hook's name in traces.
fn hook_name(params: &HookParams<'_>) -> &'static str {
    match params {
        HookParams::BeforeToolCall(_) => "before_tool_call",
        HookParams::AfterModelCall(_) => "after_model_call",
    }
}
