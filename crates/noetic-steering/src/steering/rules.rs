//! Steering rules and configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SteeringDecision;
use crate::layer::{Hook, ModelCallParams, Scope, ToolCallParams};
use crate::model::ModelResponse;

/// The judge model LLM rules use when they name none.
pub const DEFAULT_JUDGE_MODEL: &str = "openai/gpt-4o-mini";

/// What a rule looks at.
#[derive(Debug, Clone, Copy)]
pub enum HookParams<'a> {
    /// A pending tool call.
    BeforeToolCall(ToolCallParams<'a>),
    /// A model response.
    AfterModelCall(ModelCallParams<'a>),
}

impl<'a> HookParams<'a> {
    /// The hook.
    pub fn hook(&self) -> Hook {
        match self {
            HookParams::BeforeToolCall(_) => Hook::BeforeToolCall,
            HookParams::AfterModelCall(_) => Hook::AfterModelCall,
        }
    }

    /// The pending tool call (before a tool call).
    pub fn tool_call(&self) -> Option<ToolCallParams<'a>> {
        match self {
            HookParams::BeforeToolCall(c) => Some(*c),
            HookParams::AfterModelCall(_) => None,
        }
    }

    /// The model response (after a model call).
    pub fn response(&self) -> Option<&'a ModelResponse> {
        match self {
            HookParams::AfterModelCall(m) => Some(m.response),
            HookParams::BeforeToolCall(_) => None,
        }
    }
}

/// Whether an LLM rule's verdict blocks the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmMode {
    /// The hook waits for the verdict.
    Sync,
    /// The verdict is delivered later as feedback; the hook does not wait.
    Async,
}

/// What an LLM rule decides when it cannot get a verdict (unparseable replies, a failing judge call, a timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Let it happen (the seed's behaviour).
    #[default]
    Allow,
    /// Do not let it happen (fail closed).
    Deny,
}

/// How an LLM-judged rule asks its judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmEval {
    /// Blocking or fire-and-forget.
    pub mode: LlmMode,
    /// The rule, in words, for the judge.
    pub prompt: String,
    /// The judge model (default `openai/gpt-4o-mini`).
    pub model: Option<String>,
    /// What to decide without a verdict.
    #[serde(default)]
    pub on_failure: FailurePolicy,
}

impl LlmEval {
    /// A blocking judge with this prompt.
    pub fn sync(prompt: impl Into<String>) -> Self {
        LlmEval { mode: LlmMode::Sync, prompt: prompt.into(), model: None, on_failure: FailurePolicy::Allow }
    }

    /// A fire-and-forget judge with this prompt; its verdicts come back as feedback.
    pub fn asynchronous(prompt: impl Into<String>) -> Self {
        LlmEval { mode: LlmMode::Async, ..LlmEval::sync(prompt) }
    }

    /// The judge model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// What to decide without a verdict.
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }

    /// The judge model id.
    pub fn model_id(&self) -> &str {
        self.model.as_deref().unwrap_or(DEFAULT_JUDGE_MODEL)
    }
}

/// Whether a rule's decisions are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleMode {
    /// Its decisions count (the default).
    #[default]
    Live,
    /// Evaluated like any rule but never enforced: its would-be decision goes into the ledger, marked shadow,
    /// next to the live decision, so a rule can be tried on real traffic before it is promoted.
    Shadow,
}

/// A programmatic check.
pub type Predicate = Arc<dyn Fn(&HookParams<'_>) -> SteeringDecision + Send + Sync>;

/// A rule: a programmatic predicate or an LLM-judged prompt, applying to one or both hooks.
#[derive(Clone)]
pub struct SteeringRule {
    /// Unique id; named in the ledger and in feedback.
    pub id: String,
    /// A readable name.
    pub name: Option<String>,
    /// The hooks the rule applies to.
    pub applies_to: Vec<Hook>,
    /// The programmatic check, for predicate rules.
    pub predicate: Option<Predicate>,
    /// The judge, for LLM rules.
    pub llm_eval: Option<LlmEval>,
    /// The tools the rule is about (`None`: every tool). A scoped rule is not evaluated — its judge is not
    /// asked — before calls of other tools, nor after a model response that calls none of them.
    pub tools: Option<Vec<String>>,
    /// Live or shadow (see [`RuleMode`]).
    pub mode: RuleMode,
    /// After this many GUIDE verdicts of the rule in one turn, its next GUIDE is a DENY (ledgered as escalated;
    /// the model is told why). `None`: never escalates.
    pub escalate_after: Option<u32>,
}

impl fmt::Debug for SteeringRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteeringRule")
            .field("id", &self.id)
            .field("applies_to", &self.applies_to)
            .field("predicate", &self.predicate.is_some())
            .field("llm_eval", &self.llm_eval)
            .field("tools", &self.tools)
            .field("mode", &self.mode)
            .field("escalate_after", &self.escalate_after)
            .finish()
    }
}

