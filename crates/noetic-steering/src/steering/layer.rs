//! The steering layer: evaluates rules at both gating hooks (see `gate`), keeps the ledger, delivers async
//! feedback (see `feedback`).
//!
//! State is kept per scope key. A spawned child or fork path always gets a state of its own, whatever the scope —
//! a clone of its parent's ledger and an empty feedback queue (seed 1) — so it never drains its parent's feedback
//! and its decisions stay out of its parent's ledger. When an execution's own state ends (`dispose`), its
//! undelivered feedback moves on: a child's to its parent, a thread's execution's to the thread's carry-over,
//! which the thread's next execution takes at its first recall.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::feedback::{CarryOver, Feedback, Inner};
use super::index::{Candidate, HookRules};
use super::ledger::LedgerEntry;
use super::rules::{HookParams, LlmMode, SteeringConfig, SteeringRule};
use crate::context::{Context, ExecutionId, lock};
use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::layer::{
    Budget, Gates, Hook, HookTimeouts, LayerState, Lifecycle, MemoryLayer, Persistence, Recall, Scope, ScopeKey, Slot,
};
use crate::model::Item;
use crate::sync::CachePadded;

mod hooks;

/// The steering layer's id.
pub const STEERING_LAYER_ID: &str = "steering";
/// Completed executions whose steering state stays readable after `dispose`: this many groups by id …
const RECENT_GROUPS: usize = 8;
/// … of this many each.
const RECENT_PER_GROUP: usize = 8;

/// A copy of the layer's state for one scope: the ledger, oldest first, and the undelivered feedback.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SteeringState {
    /// Decisions, oldest first, at most `max_ledger_entries`.
    pub ledger: Vec<LedgerEntry>,
    /// Async verdicts not yet delivered.
    pub pending_feedback: Vec<Feedback>,
}

/// The steering layer. Build it with [`steering`].
pub struct SteeringLayer {
    config: SteeringConfig,
    states: LayerState<Inner>,
    /// The states of ended executions, newest last, in groups by id (each group behind its own lock, so turns
    /// ending at once on different cores rarely meet): [`RECENT_PER_GROUP`] per group.
    recent: Box<[CachePadded<Recent>]>,
    /// Live spawned children and fork paths, with their parent's state (`None` when the parent does not use
    /// this layer).
    children: Mutex<HashMap<ExecutionId, Option<Arc<Mutex<Inner>>>>>,
    carry: Arc<CarryOver>,
    /// False while no verdict or judge error can be waiting anywhere: the layer has no async judge and restored
    /// none from a store. Then recall and the gates skip looking for one.
    feedback_possible: AtomicBool,
    /// The rules that apply to each hook: a hook call looks only at its own.
    before_tool_call_rules: HookRules,
    after_model_call_rules: HookRules,
    /// The shadow rules' indices: evaluated after the live ones, never enforced.
    shadow_rules: Vec<usize>,
}

/// One group of ended executions' states, newest last.
type Recent = Mutex<VecDeque<(ExecutionId, Arc<Mutex<Inner>>)>>;

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
        if rule.escalate_after == Some(0) {
            return bad(
                format!("steering rule '{}' escalates after 0 guides, so it could never guide", rule.id),
                "give escalate_after a count of 1 or more, or make the rule deny",
            );
        }
    }
    let async_judges = config.rules.iter().any(|r| r.llm_eval.as_ref().is_some_and(|e| e.mode == LlmMode::Async));
    let (before_tool_call_rules, after_model_call_rules) =
        (HookRules::of(&config.rules, Hook::BeforeToolCall), HookRules::of(&config.rules, Hook::AfterModelCall));
    Ok(Arc::new(SteeringLayer {
        states: LayerState::default(),
        recent: (0..RECENT_GROUPS).map(|_| CachePadded::new(Mutex::new(VecDeque::new()))).collect(),
        children: Mutex::new(HashMap::new()),
        carry: Arc::default(),
        feedback_possible: AtomicBool::new(async_judges),
        before_tool_call_rules,
        after_model_call_rules,
        shadow_rules: (0..config.rules.len()).filter(|&i| config.rules[i].is_shadow()).collect(),
        config,
    }))
}

