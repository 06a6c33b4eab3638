//! Replaying recorded decisions through new rules (`noetic rules test`): every recorded `before_tool_call`
//! (ledger kind `tool_call`) and `after_model_call` (`model_turn`) decision is decided again by the layer's live
//! rules, and compared with what was decided then.
//!
//! Predicates run for real. A blocking LLM judge is not asked again when its rule is unchanged: the ledger entry
//! records each judge that ran with its rule's [fingerprint](super::SteeringRule::fingerprint) and verdict, and the
//! same rule id with the same fingerprint replays that verdict. A new or changed LLM rule needs a fresh verdict
//! ([`Verdicts`], from [`rejudge`](super::rejudge)); without one the decision is reported as not replayable, with
//! the rules that would have to be judged. Async judges never decided a hook (their verdicts come later as
//! feedback), so they are left out; so are shadow rules, which are never enforced, and recorded shadow entries.
//! Escalation (`escalate_after`) counts GUIDE verdicts per recorded session and turn, as it did live.
//!
//! Replay is synchronous and needs no runtime or context: a decision whose rules are all predicates costs what
//! the live predicate gate costs, and allocates nothing when every rule allows.
//!
//! ```
//! use noetic::layer::Hook;
//! use noetic::steering::replay::{Recorded, Replayer, Verdicts};
//! use noetic::steering::{LedgerEntry, LedgerKind, SteeringAction, SteeringConfig, SteeringDecision, SteeringRule, steering};
//!
//! let mut recorded = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow);
//! recorded.tool_name = Some("run_command".into());
//! recorded.tool_args = Some(serde_json::json!({"command": "rm -rf build"}));
//! let tightened = steering(SteeringConfig::new([SteeringRule::predicate("no-rm", [Hook::BeforeToolCall], |p| {
//!     match p.tool_call() {
//!         Some(c) if c.args["command"].as_str().is_some_and(|c| c.starts_with("rm ")) => SteeringDecision::deny("No rm."),
//!         _ => SteeringDecision::allow(),
//!     }
//! })]))
//! .unwrap();
//! let verdicts = Verdicts::default();
//! let mut replayer = Replayer::new(&tightened, &verdicts);
//! let replayed = replayer.replay(0, &Recorded::new("s1", Some(1), &recorded));
//! assert_eq!(replayed.new.as_ref().map(|d| d.action), Ok(SteeringAction::Deny));
//! assert_eq!(replayer.summary().allow_to_deny, 1);
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use super::escalation::Turn;
use super::feedback::Inner;
use super::gate::{Evaluation, note};
use super::layer::SteeringLayer;
use super::ledger::{Evaluator, FailureCause, JudgeVerdict, LedgerEntry, LedgerKind, RuleFailure};
use super::rules::{FailurePolicy, HookParams, LlmMode};
use super::{SteeringAction, SteeringDecision};
use crate::context::ExecutionId;
use crate::exec::guard;
use crate::layer::{ModelCallParams, ToolCallParams};
use crate::model::ModelResponse;

/// One recorded decision to replay: its ledger entry, where it was made, and — for a model-turn decision — the
/// model response it judged (the session log has it; a ledger file does not).
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    /// The session (a ledger file's name, for a file).
    pub session: &'a str,
    /// The turn, when known.
    pub turn: Option<u64>,
    /// The recorded decision.
    pub entry: &'a LedgerEntry,
    /// The response a model-turn decision judged.
    pub response: Option<&'a ModelResponse>,
}

impl<'a> Recorded<'a> {
    /// A recorded decision without a response.
    pub fn new(session: &'a str, turn: Option<u64>, entry: &'a LedgerEntry) -> Self {
        Recorded { session, turn, entry, response: None }
    }

    /// With the model response it judged.
    pub fn with_response(mut self, response: &'a ModelResponse) -> Self {
        self.response = Some(response);
        self
    }

    /// True for a decision replay decides again: a live (not shadow) `tool_call` or `model_turn` entry of the
    /// steering rules (not a layer's rewrite of a call's arguments).
    pub fn is_decision(entry: &LedgerEntry) -> bool {
        entry.shadow.is_none()
            && entry.rewritten_args.is_none()
            && matches!(entry.kind, LedgerKind::ToolCall | LedgerKind::ModelTurn)
    }
}

