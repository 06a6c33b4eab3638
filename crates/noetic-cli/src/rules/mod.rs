//! The rules file (`rules.toml`): `[[rule]]` tables mapped onto steering rules.
//!
//! ```toml
//! [[rule]]
//! id = "no-shell-rm"
//! deny_arg = { tool = "run_command", arg = "command", regex = "\\brm\\b" }
//! guidance = "Do not delete with the shell; use delete_file so the user sees each file."
//!
//! [[rule]]
//! id = "reports-in-drafts"
//! prompt = "Reports must be written under drafts/ until a reviewer publishes them."
//! tools = ["write_file"]   # judge only calls of these tools (default: every call)
//! mode = "sync"            # or "async": the verdict arrives later as feedback
//! on_failure = "allow"     # or "deny": what to decide when the judge gives no verdict
//!
//! [[rule]]
//! id = "no-curl-trial"
//! mode = "shadow"          # evaluated and ledgered next to the live decision, never enforced
//! deny_arg = { tool = "run_command", arg = "command", regex = "\\bcurl\\b" }
//! ```
//!
//! Programmatic kinds (exactly one per rule, or a `prompt` for an LLM-judged rule):
//!
//! * `deny_tool = "name"` — every call of the tool is denied.
//! * `deny_arg = { tool, arg, glob | regex }` — a call is denied when the argument (a string, or else its JSON
//!   text) matches. Globs use `globset` with `*` not crossing `/` and `**` crossing it. The `path` of the
//!   built-in file tools is matched as the tool resolves it, not as the model wrote it: relative to the
//!   workspace, `.` and `..` applied, symbolic links inside the workspace followed (for `delete_file`, all but
//!   the last part, since it removes a link itself), `/` between parts, `.` for the root — so
//!   `/abs/workspace/README.md` and `sub/link-to-root/README.md` are both `README.md`. A path that cannot be
//!   resolved inside the workspace is denied by the rule (fail closed). Start a glob with `**/` to catch a file
//!   in any folder; a glob starting with `/` is an error, as it could never match.
//! * `require_approval = "name"` — the tool waits for the user's approval before each call, exactly like
//!   `run_command`. This is a property of the tool, not a steering decision, so it leaves no ledger entry; a
//!   rejected call reaches the model as an error result with the reason.
//!
//! Common keys: `id` (required, unique), `name`, `applies_to` (the hooks; default `["before_tool_call"]`; LLM
//! rules may also list `"after_model_call"`), `guidance` and `action = "deny" | "guide"` (programmatic rules),
//! `mode = "live" | "shadow"` (a shadow rule is evaluated and its would-be decision ledgered next to the live one,
//! never enforced; `noetic rules promote ID` makes it live; a shadow LLM rule's judge is always awaited), and
//! `escalate_after = N` (rules that guide: after N GUIDE verdicts in one turn, the next is a DENY).
//! LLM rules take `mode`, `model` (default: the agent's own model, since the judge is asked through the same
//! provider), `on_failure` and `tools` (the judge is asked only before calls of these tools, and after model
//! responses that call one of them).
//!
//! Every tool a rule names must exist: a misspelt name would switch the rule off. Built-in tools are checked as
//! the rules are read; a tool of a configured MCP server (`<server>__<tool>`, see [`ToolNames`]) once the servers
//! have listed their tools (`RuleSet::check_mcp_tools`).

use std::collections::{BTreeSet, HashSet};

use noetic::layer::Hook;
use noetic::steering::{FailurePolicy, LlmMode, SteeringAction, SteeringRule};
use serde::Deserialize;

use crate::agent::workspace::Workspace;
use crate::config::source::{Seg, Source, SourceError};

mod check;
mod mcp;
mod paths;
mod promote;
mod replay;
mod rewrite;
mod steer;
#[cfg(test)]
mod tests;

pub use mcp::ToolNames;
pub use paths::PathRules;
pub use promote::promote;
pub use replay::{TestArgs, run as test};
use steer::{Matcher, steering_rule};

/// One `[[rule]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    id: String,
    name: Option<String>,
    applies_to: Option<Vec<Hook>>,
    tools: Option<Vec<String>>,
    guidance: Option<String>,
    action: Option<SteeringAction>,
    deny_tool: Option<String>,
    deny_arg: Option<DenyArgDef>,
    rewrite_arg: Option<RewriteArgDef>,
    require_approval: Option<String>,
    prompt: Option<String>,
    mode: Option<ModeDef>,
    escalate_after: Option<i64>,
    model: Option<String>,
    on_failure: Option<FailurePolicy>,
}

/// `mode = "..."`: whether the rule is enforced (any rule), or how its judge is asked (LLM-judged rules; such a
/// rule is live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ModeDef {
    Live,
    Shadow,
    Sync,
    Async,
}

/// `deny_arg = { tool = "...", arg = "...", glob = "..." }` (or `regex`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyArgDef {
    tool: String,
    arg: String,
    glob: Option<String>,
    regex: Option<String>,
}

/// `rewrite_arg = { tool = "...", arg = "...", regex = "...", replace = "...", unless = "..." }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RewriteArgDef {
    tool: String,
    arg: String,
    regex: String,
    replace: String,
    unless: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rule: Vec<RuleDef>,
}

#[derive(Debug, Clone)]
enum Kind {
    DenyTool { tool: String },
    DenyArg { tool: String, arg: String, matcher: Matcher },
    RequireApproval { tool: String },
    RewriteArg(rewrite::Rewriter),
    Llm { mode: LlmMode, prompt: String, model: Option<String>, on_failure: FailurePolicy },
}