impl SteeringLayer {
    /// The configuration.
    pub fn config(&self) -> &SteeringConfig {
        &self.config
    }

    fn hook_rules(&self, hook: Hook) -> &HookRules {
        match hook {
            Hook::BeforeToolCall => &self.before_tool_call_rules,
            Hook::AfterModelCall => &self.after_model_call_rules,
        }
    }

    /// The rules these hook parameters concern (their hook, and their tools when scoped), with their indices,
    /// in rule order.
    pub(super) fn rules_for<'s>(
        &'s self,
        params: &'s HookParams<'_>,
    ) -> impl Iterator<Item = (usize, &'s SteeringRule)> + 's {
        let index = self.hook_rules(params.hook());
        let check = index.scopes_unchecked(params);
        index
            .candidates(params)
            .iter()
            .filter_map(|c| self.config.rules.get(c.index).map(|rule| (c.index, rule)))
            .filter(move |(_, rule)| !check || rule.concerns(params))
    }

    /// The rules these hook parameters may concern, in rule order, and whether each one's scope must still be
    /// checked ([`SteeringRule::concerns`]); [`rules_for`](Self::rules_for) as a plain slice.
    pub(super) fn candidates(&self, params: &HookParams<'_>) -> (&[Candidate], bool) {
        let index = self.hook_rules(params.hook());
        (index.candidates(params), index.scopes_unchecked(params))
    }

    /// The shadow rules with their indices, in rule order.
    pub(super) fn shadow_rules(&self) -> impl Iterator<Item = (usize, &SteeringRule)> {
        self.shadow_rules.iter().filter_map(|&i| self.config.rules.get(i).map(|rule| (i, rule)))
    }

    /// True when the configuration has shadow rules.
    pub(super) fn has_shadow_rules(&self) -> bool {
        !self.shadow_rules.is_empty()
    }

    /// True when every rule that applies to `hook` is a live predicate (also when none applies).
    pub(super) fn only_predicates(&self, hook: Hook) -> bool {
        self.hook_rules(hook).predicates_only()
    }

    /// True when `hook` is decided without waiting: its live rules are all predicates and there are no shadow
    /// rules (whose judges may wait).
    fn answers_at_once(&self, hook: Hook) -> bool {
        self.only_predicates(hook) && !self.has_shadow_rules()
    }

    /// Whether a verdict or a judge's error can be waiting anywhere (see the field).
    fn feedback_possible(&self) -> bool {
        self.feedback_possible.load(Ordering::Acquire)
    }

    pub(super) fn carry_over(&self) -> &Arc<CarryOver> {
        &self.carry
    }

    fn is_child(&self, ctx: &Context) -> bool {
        // A root context is nobody's child: the usual case (a session turn) takes no lock that all turns share.
        !ctx.is_root() && self.is_spawned(ctx)
    }

    /// True when a context that is not a root is a live spawned child or fork path.
    fn is_spawned(&self, ctx: &Context) -> bool {
        lock(&self.children).contains_key(&ctx.execution_id())
    }

    /// The group of recently ended executions `id` belongs to (by bits of the id that are random).
    fn recent(&self, id: &ExecutionId) -> &Recent {
        &self.recent[(id.as_uuid().as_u64_pair().1 as usize) % self.recent.len()]
    }

    /// A spawned child or fork path has a state of its own, whatever the scope.
    #[inline]
    fn key(&self, ctx: &Context) -> ScopeKey {
        // The default scope, and any spawned child's or fork path's: the execution's own state.
        if self.config.scope == Scope::Execution || (!ctx.is_root() && self.is_spawned(ctx)) {
            return ScopeKey::Execution(ctx.execution_id());
        }
        ScopeKey::for_context(ctx, self.config.scope)
    }

    pub(super) fn entry(&self, ctx: &Context) -> Arc<Mutex<Inner>> {
        self.states.entry(&self.key(ctx))
    }

    /// Moves what the thread's earlier executions left undelivered into this execution's state, ahead of its own
    /// feedback (it is older). Only a thread's top-level execution takes it, never a child.
    fn absorb_carry_over(&self, ctx: &Context) -> Option<Arc<Mutex<Inner>>> {
        let thread = ctx.thread_id().filter(|_| !self.is_child(ctx))?;
        let (carried, fault) = self.carry.take(thread);
        if carried.is_empty() && fault.is_none() {
            return None;
        }
        let state = self.entry(ctx);
        let mut inner = lock(&state);
        for f in carried.into_iter().rev() {
            inner.pending.push_front(f);
        }
        if inner.fault.is_none() {
            inner.fault = fault;
        }
        drop(inner);
        Some(state)
    }

    /// Fails with the configuration error an async judge of this execution (or of an ended one that forwards
    /// here) hit, once.
    #[inline]
    pub(super) fn surface_fault(&self, ctx: &Context, state: &Arc<Mutex<Inner>>) -> Result<(), NoeticError> {
        if !self.feedback_possible() {
            return Ok(());
        }
        self.take_fault(ctx, state)
    }

    /// [`surface_fault`](Self::surface_fault) once a fault may be waiting.
    fn take_fault(&self, ctx: &Context, state: &Arc<Mutex<Inner>>) -> Result<(), NoeticError> {
        self.absorb_carry_over(ctx);
        match lock(state).fault.take() {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    fn snapshot(inner: &Mutex<Inner>) -> SteeringState {
        let inner = lock(inner);
        SteeringState {
            ledger: inner.ledger.entries().collect(),
            pending_feedback: inner.pending.iter().cloned().collect(),
        }
    }

    /// The state for an execution (execution scope, or a spawned child or fork path in any scope), also after
    /// the execution ended (about the last 64 are kept: the last 8 of each of 8 groups of ids).
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

    /// Feedback a thread's ended executions left undelivered, oldest first: the thread's next execution shows
    /// it to the model at its first recall.
    pub fn carried_feedback(&self, thread_id: &str) -> Vec<Feedback> {
        self.carry.peek(thread_id)
    }

    /// The feedback block of what async judges queued for this execution, up to `budget` tokens (one verdict
    /// alone over it is shortened); fails with the configuration error an async judge hit.
    fn recall_at_once(&self, ctx: &Context, budget: u32) -> Result<Vec<Item>, NoeticError> {
        if !self.feedback_possible() {
            return Ok(Vec::new());
        }
        let Some(state) = self.absorb_carry_over(ctx).or_else(|| self.states.get(&self.key(ctx))) else {
            return Ok(Vec::new());
        };
        let mut inner = lock(&state);
        // An async judge's configuration error fails the step before anything else reaches the model.
        if let Some(error) = inner.fault.take() {
            return Err(error.into());
        }
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
    }

    fn lookup(&self, key: &ScopeKey) -> Option<Arc<Mutex<Inner>>> {
        self.states.get(key).or_else(|| match key {
            ScopeKey::Execution(id) => lock(self.recent(id)).iter().find(|(e, _)| e == id).map(|(_, s)| s.clone()),
            _ => None,
        })
    }
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
    /// Predicates are synchronous. So the lifecycle puts no second timer around them. Recall never waits (it
    /// takes what async judges already queued), so a timer around it could never fire: it gets none either,
    /// since arming one costs more than the recall itself before every model request.
    fn timeouts(&self) -> HookTimeouts {
        HookTimeouts { before_tool_call: None, after_model_call: None, recall: None, ..HookTimeouts::default() }
    }

    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }

    fn as_persistence(&self) -> Option<&dyn Persistence> {
        Some(self)
    }
}
