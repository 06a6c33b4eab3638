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
//! mode = "sync"            # or "async": the verdict arrives later as feedback
//! on_failure = "allow"     # or "deny": what to decide when the judge gives no verdict
//! ```
//!
//! Programmatic kinds (exactly one per rule, or a `prompt` for an LLM-judged rule):
//!
//! * `deny_tool = "name"` — every call of the tool is denied.
//! * `deny_arg = { tool, arg, glob | regex }` — a call is denied when the argument (a string, or else its JSON
//!   text) matches. Globs use `globset` with `*` not crossing `/` and `**` crossing it; they are matched against
//!   the path as the model wrote it and with `./` and `dir/..` folded away. Paths are not made absolute, so
//!   start a glob with `**/` to catch a file wherever it is.
//! * `require_approval = "name"` — the tool waits for the user's approval before each call, exactly like
//!   `run_command`. This is a property of the tool, not a steering decision, so it leaves no ledger entry; a
//!   rejected call reaches the model as an error result with the reason.
//!
//! Common keys: `id` (required, unique), `name`, `applies_to` (default `["before_tool_call"]`; LLM rules may also
//! list `"after_model_call"`), `guidance` and `action = "deny" | "guide"` (programmatic rules). LLM rules take
//! `mode`, `model` (default: the agent's own model, since the judge is asked through the same provider) and
//! `on_failure`.

use std::collections::{BTreeSet, HashSet};

use globset::GlobBuilder;
use noetic::layer::Hook;
use noetic::steering::{FailurePolicy, LlmMode, SteeringAction, SteeringRule};
use regex::Regex;
use serde::Deserialize;

use crate::source::{Seg, Source, SourceError};

mod steer;

use steer::{Matcher, steering_rule};

/// One `[[rule]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    id: String,
    name: Option<String>,
    applies_to: Option<Vec<Hook>>,
    guidance: Option<String>,
    action: Option<SteeringAction>,
    deny_tool: Option<String>,
    deny_arg: Option<DenyArgDef>,
    require_approval: Option<String>,
    prompt: Option<String>,
    mode: Option<LlmMode>,
    model: Option<String>,
    on_failure: Option<FailurePolicy>,
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
    Llm { mode: LlmMode, prompt: String, model: Option<String>, on_failure: FailurePolicy },
}

/// A checked rule.
#[derive(Debug, Clone)]
struct Rule {
    id: String,
    name: Option<String>,
    applies_to: Vec<Hook>,
    guidance: Option<String>,
    action: SteeringAction,
    kind: Kind,
}

/// Checked rules, ready to become steering rules and approval requirements.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

/// Reads a rules file (TOML, or JSON by extension) made of `rule` entries.
pub fn load(source: &Source) -> Result<RuleSet, SourceError> {
    let file: RulesFile = source.parse()?;
    compile(source, file.rule)
}

/// Checks rule definitions read from `source` under the key `rule`; errors point at the offending key.
pub fn compile(source: &Source, defs: Vec<RuleDef>) -> Result<RuleSet, SourceError> {
    let mut seen = HashSet::new();
    let mut rules = Vec::new();
    for (index, def) in defs.into_iter().enumerate() {
        let at = |key: &'static str| [Seg::Key("rule"), Seg::Index(index), Seg::Key(key)];
        if def.id.trim().is_empty() {
            return Err(source.error_at(&at("id"), "the rule id is empty; give every rule a short unique id"));
        }
        if !seen.insert(def.id.clone()) {
            return Err(
                source.error_at(&at("id"), format!("two rules share the id '{}'; give every rule its own id", def.id))
            );
        }
        rules.push(check(source, &at, def)?);
    }
    Ok(RuleSet { rules })
}

