//! Rules as steering rules: predicates for the programmatic kinds, judges for the LLM-judged ones.

use std::sync::Arc;

use globset::GlobMatcher;
use noetic::steering::{LlmEval, LlmMode, SteeringAction, SteeringDecision, SteeringRule};
use regex::Regex;
use serde_json::Value;

use super::{Kind, Rule};
use crate::agent::tools;
use crate::agent::workspace::Workspace;

/// How an argument is matched.
#[derive(Debug, Clone)]
pub(super) enum Matcher {
    /// The pattern as written, and its matcher.
    Glob(String, GlobMatcher),
    /// A regular expression.
    Regex(Regex),
}

impl Matcher {
    pub(super) fn is_match(&self, text: &str) -> bool {
        match self {
            Matcher::Glob(_, glob) => glob.is_match(text) || glob.is_match(folded(text)),
            Matcher::Regex(re) => re.is_match(text),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Matcher::Glob(pattern, _) => format!("glob {pattern:?}"),
            Matcher::Regex(re) => format!("regex {:?}", re.as_str()),
        }
    }
}

/// A path with `.` parts and `dir/..` pairs folded away (`./notes/../a.txt` → `a.txt`), so that a glob cannot
/// be dodged by spelling the same path differently.
fn folded(text: &str) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for part in std::path::Path::new(text).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn decision(action: SteeringAction, guidance: String) -> SteeringDecision {
    if action == SteeringAction::Guide { SteeringDecision::guide(guidance) } else { SteeringDecision::deny(guidance) }
}

fn arg_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a `deny_arg` rule matching `value` (of the argument `arg` of `tool`) decides.
pub(super) fn arg_decision(
    action: SteeringAction,
    guidance: Option<&String>,
    (tool, arg): (&str, &str),
    value: &str,
) -> SteeringDecision {
    decision(action, guidance.cloned().unwrap_or_else(|| format!("{tool} with {arg} = {value:?} is not allowed.")))
}

/// The steering rule for a rule (`None` for `require_approval`, which is a property of the tool). Rules on the
/// path of a built-in file tool match the path located in `workspace`, pinned for the tool (see
/// [`tools::pinned_path`]).
pub(super) fn steering_rule(rule: &Rule, judge_model: &str, workspace: &Workspace) -> Option<SteeringRule> {
    let (id, action, hooks) = (rule.id.clone(), rule.action, rule.applies_to.clone());
    let built = match &rule.kind {
        Kind::RequireApproval { .. } | Kind::RewriteArg(_) => return None,
        Kind::DenyTool { tool } => {
            let tool = tool.clone();
            let guidance = rule.guidance.clone().unwrap_or_else(|| format!("The tool '{tool}' is not allowed here."));
            SteeringRule::predicate(id, hooks, move |p| match p.tool_call() {
                Some(c) if c.name == tool => decision(action, guidance.clone()),
                _ => SteeringDecision::allow(),
            })
        }
        Kind::DenyArg { tool, arg, matcher } => {
            let (tool, arg, matcher) = (tool.clone(), arg.clone(), Arc::new(matcher.clone()));
            let (guidance, workspace, rule_id) = (rule.guidance.clone(), workspace.clone(), id.clone());
            SteeringRule::predicate(id, hooks, move |p| {
                let Some(call) = p.tool_call().filter(|c| c.name == tool) else { return SteeringDecision::allow() };
                let value = match tools::pinned_path(&workspace, &rule_id, (call.call_id, &tool), &arg, call.args) {
                    Some(Ok(path)) => path,
                    // The rule cannot tell what the call would touch: fail closed, whatever its action.
                    Some(Err(why)) => {
                        return SteeringDecision::deny(format!(
                            "rule '{rule_id}' cannot check this {tool} call, so it is refused: {why}"
                        ));
                    }
                    None => match call.args.get(&arg) {
                        Some(value) => arg_text(value),
                        None => return SteeringDecision::allow(),
                    },
                };
                if matcher.is_match(&value) {
                    arg_decision(action, guidance.as_ref(), (&tool, &arg), &value)
                } else {
                    SteeringDecision::allow()
                }
            })
        }
        Kind::Llm { mode, prompt, model, on_failure } => {
            let eval = match mode {
                LlmMode::Sync => LlmEval::sync(prompt.clone()),
                LlmMode::Async => LlmEval::asynchronous(prompt.clone()),
            };
            let eval = eval.model(model.clone().unwrap_or_else(|| judge_model.to_owned())).on_failure(*on_failure);
            let judged = SteeringRule::llm(id, hooks, eval);
            match &rule.tools {
                // Scoped in the layer, so the judge is not even asked about calls of other tools.
                Some(tools) => judged.for_tools(tools.iter().cloned()),
                None => judged,
            }
        }
    };
    // A programmatic rule is about its one tool: scoped to it, a shadow rule leaves no entry beside other calls.
    let built = match &rule.kind {
        Kind::DenyTool { tool } | Kind::DenyArg { tool, .. } => built.for_tools([tool.clone()]),
        _ => built,
    };
    let built = match &rule.name {
        Some(name) => built.named(name.clone()),
        None => built,
    };
    let built = match rule.escalate_after {
        Some(n) => built.escalate_after(n),
        None => built,
    };
    Some(if rule.shadow { built.shadow() } else { built })
}