impl SteeringRule {
    /// A programmatic rule.
    ///
    /// ```
    /// use noetic::layer::Hook;
    /// use noetic::steering::{SteeringDecision, SteeringRule};
    ///
    /// let rule = SteeringRule::predicate("no-delete-outside-workspace", [Hook::BeforeToolCall], |p| {
    ///     match p.tool_call() {
    ///         Some(c) if c.name == "deleteFile" && !c.args["path"].as_str().unwrap_or("").starts_with("/workspace/") => {
    ///             SteeringDecision::deny("Deletion outside /workspace/ is not allowed.")
    ///         }
    ///         _ => SteeringDecision::allow(),
    ///     }
    /// });
    /// # let _ = rule;
    /// ```
    pub fn predicate<F>(id: impl Into<String>, applies_to: impl IntoIterator<Item = Hook>, f: F) -> Self
    where
        F: Fn(&HookParams<'_>) -> SteeringDecision + Send + Sync + 'static,
    {
        SteeringRule {
            id: id.into(),
            name: None,
            applies_to: applies_to.into_iter().collect(),
            predicate: Some(Arc::new(f)),
            llm_eval: None,
            tools: None,
            mode: RuleMode::Live,
            escalate_after: None,
        }
    }

    /// An LLM-judged rule.
    pub fn llm(id: impl Into<String>, applies_to: impl IntoIterator<Item = Hook>, eval: LlmEval) -> Self {
        SteeringRule {
            id: id.into(),
            name: None,
            applies_to: applies_to.into_iter().collect(),
            predicate: None,
            llm_eval: Some(eval),
            tools: None,
            mode: RuleMode::Live,
            escalate_after: None,
        }
    }

    /// Sets the readable name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Scopes the rule to calls of these tools (see [`SteeringRule::tools`]): an LLM rule about shell commands
    /// then costs no judge call before a `list_dir`.
    pub fn for_tools(mut self, tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Makes the rule a shadow rule (see [`RuleMode::Shadow`]): evaluated, ledgered, never enforced.
    ///
    /// ```
    /// use noetic::layer::Hook;
    /// use noetic::steering::{SteeringDecision, SteeringRule};
    ///
    /// let trial = SteeringRule::predicate("no-curl", [Hook::BeforeToolCall], |p| match p.tool_call() {
    ///     Some(c) if c.args["command"].as_str().is_some_and(|c| c.starts_with("curl")) => {
    ///         SteeringDecision::deny("No network from the shell.")
    ///     }
    ///     _ => SteeringDecision::allow(),
    /// })
    /// .shadow();
    /// assert!(trial.is_shadow());
    /// ```
    pub fn shadow(mut self) -> Self {
        self.mode = RuleMode::Shadow;
        self
    }

    /// True for a shadow rule.
    pub fn is_shadow(&self) -> bool {
        self.mode == RuleMode::Shadow
    }

    /// Escalates the rule: after `guides` GUIDE verdicts in one turn its next GUIDE is a DENY (at least 1;
    /// [`steering`](super::steering) refuses 0).
    pub fn escalate_after(mut self, guides: u32) -> Self {
        self.escalate_after = Some(guides);
        self
    }

    /// For an LLM-judged rule: the SHA-256 (64 hex digits) of the canonical JSON of what its verdict depends on —
    /// its judge's prompt, model, mode and failure policy, its hooks and its tool filter (hooks and tools sorted).
    /// The id, name, shadow mode and escalation are left out: they do not change what the judge says. The ledger
    /// records it with each verdict, so a replay can tell an unchanged rule (reuse the verdict) from a changed
    /// one. `None` for a predicate, whose code has no canonical form: predicates are run again on replay.
    ///
    /// ```
    /// use noetic::layer::Hook;
    /// use noetic::steering::{LlmEval, SteeringRule};
    ///
    /// let rule = |prompt: &str| SteeringRule::llm("polite", [Hook::AfterModelCall], LlmEval::sync(prompt));
    /// assert_eq!(rule("Be polite.").fingerprint(), rule("Be polite.").named("another name").fingerprint());
    /// assert_ne!(rule("Be polite.").fingerprint(), rule("Be very polite.").fingerprint());
    /// ```
    pub fn fingerprint(&self) -> Option<String> {
        let eval = self.llm_eval.as_ref()?;
        let mut hooks: Vec<Hook> = self.applies_to.clone();
        hooks.sort_by_key(|h| matches!(h, Hook::AfterModelCall));
        hooks.dedup();
        let tools = self.tools.as_ref().map(|tools| {
            let mut tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            tools.sort_unstable();
            tools.dedup();
            tools
        });
        let canonical = serde_json::json!({
            "evaluator": "llm",
            "prompt": eval.prompt,
            "model": eval.model_id(),
            "mode": eval.mode,
            "on_failure": eval.on_failure,
            "hooks": hooks,
            "tools": tools,
        });
        Some(crate::digest::json_sha256(&canonical))
    }

    /// True when the rule applies to `hook`.
    pub fn applies(&self, hook: Hook) -> bool {
        self.applies_to.contains(&hook)
    }

    /// True when the rule is evaluated for these hook parameters: its hook, and one of its tools when scoped
    /// (the call's tool before a tool call; any tool the response calls after a model call).
    pub fn applies_to_params(&self, params: &HookParams<'_>) -> bool {
        self.applies(params.hook()) && self.concerns(params)
    }

    /// True when the rule is about the tools these parameters involve: always for an unscoped rule.
    #[inline]
    pub(crate) fn concerns(&self, params: &HookParams<'_>) -> bool {
        let Some(tools) = &self.tools else { return true };
        match params {
            HookParams::BeforeToolCall(call) => tools.iter().any(|t| t == call.name),
            HookParams::AfterModelCall(m) => m.response.tool_calls_iter().any(|c| tools.iter().any(|t| **t == *c.name)),
        }
    }
}

/// Configuration of [`steering`](super::steering).
#[derive(Debug, Clone)]
pub struct SteeringConfig {
    /// Rules, evaluated in order.
    pub rules: Vec<SteeringRule>,
    /// Ledger bound; the oldest entries are dropped (default 100).
    pub max_ledger_entries: usize,
    /// Extra judge calls after an unparseable reply (default 1, so 2 calls at most).
    pub max_retries: u32,
    /// State lifetime (default `Execution`).
    pub scope: Scope,
    /// Time limit of the `before_tool_call` hook (default 5000 ms).
    pub before_tool_call_timeout: Duration,
    /// Time limit of the `after_model_call` hook (default 10000 ms).
    pub after_model_call_timeout: Duration,
}

impl SteeringConfig {
    /// The default configuration with these rules.
    pub fn new(rules: impl IntoIterator<Item = SteeringRule>) -> Self {
        SteeringConfig {
            rules: rules.into_iter().collect(),
            max_ledger_entries: 100,
            max_retries: 1,
            scope: Scope::Execution,
            before_tool_call_timeout: Duration::from_millis(5000),
            after_model_call_timeout: Duration::from_millis(10000),
        }
    }

    /// Sets the state lifetime (`Thread` keeps the ledger and undelivered feedback across a session's turns).
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets the ledger bound.
    pub fn with_max_ledger_entries(mut self, max: usize) -> Self {
        self.max_ledger_entries = max;
        self
    }

    /// Sets the number of extra judge calls after an unparseable reply.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_rule_scoped_to_tools_applies_only_around_their_calls() {
        let rule = SteeringRule::llm("net", [Hook::BeforeToolCall, Hook::AfterModelCall], LlmEval::sync("p"))
            .for_tools(["run_command"]);
        let args = json!({});
        let call = |name| HookParams::BeforeToolCall(ToolCallParams { call_id: "c", name, args: &args });
        assert!(rule.applies_to_params(&call("run_command")));
        assert!(!rule.applies_to_params(&call("list_dir")));
        let calling = |name: &str| ModelResponse::tool_calls([("c", name, json!({}))]);
        let (shell, listing, text) = (calling("run_command"), calling("list_dir"), ModelResponse::text("no calls"));
        let after = |response| HookParams::AfterModelCall(ModelCallParams { step_id: "s", model: "m", response });
        assert!(rule.applies_to_params(&after(&shell)));
        assert!(!rule.applies_to_params(&after(&listing)));
        assert!(!rule.applies_to_params(&after(&text)));
        let unscoped = SteeringRule::llm("any", [Hook::BeforeToolCall], LlmEval::sync("p"));
        assert!(unscoped.applies_to_params(&call("list_dir")));
        assert!(!unscoped.applies_to_params(&after(&shell)), "not its hook");
    }
}
