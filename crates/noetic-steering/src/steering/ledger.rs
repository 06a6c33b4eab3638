//! The steering ledger: one entry per evaluated hook, bounded, oldest dropped first.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SteeringAction;
use crate::error::ConfigError;
use crate::layer::Outcome;
use crate::model::Usage;

mod kept;

pub(crate) use kept::{Ledger, allowed_entry};

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerKind {
    /// A `before_tool_call` evaluation.
    ToolCall,
    /// An `after_model_call` evaluation.
    ModelTurn,
    /// Something else: the execution's outcome, or an async verdict that resolved.
    Custom,
}

/// How the deciding rule evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evaluator {
    /// A programmatic predicate.
    Predicate,
    /// A blocking LLM judge.
    LlmSync,
    /// A fire-and-forget LLM judge.
    LlmAsync,
}

/// Why a rule could not produce its own verdict (its failure policy decided instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum FailureCause {
    /// Every judge reply was unparseable.
    Unparseable {
        /// The last reply.
        last_reply: String,
    },
    /// The judge call failed.
    JudgeError {
        /// The error.
        message: String,
    },
    /// The hook ran out of time.
    Timeout,
    /// A predicate panicked.
    PredicatePanicked {
        /// The panic message.
        message: String,
    },
    /// The judge's model call returned a configuration error. No failure policy applies: the rule denies and the
    /// step fails with this error (SPEC 3.3).
    Config {
        /// The error.
        error: ConfigError,
    },
}

/// A rule that could not decide, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleFailure {
    /// The rule.
    pub rule_id: String,
    /// Why.
    pub cause: FailureCause,
}

/// What marks a shadow rule's would-be decision (see [`RuleMode::Shadow`](super::RuleMode::Shadow)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shadow {
    /// The live decision made for the same hook call, which was enforced.
    pub live: SteeringAction,
}

/// The verdict of one LLM judge that ran for a decision, with the fingerprint of the rule's definition
/// ([`SteeringRule::fingerprint`](super::SteeringRule::fingerprint)): replaying the decision against rules where
/// the same rule has the same fingerprint reuses this verdict instead of asking the judge again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeVerdict {
    /// The rule.
    pub rule_id: String,
    /// SHA-256 (hex) of the rule's canonical definition when it judged.
    pub fingerprint: String,
    /// What the rule decided (its failure policy's decision when the judge gave no verdict).
    pub action: SteeringAction,
    /// The guidance it gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// What it records.
    pub kind: LedgerKind,
    /// When (RFC 3339 in JSON; the older `{"secs_since_epoch", …}` form is still read).
    #[serde(serialize_with = "crate::time::serialize", deserialize_with = "crate::time::deserialize")]
    pub timestamp: SystemTime,
    /// The tool (tool-call entries).
    pub tool_name: Option<String>,
    /// The tool's arguments (tool-call entries).
    pub tool_args: Option<Value>,
    /// The response's token usage (model-turn entries).
    pub usage: Option<Usage>,
    /// The decision.
    pub action: SteeringAction,
    /// The decision's guidance.
    pub guidance: Option<String>,
    /// The rule(s) that decided, comma-separated: the deny, the guides, or — for an allow after LLM judges ran
    /// (sync ones; an async verdict has an entry of its own) — the judges that allowed. `None` when only
    /// predicates looked and all allowed, or no rule applied.
    pub rule_id: Option<String>,
    /// How the (first) deciding rule evaluated: [`Evaluator::LlmSync`] on an allow the LLM judges decided.
    pub evaluator: Option<Evaluator>,
    /// Rules that could not decide on their own.
    pub failures: Vec<RuleFailure>,
    /// How long the evaluation took.
    pub duration: Duration,
    /// The execution's outcome (`on_complete` entries).
    pub outcome: Option<Outcome>,
    /// Set on a shadow rule's would-be decision, which was not enforced; it follows the live entry of the same
    /// hook call. (Absent in ledgers written before shadow rules.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
    /// True when the decision is a DENY that a rule's `escalate_after` made of a GUIDE.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub escalated: bool,
    /// The blocking LLM judges that ran for this decision, in rule order, each with its rule's fingerprint and
    /// verdict (what `noetic rules test` replays). Empty when none ran, and in ledgers written before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<JudgeVerdict>,
    /// Set on the entry that records a budget limit reached (the turn ended there and the session paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::BudgetReached>,
    /// Set on the entry that records a gating layer's rewrite of a tool call's arguments: the arguments the call
    /// runs with if every gate allows them (`tool_args` holds the ones before, `rule_id` the layer, `guidance` the
    /// reason; the action is `allow`). Absent in ledgers written before rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_args: Option<Value>,
    /// The session whose hash chain the entry is in (see [`chain`](super::chain); absent before the chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The entry's place in its session's chain, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// The `sha256` of the chain's entry before it (absent on the chain's first entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_sha256: Option<String>,
    /// SHA-256 of the entry's canonical form (see [`chain`](super::chain)), 64 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// With a signing key, on a turn's last entry: Ed25519 over `sha256`, 128 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl LedgerEntry {
    /// An entry of `kind` with `action`, made now, with nothing else recorded (fill in the fields that apply).
    pub fn new(kind: LedgerKind, action: SteeringAction) -> Self {
        LedgerEntry {
            kind,
            timestamp: SystemTime::now(),
            tool_name: None,
            tool_args: None,
            usage: None,
            action,
            guidance: None,
            rule_id: None,
            evaluator: None,
            failures: Vec::new(),
            duration: Duration::ZERO,
            outcome: None,
            shadow: None,
            escalated: false,
            judges: Vec::new(),
            budget: None,
            rewritten_args: None,
            session_key: None,
            index: None,
            prev_sha256: None,
            sha256: None,
            signature: None,
        }
    }

    /// True for a shadow rule's would-be decision whose action differs from the live decision's.
    pub fn disagrees(&self) -> bool {
        self.shadow.is_some_and(|s| s.live != self.action)
    }
}

