//! The rules on the `path` of the built-in file tools, for the tools themselves: a tool checks them again on the
//! path of what it is about to act on (see `tools`). Usually that is what the rule's own check pinned for the call,
//! so the decision is the same; when the path changed after that check (a link swapped in, a pin pushed out), the
//! tool is still held to the rules.

use std::sync::Arc;

use noetic::steering::{SteeringAction, SteeringDecision};

use super::steer::{Matcher, arg_decision};
use super::{Kind, RuleSet};
use crate::agent::tools;

/// The `deny_arg` rules of a rule set that match the `path` of a built-in file tool.
#[derive(Debug, Clone, Default)]
pub struct PathRules(Arc<[PathRule]>);

#[derive(Debug)]
struct PathRule {
    tool: String,
    arg: String,
    matcher: Matcher,
    action: SteeringAction,
    guidance: Option<String>,
}

impl RuleSet {
    /// The rules on the path of a built-in file tool, for the tools to check again (see [`PathRules::check`]).
    pub fn path_rules(&self) -> PathRules {
        let rules: Vec<PathRule> = self
            .rules
            .iter()
            .filter_map(|rule| match &rule.kind {
                Kind::DenyArg { tool, arg, matcher } if tools::is_path_argument(tool, arg) => Some(PathRule {
                    tool: tool.clone(),
                    arg: arg.clone(),
                    matcher: matcher.clone(),
                    action: rule.action,
                    guidance: rule.guidance.clone(),
                }),
                _ => None,
            })
            .collect();
        PathRules(rules.into())
    }
}

impl PathRules {
    /// What the rules decide for a call of `tool` acting on `path` (workspace-relative, as the rules see it), as
    /// the steering layer would: the first deny, else the guidance of every guiding rule that matches, joined;
    /// `None` when they let it happen.
    pub fn check(&self, tool: &str, path: &str) -> Option<SteeringDecision> {
        let mut guides: Vec<String> = Vec::new();
        for rule in self.0.iter().filter(|r| r.tool == tool && r.matcher.is_match(path)) {
            let decision = arg_decision(rule.action, rule.guidance.as_ref(), (tool, &rule.arg), path);
            match decision.action {
                SteeringAction::Deny => return Some(decision),
                _ => guides.extend(decision.guidance),
            }
        }
        (!guides.is_empty()).then(|| SteeringDecision::guide(guides.join("\n")))
    }
}