/// A checked rule.
#[derive(Debug, Clone)]
struct Rule {
    id: String,
    name: Option<String>,
    applies_to: Vec<Hook>,
    /// LLM rules: the tools whose calls the judge looks at (`None`: all).
    tools: Option<Vec<String>>,
    guidance: Option<String>,
    action: SteeringAction,
    kind: Kind,
    /// The tools of MCP servers it names, checked once the servers have started.
    mcp_names: Vec<mcp::McpName>,
    /// Evaluated and ledgered, never enforced.
    shadow: bool,
    /// GUIDE verdicts in one turn after which the next is a DENY.
    escalate_after: Option<u32>,
}

/// Checked rules, ready to become steering rules and approval requirements.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

/// Reads a rules file (TOML, or JSON by extension) made of `rule` entries whose rules may name the tools `known`.
pub fn load(source: &Source, known: &ToolNames) -> Result<RuleSet, SourceError> {
    let file: RulesFile = source.parse()?;
    compile(source, file.rule, known)
}

/// Checks rule definitions read from `source` under the key `rule`, whose rules may name the tools `known`;
/// errors point at the offending key.
pub fn compile(source: &Source, defs: Vec<RuleDef>, known: &ToolNames) -> Result<RuleSet, SourceError> {
    let mut seen = HashSet::new();
    let mut rules = Vec::new();
    for (index, def) in defs.into_iter().enumerate() {
        let at = [Seg::Key("rule"), Seg::Index(index), Seg::Key("id")];
        if def.id.trim().is_empty() {
            return Err(source.error_at(&at, "the rule id is empty; give every rule a short unique id"));
        }
        if !seen.insert(def.id.clone()) {
            return Err(
                source.error_at(&at, format!("two rules share the id '{}'; give every rule its own id", def.id))
            );
        }
        rules.push(check::check(source, index, def, known)?);
    }
    Ok(RuleSet { rules })
}

impl RuleSet {
    /// Appends the rules of `other`; ids must stay unique.
    pub fn extend(&mut self, other: RuleSet) -> Result<(), String> {
        for rule in other.rules {
            if self.rules.iter().any(|r| r.id == rule.id) {
                return Err(format!("two rules share the id '{}'; give every rule its own id", rule.id));
            }
            self.rules.push(rule);
        }
        Ok(())
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// The tools `require_approval` rules name.
    pub fn approval_tools(&self) -> BTreeSet<String> {
        self.rules
            .iter()
            .filter_map(|r| match &r.kind {
                Kind::RequireApproval { tool } => Some(tool.clone()),
                _ => None,
            })
            .collect()
    }

    /// The steering rules; LLM rules without a `model` are judged by `judge_model`, and rules on path arguments
    /// see paths resolved in `workspace`.
    pub fn steering_rules(&self, judge_model: &str, workspace: &Workspace) -> Vec<SteeringRule> {
        self.rules.iter().filter_map(|r| steering_rule(r, judge_model, workspace)).collect()
    }

    /// The `rewrite_arg` rules, each a gating layer just before the steering layer (see [`rewrite`]).
    pub fn rewrite_layers(&self) -> Vec<std::sync::Arc<dyn noetic::layer::MemoryLayer>> {
        self.rules
            .iter()
            .filter_map(|r| match &r.kind {
                Kind::RewriteArg(rewriter) => {
                    Some(rewrite::RewriteLayer::layer(&r.id, rewriter.clone(), r.guidance.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The ids of the `rewrite_arg` rules (which `noetic rules test` does not replay).
    pub fn rewrite_ids(&self) -> Vec<&str> {
        self.rules.iter().filter(|r| matches!(r.kind, Kind::RewriteArg(_))).map(|r| r.id.as_str()).collect()
    }

    /// Each rule's id and what it checks (the lines of [`RuleSet::describe`], without the id prefix there).
    pub fn ids(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.id.clone()).collect()
    }

    /// One line per rule, saying what it checks.
    pub fn describe(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|r| {
                let hooks: Vec<&str> = r
                    .applies_to
                    .iter()
                    .map(|h| match h {
                        Hook::BeforeToolCall => "before_tool_call",
                        Hook::AfterModelCall => "after_model_call",
                    })
                    .collect();
                let act = if r.action == SteeringAction::Guide { "guide" } else { "deny" };
                let what = match &r.kind {
                    Kind::DenyTool { tool } => format!("{act} every call of {tool}"),
                    Kind::DenyArg { tool, arg, matcher } => {
                        format!("{act} {tool} when {arg} matches {}", matcher.describe())
                    }
                    Kind::RequireApproval { tool } => format!("{tool} needs the user's approval"),
                    Kind::RewriteArg(rewriter) => rewriter.describe(),
                    Kind::Llm { mode, model, on_failure, .. } => format!(
                        "LLM-judged ({}, judge {}, on failure {})",
                        if *mode == LlmMode::Sync { "sync" } else { "async" },
                        model.as_deref().unwrap_or("= the agent's model"),
                        if *on_failure == FailurePolicy::Deny { "deny" } else { "allow" }
                    ),
                };
                let what = match &r.tools {
                    Some(tools) => format!("{what} on {}", tools.join(", ")),
                    None => what,
                };
                let what = match r.escalate_after {
                    Some(n) => format!("{what}, a deny after {n} guide(s) in a turn"),
                    None => what,
                };
                let what = if r.shadow { format!("SHADOW (not enforced) {what}") } else { what };
                let name = r.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                let hooks = if matches!(r.kind, Kind::RequireApproval { .. }) {
                    String::new()
                } else {
                    format!(" [{}]", hooks.join(", "))
                };
                format!("{}{name}: {what}{hooks}", r.id)
            })
            .collect()
    }
}
