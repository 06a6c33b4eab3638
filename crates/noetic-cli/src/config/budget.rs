//! Budgets in configuration: the `[budget]` table of `noetic.toml` (every session's default) and of a workflow
//! file (that workflow's, over noetic.toml's), and the `/budget` command of `noetic chat`.
//!
//! ```toml
//! [budget.session]      # the whole session
//! cost = 2.50           # US dollars, as the provider reports them
//! tool_calls = 200
//! [budget.turn]         # each turn
//! tokens_in = 200000
//! tokens_out = 20000
//! model_calls = 40
//! wall_time = "10m"     # seconds (600), or a number with a unit: 500ms, 90s, 10m, 2h
//! ```
//!
//! A limit of zero or a negative one, an unknown limit name or a bad duration is an error naming the file, the
//! line and what to write instead.

use std::collections::BTreeMap;

use noetic::budget::{Budget, Limits};
use serde::{Deserialize, Deserializer};

use crate::config::source::{Seg, Source, SourceError};

/// A `[budget]` table as written: its limits kept as text, checked by [`BudgetToml::check`] so that an error can
/// point at the line of the bad one.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BudgetToml {
    #[serde(default)]
    session: BTreeMap<String, Text>,
    #[serde(default)]
    turn: BTreeMap<String, Text>,
}

/// A number or a string, as text.
#[derive(Debug, Clone, PartialEq)]
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::config::source::number_or_text(deserializer).map(|t| Text(t.unwrap_or_default()))
    }
}

impl BudgetToml {
    /// The budget, every limit checked; an error names the file, the line of the bad limit and what to do.
    /// `at` is where the table sits in `source` (`[budget]`: `&[Seg::Key("budget")]`).
    pub fn check(&self, source: &Source, at: &[Seg<'_>]) -> Result<Budget, SourceError> {
        let limits = |scope: &'static str, table: &BTreeMap<String, Text>| -> Result<Limits, SourceError> {
            let mut limits = Limits::default();
            for (name, Text(value)) in table {
                let one = Budget::parse_limits([(name.as_str(), value.clone())]).map_err(|e| {
                    let mut path = at.to_vec();
                    path.extend([Seg::Key(scope), Seg::Key(name)]);
                    source.error_at(&path, format!("[budget.{scope}] {e}"))
                })?;
                limits = limits.merged(&one);
            }
            Ok(limits)
        };
        Ok(Budget { session: limits("session", &self.session)?, turn: limits("turn", &self.turn)? })
    }
}

/// `over`'s limits with those `under` sets and `over` does not (a workflow's budget over noetic.toml's).
pub fn layered(under: &Budget, over: &Budget) -> Budget {
    Budget { session: under.session.merged(&over.session), turn: under.turn.merged(&over.turn) }
}

/// What `/budget` in the chat shows: the limits, what was spent, and the pause.
pub fn describe(status: &noetic::budget::BudgetStatus) -> String {
    let limits = |limits: &Limits| {
        let set: Vec<String> = limits.amounts().map(|(limit, amount)| format!("{limit} {amount}")).collect();
        if set.is_empty() { "no limits".to_owned() } else { set.join(", ") }
    };
    let spent = &status.spent;
    let mut text = format!(
        "budget — session: {}; each turn: {}\nspent: {} tokens in, {} out, ${:.4}, {} tool calls, {} model calls, {:.0}s",
        limits(&status.budget.session),
        limits(&status.budget.turn),
        spent.tokens_in,
        spent.tokens_out,
        spent.cost,
        spent.tool_calls,
        spent.model_calls,
        spent.wall_time.as_secs_f64(),
    );
    if let Some(reached) = &status.paused {
        text.push_str(&format!(
            "\npaused: {reached}; messages queue until you raise it, e.g. /budget {}.{}=MORE",
            reached.scope.name(),
            reached.limit
        ));
    }
    text
}

/// The arguments of `/budget SCOPE.LIMIT=VALUE …`: the session's budget with those limits changed. An unknown
/// scope or limit, or a bad value, is an error saying what to write.
pub fn parse_command(current: &Budget, args: &str) -> Result<Budget, String> {
    let usage = "write /budget SCOPE.LIMIT=VALUE …, e.g. /budget turn.tool_calls=50 session.cost=2.5 \
                 turn.wall_time=10m (limits: tokens_in, tokens_out, cost, tool_calls, model_calls, wall_time)";
    let mut budget = *current;
    for arg in args.split_whitespace() {
        let Some((name, value)) = arg.split_once('=') else {
            return Err(format!("'{arg}' is not SCOPE.LIMIT=VALUE; {usage}"));
        };
        let (scope, limit) = name.split_once('.').unwrap_or(("turn", name));
        let one = Budget::parse_limits([(limit, value.to_owned())]).map_err(|e| format!("{e}; {usage}"))?;
        match scope {
            "session" => budget.session = budget.session.merged(&one),
            "turn" => budget.turn = budget.turn.merged(&one),
            other => return Err(format!("'{other}' is neither session nor turn; {usage}")),
        }
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(text: &str) -> Result<Budget, String> {
        #[derive(Deserialize)]
        struct File {
            budget: BudgetToml,
        }
        let source = Source::toml("noetic.toml", text);
        let file: File = source.parse().map_err(|e| e.to_string())?;
        file.budget.check(&source, &[Seg::Key("budget")]).map_err(|e| e.to_string())
    }

    #[test]
    fn a_budget_table_is_read_and_each_bad_limit_is_an_error_at_its_line() {
        let budget = checked("[budget.session]\ncost = 2.5\n[budget.turn]\ntool_calls = 50\nwall_time = \"10m\"\n");
        let budget = budget.unwrap_or_default();
        assert_eq!(budget.session.cost, Some(2.5));
        assert_eq!(
            (budget.turn.tool_calls, budget.turn.wall_time),
            (Some(50), Some(std::time::Duration::from_secs(600)))
        );
        for (text, says) in [
            (
                "[budget.turn]\nmodel_calls = 3\ntool_calls = 0\n",
                "noetic.toml:3:1: [budget.turn] the budget limit tool_calls = 0 must be a positive number",
            ),
            (
                "[budget.session]\n\ncost = -1\n",
                "noetic.toml:3:1: [budget.session] the budget limit cost = -1 must be a positive number",
            ),
            (
                "[budget.turn]\ntokens = 5\n",
                "noetic.toml:2:1: [budget.turn] 'tokens' is not a budget limit; use one of tokens_in",
            ),
            (
                "[budget.turn]\nwall_time = \"soon\"\n",
                "noetic.toml:2:1: [budget.turn] the budget limit wall_time = soon is not a duration",
            ),
        ] {
            let err = checked(text).err().unwrap_or_default();
            assert!(err.starts_with(says), "{err}\nwanted {says}");
        }
        let err = checked("[budget.forever]\ncost = 1\n").err().unwrap_or_default();
        assert!(err.contains("noetic.toml:1") && err.contains("forever"), "{err}");
    }

    #[test]
    fn the_budget_command_changes_the_named_limits_and_refuses_bad_ones() {
        let current = Budget::default().turn(Limits::default().tool_calls(2));
        let raised = parse_command(&current, "turn.tool_calls=10 session.cost=2.5").unwrap_or_default();
        assert_eq!((raised.turn.tool_calls, raised.session.cost), (Some(10), Some(2.5)));
        for bad in ["turn.tool_calls=0", "turn.tokens=5", "week.cost=1", "tool_calls"] {
            assert!(parse_command(&current, bad).is_err(), "{bad}");
        }
    }
}
