//! `rewrite_arg` rules: a tool call whose string argument matches a regex runs with the argument rewritten.
//!
//! Each rule is a gating layer of its own (id `rule:<id>`), just before the steering layer, answering
//! `before_tool_call` at once with a rewrite (see `noetic::layer::ToolCallAction`). A rewrite starts the gate round
//! again, so every rule — this file's deny and LLM-judged ones included — judges the arguments that will run; the
//! rewrite is kept in the session's ledger with the rule, the arguments before and after, and the reason.
//!
//! A rule rewrites a value only to one it would leave alone: when rewriting the result would change it again (the
//! regex matches its own replacement and `unless` does not stop it), the call is denied, naming the rule, instead of
//! being rewritten round after round. `unless` (a regex) leaves values that already say what the rewrite adds alone:
//! Rust's regexes have no look-ahead to say "not followed by --dry-run".

use std::borrow::Cow;
use std::sync::Arc;

use futures::future::BoxFuture;
use noetic::layer::{Gates, MemoryLayer, Slot, ToolCallAction, ToolCallParams};
use noetic::{HookContext, NoeticError};
use regex::Regex;
use serde_json::Value;

/// What a `rewrite_arg` rule does to a call.
#[derive(Debug, Clone)]
pub(super) struct Rewriter {
    /// The tool whose calls it rewrites.
    pub(super) tool: String,
    /// The string argument it rewrites.
    pub(super) arg: String,
    /// What it replaces (every match).
    pub(super) regex: Regex,
    /// The replacement (`$1`, `${name}` name the regex's groups).
    pub(super) replace: String,
    /// Values this matches are left alone.
    pub(super) unless: Option<Regex>,
}

impl Rewriter {
    /// The value rewritten, or `None` when the rule leaves it alone.
    fn apply<'a>(&self, value: &'a str) -> Option<Cow<'a, str>> {
        if self.unless.as_ref().is_some_and(|unless| unless.is_match(value)) {
            return None;
        }
        match self.regex.replace_all(value, self.replace.as_str()) {
            Cow::Borrowed(_) => None,
            Cow::Owned(new) if new == value => None,
            new => Some(new),
        }
    }

    /// One line saying what the rule does.
    pub(super) fn describe(&self) -> String {
        let unless =
            self.unless.as_ref().map(|u| format!(" unless it matches regex {:?}", u.as_str())).unwrap_or_default();
        format!(
            "rewrite {}'s {}: regex {:?} replaced by {:?}{unless}",
            self.tool,
            self.arg,
            self.regex.as_str(),
            self.replace
        )
    }
}

/// A `rewrite_arg` rule as a gating layer.
pub(super) struct RewriteLayer {
    layer_id: String,
    rule_id: String,
    rewriter: Rewriter,
    reason: Option<String>,
}

impl RewriteLayer {
    pub(super) fn layer(rule_id: &str, rewriter: Rewriter, reason: Option<String>) -> Arc<dyn MemoryLayer> {
        Arc::new(RewriteLayer { layer_id: format!("rule:{rule_id}"), rule_id: rule_id.to_owned(), rewriter, reason })
    }

    fn decide(&self, call: ToolCallParams<'_>) -> ToolCallAction {
        let r = &self.rewriter;
        if call.name != r.tool {
            return ToolCallAction::Allow;
        }
        // Only a string is rewritten; any other value (or none) is left as the model wrote it.
        let Some(Value::String(value)) = call.args.get(&r.arg) else { return ToolCallAction::Allow };
        let Some(new) = r.apply(value) else { return ToolCallAction::Allow };
        if let Some(again) = r.apply(&new) {
            // The values are the model's (untrusted, maybe long): quoted, and cut to a glance.
            let (value, new, again) = (glance(value), glance(&new), glance(&again));
            return ToolCallAction::deny(format!(
                "rule '{}' would rewrite {}'s {} again and again ({value} → {new} → {again}), so the call was not \
                 run; give the rule an `unless` regex that matches what its rewrite produces",
                self.rule_id, r.tool, r.arg
            ));
        }
        let mut args = call.args.clone();
        if let Some(slot) = args.get_mut(&r.arg) {
            *slot = Value::String(new.into_owned());
        }
        let reason =
            self.reason.clone().unwrap_or_else(|| format!("rule '{}' rewrote {}'s {}", self.rule_id, r.tool, r.arg));
        ToolCallAction::rewrite(args, reason)
    }
}

impl MemoryLayer for RewriteLayer {
    fn id(&self) -> &str {
        &self.layer_id
    }

    /// Just before the steering layer: a rewrite starts the round again, so the rules judge what will run.
    fn slot(&self) -> Slot {
        Slot(Slot::STEERING.0 - 1)
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for RewriteLayer {
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        Some(Ok(self.decide(call)))
    }

    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(std::future::ready(Ok(self.decide(call))))
    }
}

/// A value quoted (escaped as Rust debug text) and cut to its first 60 characters.
fn glance(value: &str) -> String {
    const MOST: usize = 60;
    match value.char_indices().nth(MOST) {
        Some((end, _)) => format!("{:?}…", &value[..end]),
        None => format!("{value:?}"),
    }
}
