//! The meter a running turn counts its spending on, shared by its whole execution tree.

use std::sync::Mutex;

use super::{Amount, Budget, BudgetReached, Limit, Limits, Scope, Spent};
use crate::model::Usage;
use crate::sync::lock;

/// What one turn spends, counted as it happens, and the limits it is held to. The `llm` steps of the turn — also
/// those of spawned children and fork paths, which share it — ask it before every model request and tool call;
/// once a limit is reached it stays reached for the rest of the turn.
#[derive(Debug)]
pub struct Meter {
    budget: Budget,
    /// False when the budget sets no limit at all: nothing to check (most turns run without one).
    limited: bool,
    /// What the session spent before this turn (including, for a resumed turn, what it spent before the stop).
    before: Spent,
    started: tokio::time::Instant,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// This turn's spending (a resumed turn's starts from what the log holds of it).
    turn: Spent,
    /// The part of it the session log holds no trace of (children, fork paths, judges, compaction).
    unlogged: Spent,
    reached: Option<BudgetReached>,
}

impl Meter {
    /// A meter for a turn held to `budget`; the session spent `before` until now, `turn` of it in this turn (a
    /// resumed turn's own spending so far).
    pub fn new(budget: Budget, before: Spent, turn: Spent) -> Meter {
        Meter {
            limited: !(budget.session.is_empty() && budget.turn.is_empty()),
            budget,
            before,
            started: tokio::time::Instant::now(),
            state: Mutex::new(State { turn, ..State::default() }),
        }
    }

    /// Counts a model call's usage; `logged` when the session log holds its response.
    pub fn model_call(&self, usage: &Usage, logged: bool) {
        let mut state = lock(&self.state);
        state.turn.add_model_call(usage);
        if !logged {
            state.unlogged.add_model_call(usage);
        }
    }

    /// The check before a model request: the limit reached, if one is (it stays reached).
    pub fn before_model_call(&self) -> Result<(), BudgetReached> {
        self.check(Limit::ModelCalls, 1)
    }

    /// The check before `n` tool calls start; when they may, they are counted (`logged`: the session log records
    /// their start).
    pub fn before_tool_calls(&self, n: u64, logged: bool) -> Result<(), BudgetReached> {
        self.check(Limit::ToolCalls, n)?;
        let mut state = lock(&self.state);
        state.turn.tool_calls += n;
        if !logged {
            state.unlogged.tool_calls += n;
        }
        Ok(())
    }

    /// The limit reached in this turn, if one was.
    pub fn reached(&self) -> Option<BudgetReached> {
        lock(&self.state).reached.clone()
    }

    /// What this turn spent, its wall time included.
    pub fn turn_spent(&self) -> Spent {
        let mut spent = lock(&self.state).turn;
        spent.wall_time += self.started.elapsed();
        spent
    }

    /// What this turn spent that the session log holds no trace of.
    pub fn unlogged(&self) -> Spent {
        lock(&self.state).unlogged
    }

    /// Checks every limit: the continuous ones (tokens, cost, wall time) are reached once spent; calls of the
    /// kind about to start (`next`, `n` of them) are reached when they would go past the limit.
    fn check(&self, next: Limit, n: u64) -> Result<(), BudgetReached> {
        if !self.limited {
            return Ok(());
        }
        let mut state = lock(&self.state);
        if let Some(reached) = &state.reached {
            return Err(reached.clone());
        }
        let mut turn = state.turn;
        turn.wall_time += self.started.elapsed();
        let mut session = self.before;
        session.add(&turn);
        let found = over(&self.budget.session, &session, next, n, Scope::Session)
            .or_else(|| over(&self.budget.turn, &turn, next, n, Scope::Turn));
        match found {
            Some(reached) => {
                state.reached = Some(reached.clone());
                Err(reached)
            }
            None => Ok(()),
        }
    }
}

/// The first of `limits` that `spent` reached (with `n` more of `next`).
fn over(limits: &Limits, spent: &Spent, next: Limit, n: u64, scope: Scope) -> Option<BudgetReached> {
    limits.amounts().find_map(|(limit, allowed)| {
        let used = spent.get(limit);
        let reached = match (allowed, used) {
            (Amount::Count(allowed), Amount::Count(used)) if matches!(limit, Limit::ToolCalls | Limit::ModelCalls) => {
                (limit == next && used + n > allowed).then_some(Amount::Count(used))
            }
            (Amount::Count(allowed), Amount::Count(used)) => (used >= allowed).then_some(Amount::Count(used)),
            (Amount::Dollars(allowed), Amount::Dollars(used)) => (used >= allowed).then_some(Amount::Dollars(used)),
            (Amount::Millis { ms: allowed }, Amount::Millis { ms: used }) => {
                (used >= allowed).then_some(Amount::Millis { ms: used })
            }
            _ => None,
        }?;
        Some(BudgetReached { scope, limit, allowed, used: reached })
    })
}

impl Default for Meter {
    fn default() -> Self {
        Meter::new(Budget::default(), Spent::default(), Spent::default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spent_calls(tool_calls: u64) -> Spent {
        Spent { tool_calls, model_calls: tool_calls, ..Spent::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_meter_without_limits_lets_every_call_start_and_still_counts_what_the_turn_spends() {
        let meter = Meter::new(Budget::default(), spent_calls(1_000_000), Spent::default());
        for _ in 0..100 {
            assert!(meter.before_model_call().is_ok());
            assert!(meter.before_tool_calls(3, true).is_ok());
        }
        assert_eq!(meter.turn_spent().tool_calls, 300);
        assert_eq!(meter.reached(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_of_either_scope_alone_is_checked_and_stays_reached() {
        let turn =
            Meter::new(Budget::default().turn(Limits::default().tool_calls(2)), Spent::default(), Spent::default());
        assert!(turn.before_tool_calls(2, true).is_ok());
        let reached = turn.before_tool_calls(1, true).unwrap_err();
        assert_eq!((reached.scope, reached.limit), (Scope::Turn, Limit::ToolCalls));
        assert_eq!(turn.before_model_call().unwrap_err(), reached, "reached stays reached");
        let session = Budget::default().session(Limits::default().model_calls(5));
        let meter = Meter::new(session, spent_calls(5), Spent::default());
        assert_eq!(meter.before_model_call().unwrap_err().scope, Scope::Session);
    }
}