impl Evaluator {
    /// The evaluator's snake_case name (its serialised form).
    pub fn as_str(self) -> &'static str {
        match self {
            Evaluator::Predicate => "predicate",
            Evaluator::LlmSync => "llm_sync",
            Evaluator::LlmAsync => "llm_async",
        }
    }
}

impl FailureCause {
    /// The cause's snake_case name (its serialised tag).
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureCause::Unparseable { .. } => "unparseable",
            FailureCause::JudgeError { .. } => "judge_error",
            FailureCause::Timeout => "timeout",
            FailureCause::PredicatePanicked { .. } => "predicate_panicked",
            FailureCause::Config { .. } => "config",
        }
    }
}

/// Records a decision as a `steering.decision` event on the current span — the tool call's or the model call's
/// the hook guarded (see [`crate::trace`]). Guidance is counted, not copied: it may quote content.
pub(crate) fn trace(entry: &LedgerEntry, hook: &'static str) {
    let guidance = entry.guidance.as_ref().map_or(0, String::len);
    decision_event(
        hook,
        entry.action,
        entry.rule_id.as_deref(),
        entry.evaluator,
        guidance,
        &entry.failures,
        entry.duration,
    );
}

/// [`trace`] for an allow that no rule made, without its entry.
pub(crate) fn trace_allow(hook: &'static str, duration: Duration) {
    decision_event(hook, SteeringAction::Allow, None, None, 0, &[], duration);
}

#[inline(always)]
fn decision_event(
    hook: &'static str,
    action: SteeringAction,
    rule_id: Option<&str>,
    evaluator: Option<Evaluator>,
    guidance_length: usize,
    failures: &[RuleFailure],
    duration: Duration,
) {
    tracing::info!(
        noetic.steering.hook = hook,
        noetic.steering.action = crate::trace::action(action),
        noetic.steering.rule_id = rule_id,
        noetic.steering.evaluator = evaluator.map(Evaluator::as_str),
        noetic.steering.guidance.length = guidance_length,
        noetic.steering.failure = (!failures.is_empty()).then(|| failures
            .iter()
            .map(|f| format!("{}:{}", f.rule_id, f.cause.as_str()))
            .collect::<Vec<_>>()
            .join(",")),
        noetic.steering.duration_us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
        "steering.decision"
    );
}
