//! Which rules a hook call looks at, worked out once when the layer is built: by hook, and before a tool call
//! by the tool's name, so a call runs exactly the rules that concern it — in rule order — without testing the
//! others' scopes.

use std::collections::HashMap;

use super::rules::{HookParams, Predicate, SteeringRule};
use crate::layer::Hook;

/// A rule a hook call may look at: its index, and its predicate (if it has one), so a predicate runs without
/// looking its rule up.
pub(super) struct Candidate {
    pub(super) index: usize,
    pub(super) predicate: Option<Predicate>,
}

/// The rules of one hook.
pub(super) struct HookRules {
    /// Every live rule of the hook, in rule order.
    all: Box<[Candidate]>,
    /// True when every rule of the hook is a predicate (also when none is): the gate then runs them without an
    /// await in between.
    predicates_only: bool,
    /// Before a tool call: the rules each tool a scoped rule names is checked by (those scoped rules and every
    /// unscoped one, in rule order). Empty when no rule of the hook is scoped.
    by_tool: HashMap<Box<str>, Box<[Candidate]>>,
    /// The unscoped rules, in rule order: all a call of a tool that no scoped rule names is checked by.
    unscoped: Box<[Candidate]>,
}

impl HookRules {
    /// The index of `rules` for `hook`.
    pub(super) fn of(rules: &[SteeringRule], hook: Hook) -> Self {
        // Shadow rules are evaluated apart, after the live decision.
        let all: Vec<usize> = (0..rules.len()).filter(|&i| rules[i].applies(hook) && !rules[i].is_shadow()).collect();
        let predicates_only = all.iter().all(|&i| rules[i].predicate.is_some());
        let candidates = |indices: &mut dyn Iterator<Item = usize>| -> Box<[Candidate]> {
            indices.map(|index| Candidate { index, predicate: rules[index].predicate.clone() }).collect()
        };
        let unscoped = candidates(&mut all.iter().copied().filter(|&i| rules[i].tools.is_none()));
        let mut by_tool: HashMap<Box<str>, Box<[Candidate]>> = HashMap::new();
        if hook == Hook::BeforeToolCall {
            let named = all.iter().filter_map(|&i| rules[i].tools.as_deref()).flatten();
            for tool in named {
                if by_tool.contains_key(tool.as_str()) {
                    continue;
                }
                let concern = |i: &usize| rules[*i].tools.as_ref().is_none_or(|tools| tools.contains(tool));
                by_tool.insert(tool.as_str().into(), candidates(&mut all.iter().copied().filter(concern)));
            }
        }
        HookRules { all: candidates(&mut all.iter().copied()), predicates_only, by_tool, unscoped }
    }

    /// True when every rule of the hook is a predicate.
    #[inline]
    pub(super) fn predicates_only(&self) -> bool {
        self.predicates_only
    }

    /// The rules these hook parameters concern, in rule order: before a tool call, exactly the
    /// rules about that tool (see [`SteeringRule::tools`]); after a model response, every rule of the hook, whose
    /// scope the caller still checks against the response's tool calls.
    #[inline]
    pub(super) fn candidates(&self, params: &HookParams<'_>) -> &[Candidate] {
        match params {
            HookParams::BeforeToolCall(_) if self.by_tool.is_empty() => &self.unscoped,
            HookParams::BeforeToolCall(call) => self.by_tool.get(call.name).unwrap_or(&self.unscoped),
            HookParams::AfterModelCall(_) => &self.all,
        }
    }

    /// True when the caller must still check each candidate's scope ([`SteeringRule::concerns`]).
    #[inline]
    pub(super) fn scopes_unchecked(&self, params: &HookParams<'_>) -> bool {
        matches!(params, HookParams::AfterModelCall(_))
    }
}
