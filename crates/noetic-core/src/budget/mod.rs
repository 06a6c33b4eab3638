//! Budgets: limits on what a session, and each of its turns, may spend — tokens in and out, cost (as the provider
//! reported it), tool calls, model calls and wall time.
//!
//! A [`Budget`] holds two sets of [`Limits`], one for the whole session and one for each turn. While a turn runs,
//! a [`Meter`] shared by its whole execution tree (spawned children and fork paths count towards it too) counts
//! what is spent; before every model request and tool call the `llm` step asks it, and once a limit is reached the
//! turn ends there with [`NoeticError::BudgetReached`](crate::error::NoeticError::BudgetReached). The session is
//! then paused (its log records the [`BudgetReached`]): new messages queue and nothing runs until a person raises
//! the limit.
//!
//! ```
//! use noetic::budget::{Budget, Limits};
//! use std::time::Duration;
//!
//! let budget = Budget::default()
//!     .session(Limits::default().cost(2.0).tool_calls(200))
//!     .turn(Limits::default().tokens_out(20_000).wall_time(Duration::from_secs(600)));
//! assert!(budget.validate().is_ok());
//! assert!(Budget::parse_limits([("tool_calls", "0".into())]).is_err());
//! ```

mod limits;
mod meter;
mod parse;

pub use limits::{Amount, Budget, BudgetReached, Limit, Limits, Scope, Spent};
pub use meter::Meter;
pub use parse::{BudgetError, parse_duration};

use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// A session's budget as `Session::budget` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStatus {
    /// The limits that hold (the session's own, else the runtime's default).
    pub budget: Budget,
    /// What the session spent so far (its turns' wall time counted when they end).
    pub spent: Spent,
    /// The limit the session is paused over: new messages queue, nothing runs until a budget is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<BudgetReached>,
}

/// A session's budget as its log says it is: the budget set for it (`None`: the runtime's default), what it spent
/// so far (also in the open turn), and the limit that paused it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Account {
    /// The budget set for the session, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Everything the session spent (its turns' model calls, tool calls and wall time).
    #[serde(default)]
    pub spent: Spent,
    /// What the open turn spent so far (a resumed turn continues from it).
    #[serde(default)]
    pub turn: Spent,
    /// When the open turn started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_since: Option<SystemTime>,
    /// The limit that paused the session; cleared when a budget is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<BudgetReached>,
}

impl Account {
    /// A model call's usage counted.
    pub fn model_call(&mut self, usage: &crate::model::Usage) {
        self.spent.add_model_call(usage);
        self.turn.add_model_call(usage);
    }

    /// A tool call counted.
    pub fn tool_call(&mut self) {
        self.spent.tool_calls += 1;
        self.turn.tool_calls += 1;
    }

    /// Usage the log holds no other trace of (spawned children, fork paths, judges) counted.
    pub fn add(&mut self, other: &Spent) {
        self.spent.add(other);
        self.turn.add(other);
    }

    /// A turn started at `at`.
    pub fn turn_started(&mut self, at: SystemTime) {
        self.turn = Spent::default();
        self.turn_since = Some(at);
    }

    /// The open turn ended at `at`: its wall time is the session's.
    pub fn turn_ended(&mut self, at: SystemTime) {
        if let Some(since) = self.turn_since.take() {
            self.spent.wall_time += at.duration_since(since).unwrap_or_default();
        }
        self.turn = Spent::default();
    }
}