fn check<'a>(source: &Source, at: &dyn Fn(&'static str) -> [Seg<'a>; 3], def: RuleDef) -> Result<Rule, SourceError> {
    let id = def.id.clone();
    let err = |key: &'static str, message: String| source.error_at(&at(key), format!("rule '{id}': {message}"));
    let kinds: Vec<&'static str> = [
        ("deny_tool", def.deny_tool.is_some()),
        ("deny_arg", def.deny_arg.is_some()),
        ("require_approval", def.require_approval.is_some()),
        ("prompt", def.prompt.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, present)| present.then_some(k))
    .collect();
    let one_kind = "a rule has exactly one of deny_tool, deny_arg, require_approval (programmatic) or prompt \
                    (LLM-judged)";
    match kinds.as_slice() {
        [] => return Err(err("id", format!("says nothing to check; {one_kind}"))),
        [_] => {}
        [first, second, ..] => return Err(err(second, format!("has both {first} and {second}; {one_kind}"))),
    }
    let llm = def.prompt.is_some();
    for (key, present) in
        [("mode", def.mode.is_some()), ("model", def.model.is_some()), ("on_failure", def.on_failure.is_some())]
    {
        if present && !llm {
            return Err(err(key, format!("{key} applies to LLM-judged rules only (those with a prompt); remove it")));
        }
    }
    for (key, present) in [("action", def.action.is_some()), ("guidance", def.guidance.is_some())] {
        if present && llm {
            return Err(err(
                key,
                format!("{key} applies to programmatic rules only; the judge gives its own guidance"),
            ));
        }
    }
    let action = match def.action {
        None | Some(SteeringAction::Deny) => SteeringAction::Deny,
        Some(SteeringAction::Guide) => SteeringAction::Guide,
        Some(SteeringAction::Allow) => {
            return Err(err("action", "action must be \"deny\" or \"guide\"; a rule that allows does nothing".into()));
        }
    };
    let applies_to = match def.applies_to {
        Some(hooks) if hooks.is_empty() => {
            return Err(err(
                "applies_to",
                "applies_to is empty; list \"before_tool_call\" and/or \"after_model_call\"".into(),
            ));
        }
        Some(_) if def.require_approval.is_some() => {
            return Err(err(
                "applies_to",
                "require_approval marks a tool as needing approval; it takes no applies_to".into(),
            ));
        }
        Some(hooks) if !llm && hooks != [Hook::BeforeToolCall] => {
            return Err(err(
                "applies_to",
                "programmatic rules look at tool calls; applies_to must be [\"before_tool_call\"]".into(),
            ));
        }
        Some(hooks) => hooks,
        None => vec![Hook::BeforeToolCall],
    };
    let non_empty = |key: &'static str, value: String, what: &str| {
        if value.trim().is_empty() { Err(err(key, format!("{key} is empty; give {what}"))) } else { Ok(value) }
    };
    let kind = if let Some(tool) = def.deny_tool {
        Kind::DenyTool { tool: non_empty("deny_tool", tool, "the name of the tool to deny")? }
    } else if let Some(tool) = def.require_approval {
        Kind::RequireApproval { tool: non_empty("require_approval", tool, "the name of a tool")? }
    } else if let Some(arg) = def.deny_arg {
        let matcher = match (arg.glob, arg.regex) {
            (Some(glob), None) => {
                let compiled = GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| err("deny_arg", format!("the glob {glob:?} is invalid: {e}")))?;
                Matcher::Glob(glob, compiled.compile_matcher())
            }
            (None, Some(re)) => Matcher::Regex(
                Regex::new(&re).map_err(|e| err("deny_arg", format!("the regex {re:?} is invalid: {e}")))?,
            ),
            _ => return Err(err("deny_arg", "deny_arg needs exactly one of glob and regex".into())),
        };
        Kind::DenyArg { tool: arg.tool, arg: arg.arg, matcher }
    } else {
        let prompt = non_empty("prompt", def.prompt.unwrap_or_default(), "the rule in words for the judge")?;
        Kind::Llm {
            mode: def.mode.unwrap_or(LlmMode::Sync),
            prompt,
            model: def.model,
            on_failure: def.on_failure.unwrap_or_default(),
        }
    };
    Ok(Rule { id: def.id, name: def.name, applies_to, guidance: def.guidance, action, kind })
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

    /// The steering rules; LLM rules without a `model` are judged by `judge_model`.
    pub fn steering_rules(&self, judge_model: &str) -> Vec<SteeringRule> {
        self.rules.iter().filter_map(|r| steering_rule(r, judge_model)).collect()
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
                    Kind::Llm { mode, model, on_failure, .. } => format!(
                        "LLM-judged ({}, judge {}, on failure {})",
                        if *mode == LlmMode::Sync { "sync" } else { "async" },
                        model.as_deref().unwrap_or("= the agent's model"),
                        if *on_failure == FailurePolicy::Deny { "deny" } else { "allow" }
                    ),
                };
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use noetic::layer::ToolCallParams;
    use noetic::steering::HookParams;
    use serde_json::{Value, json};

    use super::*;

    fn rules(text: &str) -> Result<RuleSet, String> {
        load(&Source::toml("rules.toml", text)).map_err(|e| e.to_string())
    }

    fn decide(rule: &SteeringRule, tool: &str, args: Value) -> SteeringAction {
        let params = HookParams::BeforeToolCall(ToolCallParams { call_id: "c1", name: tool, args: &args });
        (rule.predicate.as_ref().unwrap())(&params).action
    }

    #[test]
    fn each_programmatic_kind_decides_on_tool_calls() {
        let set = rules(
            "[[rule]]\nid = \"no-rm\"\ndeny_tool = \"delete_file\"\n\n\
             [[rule]]\nid = \"no-etc\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"/etc/**\" }\n\n\
             [[rule]]\nid = \"no-sudo\"\naction = \"guide\"\nguidance = \"no sudo\"\n\
             deny_arg = { tool = \"run_command\", arg = \"command\", regex = \"^sudo\\\\b\" }\n\n\
             [[rule]]\nid = \"ask-write\"\nrequire_approval = \"write_file\"\n",
        )
        .unwrap();
        let steering = set.steering_rules("m");
        assert_eq!(steering.len(), 3);
        assert_eq!(decide(&steering[0], "delete_file", json!({})), SteeringAction::Deny);
        assert_eq!(decide(&steering[0], "read_file", json!({})), SteeringAction::Allow);
        assert_eq!(decide(&steering[1], "read_file", json!({"path": "/etc/ssh/sshd_config"})), SteeringAction::Deny);
        assert_eq!(decide(&steering[1], "read_file", json!({"path": "notes/etc"})), SteeringAction::Allow);
        assert_eq!(decide(&steering[2], "run_command", json!({"command": "sudo ls"})), SteeringAction::Guide);
        assert_eq!(set.approval_tools().into_iter().collect::<Vec<_>>(), vec!["write_file".to_owned()]);
    }

    #[test]
    fn globs_keep_single_stars_within_a_folder_and_double_stars_cross_folders() {
        let set = rules(
            "[[rule]]\nid = \"env\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"**/.env\" }\n\n\
             [[rule]]\nid = \"top\"\ndeny_arg = { tool = \"write_file\", arg = \"path\", glob = \"*.lock\" }\n",
        )
        .unwrap();
        let steering = set.steering_rules("m");
        let read = |p: &str| decide(&steering[0], "read_file", json!({ "path": p }));
        let write = |p: &str| decide(&steering[1], "write_file", json!({ "path": p }));
        assert_eq!(read(".env"), SteeringAction::Deny);
        assert_eq!(read("app/config/.env"), SteeringAction::Deny);
        assert_eq!(read("app/.envrc"), SteeringAction::Allow);
        assert_eq!(read("./app/x/../.env"), SteeringAction::Deny);
        assert_eq!(write("Cargo.lock"), SteeringAction::Deny);
        assert_eq!(write("sub/Cargo.lock"), SteeringAction::Allow);
        assert_eq!(write("./sub/../Cargo.lock"), SteeringAction::Deny);
    }

    #[test]
    fn llm_rules_default_their_judge_to_the_agents_model() {
        let set = rules("[[rule]]\nid = \"j\"\nprompt = \"Be nice.\"\nmode = \"async\"\non_failure = \"deny\"\napplies_to = [\"after_model_call\"]\n").unwrap();
        let rule = &set.steering_rules("local-model")[0];
        let eval = rule.llm_eval.as_ref().unwrap();
        assert_eq!((eval.mode, eval.model_id(), eval.on_failure), (LlmMode::Async, "local-model", FailurePolicy::Deny));
        assert_eq!(rule.applies_to, vec![Hook::AfterModelCall]);
    }

    #[test]
    fn mistakes_are_reported_with_line_and_column() {
        let cases = [
            ("[[rule]]\nid = \"a\"\ndeny_tol = \"x\"\n", "rules.toml:3:1: unknown field `deny_tol`"),
            ("[[rule]]\nid = \"a\"\ndeny_tool = \n", "rules.toml:3:"),
            (
                "[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\n[[rule]]\nid = \"b\"\ndeny_arg = { tool = \"t\", arg = \"p\", regex = \"(\" }\n",
                "rules.toml:6:1: rule 'b': the regex \"(\" is invalid",
            ),
            (
                "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"t\", arg = \"p\", glob = \"a[\" }\n",
                "rules.toml:3:1: rule 'a': the glob",
            ),
            ("[[rule]]\nid = \"a\"\n", "rules.toml:2:1: rule 'a': says nothing to check"),
            (
                "[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\nprompt = \"y\"\n",
                "rules.toml:4:1: rule 'a': has both deny_tool and prompt",
            ),
            (
                "[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\n[[rule]]\nid = \"a\"\ndeny_tool = \"y\"\n",
                "rules.toml:5:1: two rules share the id 'a'",
            ),
            (
                "[[rule]]\nid = \"a\"\nprompt = \"y\"\nmode = \"sometimes\"\n",
                "rules.toml:4:8: unknown variant `sometimes`",
            ),
            ("[[rule]]\ndeny_tool = \"x\"\n", "missing field `id`"),
            (
                "[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\nmode = \"sync\"\n",
                "rules.toml:4:1: rule 'a': mode applies to LLM-judged rules only",
            ),
        ];
        for (text, expected) in cases {
            let err = rules(text).unwrap_err();
            assert!(err.starts_with(expected) || err.contains(expected), "{text:?}: got {err:?}, want {expected:?}");
        }
    }
}