/// Fresh verdicts of judges asked during replay, by the recorded decision's index and the rule's id (see
/// [`rejudge`](super::rejudge)).
#[derive(Debug, Clone, Default)]
pub struct Verdicts {
    by_decision: HashMap<(usize, String), SteeringDecision>,
}

impl Verdicts {
    /// Records `rule_id`'s verdict on decision `index`.
    pub fn insert(&mut self, index: usize, rule_id: impl Into<String>, decision: SteeringDecision) {
        self.by_decision.insert((index, rule_id.into()), decision);
    }

    /// How many verdicts are held.
    pub fn len(&self) -> usize {
        self.by_decision.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.by_decision.is_empty()
    }

    fn get(&self, index: usize, rule_id: &str) -> Option<&SteeringDecision> {
        // Looked up only for judges without a recorded verdict, so the key's allocation is rare.
        if self.by_decision.is_empty() {
            return None;
        }
        self.by_decision.get(&(index, rule_id.to_owned()))
    }
}

/// Why a recorded decision cannot be decided again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Unreplayable {
    /// A model-turn decision without the response it judged (a ledger file keeps none): replay against the
    /// session database instead.
    NoResponse,
    /// A tool-call entry without its tool's name (written by something other than the steering layer).
    NoToolCall,
    /// LLM rules that are new or changed since the decision was recorded: their judges would have to be asked
    /// (`--rejudge`).
    NotJudged {
        /// The rules.
        rules: Vec<String>,
    },
}

impl Unreplayable {
    /// What it means, for a person.
    pub fn describe(&self) -> String {
        match self {
            Unreplayable::NoResponse => {
                "model-turn decision without its response (a ledger file has none; replay against the database)".into()
            }
            Unreplayable::NoToolCall => "tool-call entry without a tool name".into(),
            Unreplayable::NotJudged { rules } => {
                format!("new or changed LLM rule(s) {} not judged (--rejudge asks the judge)", rules.join(", "))
            }
        }
    }
}

/// What the new rules decide.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewDecision {
    /// The action.
    pub action: SteeringAction,
    /// Its guidance.
    pub guidance: Option<String>,
    /// The deciding rule(s), comma-separated, as the ledger names them.
    pub rule_id: Option<String>,
    /// A DENY an escalating rule made of a GUIDE.
    pub escalated: bool,
}

/// One recorded decision, decided again.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed<'a> {
    /// Its index among the replayed decisions (what [`Verdicts`] are keyed by).
    pub index: usize,
    /// The session.
    pub session: &'a str,
    /// The turn.
    pub turn: Option<u64>,
    /// Tool call or model turn.
    pub kind: LedgerKind,
    /// The tool (tool calls).
    pub tool: Option<&'a str>,
    /// The arguments as the model wrote them (untrusted text; escape it before printing).
    pub args: Option<&'a Value>,
    /// The recorded action.
    pub old: SteeringAction,
    /// The rule(s) that decided it.
    pub old_rule: Option<&'a str>,
    /// What the new rules decide, or why that cannot be known.
    pub new: Result<NewDecision, Unreplayable>,
}

impl Replayed<'_> {
    /// True when the new rules decide a different action.
    pub fn changed(&self) -> bool {
        self.new.as_ref().is_ok_and(|d| d.action != self.old)
    }
}

/// What a replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplaySummary {
    /// Decisions decided again.
    pub replayed: u64,
    /// … with the same action.
    pub unchanged: u64,
    /// Allowed then, denied now.
    pub allow_to_deny: u64,
    /// Denied then, allowed now.
    pub deny_to_allow: u64,
    /// Changes to or from GUIDE.
    pub guide_changes: u64,
    /// Decisions that could not be decided again, by reason ([`Unreplayable`]'s tag).
    pub not_replayable: std::collections::BTreeMap<String, u64>,
    /// Recorded judge verdicts reused (no judge call).
    pub verdicts_reused: u64,
    /// Fresh judge verdicts used.
    pub verdicts_fresh: u64,
    /// Judge calls still needed (one per new or changed LLM rule and decision).
    pub judge_calls_needed: u64,
}

impl ReplaySummary {
    /// Decisions whose action changed.
    pub fn changed(&self) -> u64 {
        self.replayed - self.unchanged
    }

    fn count(&mut self, replayed: &Replayed<'_>) {
        match &replayed.new {
            Ok(new) => {
                self.replayed += 1;
                match (replayed.old, new.action) {
                    (old, new) if old == new => self.unchanged += 1,
                    (SteeringAction::Allow, SteeringAction::Deny) => self.allow_to_deny += 1,
                    (SteeringAction::Deny, SteeringAction::Allow) => self.deny_to_allow += 1,
                    _ => self.guide_changes += 1,
                }
            }
            Err(why) => {
                if let Unreplayable::NotJudged { rules } = why {
                    self.judge_calls_needed += rules.len() as u64;
                }
                let tag = match why {
                    Unreplayable::NoResponse => "no_response",
                    Unreplayable::NoToolCall => "no_tool_call",
                    Unreplayable::NotJudged { .. } => "not_judged",
                };
                *self.not_replayable.entry(tag.to_owned()).or_default() += 1;
            }
        }
    }
}

/// Decides recorded decisions again with a layer's rules, one at a time, keeping the [`ReplaySummary`].
pub struct Replayer<'l> {
    layer: &'l SteeringLayer,
    verdicts: &'l Verdicts,
    /// Each rule's fingerprint (LLM rules), by index.
    fingerprints: Vec<Option<String>>,
    /// Escalation counts, per recorded turn.
    state: Arc<Mutex<Inner>>,
    turn: Option<(String, Option<u64>, ExecutionId)>,
    summary: ReplaySummary,
}

impl<'l> Replayer<'l> {
    /// A replayer for `layer`'s live rules, using `verdicts` for judges without a recorded verdict.
    pub fn new(layer: &'l SteeringLayer, verdicts: &'l Verdicts) -> Self {
        let fingerprints = layer.config().rules.iter().map(|r| r.fingerprint()).collect();
        Replayer { layer, verdicts, fingerprints, state: Arc::default(), turn: None, summary: ReplaySummary::default() }
    }

    /// Decides `recorded` (the `index`-th decision replayed) again and counts it.
    pub fn replay<'a>(&mut self, index: usize, recorded: &Recorded<'a>) -> Replayed<'a> {
        let entry = recorded.entry;
        let new = self.decide(index, recorded);
        let replayed = Replayed {
            index,
            session: recorded.session,
            turn: recorded.turn,
            kind: entry.kind,
            tool: entry.tool_name.as_deref(),
            args: entry.tool_args.as_ref(),
            old: entry.action,
            old_rule: entry.rule_id.as_deref(),
            new,
        };
        self.summary.count(&replayed);
        replayed
    }

    /// What was found so far.
    pub fn summary(&self) -> &ReplaySummary {
        &self.summary
    }

    /// The escalation counter of `recorded`'s turn: a new turn (or session) starts from zero.
    fn execution(&mut self, recorded: &Recorded<'_>) -> ExecutionId {
        match &self.turn {
            Some((session, turn, id)) if session == recorded.session && *turn == recorded.turn => *id,
            _ => {
                let id = ExecutionId::new();
                self.turn = Some((recorded.session.to_owned(), recorded.turn, id));
                id
            }
        }
    }

    fn decide(&mut self, index: usize, recorded: &Recorded<'_>) -> Result<NewDecision, Unreplayable> {
        let entry = recorded.entry;
        let empty = Value::Null;
        let params = match entry.kind {
            LedgerKind::ModelTurn => {
                let response = recorded.response.ok_or(Unreplayable::NoResponse)?;
                HookParams::AfterModelCall(ModelCallParams { step_id: "", model: "", response })
            }
            _ => {
                let name = entry.tool_name.as_deref().ok_or(Unreplayable::NoToolCall)?;
                let args = entry.tool_args.as_ref().unwrap_or(&empty);
                HookParams::BeforeToolCall(ToolCallParams { call_id: "", name, args })
            }
        };
        let execution = self.execution(recorded);
        let state = self.state.clone();
        let turn = Turn { state: &state, execution };
        let evaluation = if self.layer.only_predicates(params.hook()) {
            self.layer.evaluate_predicates(&params, turn).evaluation()
        } else {
            self.evaluate(index, &params, &entry.judges, turn)?
        };
        let rule_id = match evaluation.deciders.as_slice() {
            [] => None,
            [(one, _)] => Some(one.clone()),
            many => Some(many.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(",")),
        };
        Ok(NewDecision {
            action: evaluation.decision.action,
            guidance: evaluation.decision.guidance,
            rule_id,
            escalated: evaluation.escalated,
        })
    }

    /// The gate's evaluation with judges answered from the record or from fresh verdicts; the new or changed
    /// LLM rules that have neither.
    fn evaluate(
        &mut self,
        index: usize,
        params: &HookParams<'_>,
        recorded: &[JudgeVerdict],
        turn: Turn<'_>,
    ) -> Result<Evaluation, Unreplayable> {
        let mut decided: Vec<(usize, Evaluator, SteeringDecision)> = Vec::new();
        let mut failures = Vec::new();
        let mut unjudged = Vec::new();
        for (i, rule) in self.layer.rules_for(params) {
            let (decision, evaluator) = if let Some(predicate) = &rule.predicate {
                match guard(&rule.id, "steering predicate", || predicate(params)) {
                    Ok(d) => (d, Evaluator::Predicate),
                    Err(e) => {
                        let cause = FailureCause::PredicatePanicked { message: e.to_string() };
                        let d = super::judge::failure_decision(&rule.id, FailurePolicy::Deny, &cause);
                        failures.push(RuleFailure { rule_id: rule.id.clone(), cause });
                        (d, Evaluator::Predicate)
                    }
                }
            } else if let Some(eval) = &rule.llm_eval {
                if eval.mode == LlmMode::Async {
                    continue;
                }
                let fingerprint = self.fingerprints.get(i).and_then(Option::as_deref);
                let same =
                    recorded.iter().find(|v| v.rule_id == rule.id && Some(v.fingerprint.as_str()) == fingerprint);
                if let Some(verdict) = same {
                    self.summary.verdicts_reused += 1;
                    (
                        SteeringDecision { action: verdict.action, guidance: verdict.guidance.clone() },
                        Evaluator::LlmSync,
                    )
                } else if let Some(fresh) = self.verdicts.get(index, &rule.id) {
                    self.summary.verdicts_fresh += 1;
                    (fresh.clone(), Evaluator::LlmSync)
                } else {
                    unjudged.push(rule.id.clone());
                    continue;
                }
            } else {
                continue;
            };
            if note(&mut decided, (i, evaluator, decision)) {
                break;
            }
        }
        if !unjudged.is_empty() {
            return Err(Unreplayable::NotJudged { rules: unjudged });
        }
        Ok(self.layer.aggregate(decided, failures, turn))
    }
}

/// Every recorded decision decided again, in order, and the summary.
#[derive(Debug, Clone, Serialize)]
pub struct Replay<'a> {
    /// One per replayed decision.
    pub decisions: Vec<Replayed<'a>>,
    /// The counts.
    pub summary: ReplaySummary,
}

/// Replays `recorded` (decisions only: see [`Recorded::is_decision`]; others are skipped) through `layer`'s live
/// rules, with fresh judge `verdicts` for new or changed LLM rules.
pub fn replay<'a>(
    layer: &SteeringLayer,
    recorded: impl IntoIterator<Item = Recorded<'a>>,
    verdicts: &Verdicts,
) -> Replay<'a> {
    let mut replayer = Replayer::new(layer, verdicts);
    let decisions: Vec<Replayed<'a>> = recorded
        .into_iter()
        .filter(|r| Recorded::is_decision(r.entry))
        .enumerate()
        .map(|(i, r)| replayer.replay(i, &r))
        .collect();
    Replay { decisions, summary: replayer.summary }
}
