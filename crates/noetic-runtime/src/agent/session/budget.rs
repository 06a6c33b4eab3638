//! A session's budget: what it may spend, what it spent, and the pause once a limit is reached.

use std::sync::Arc;

use super::{Session, SessionError, SessionState, Turn, settled};
use crate::agent::log::Entry;
use crate::budget::{Account, Budget, BudgetReached, BudgetStatus, Meter, Spent};
use crate::context::{Context, EventKind, lock};
use crate::steering::{LedgerEntry, LedgerKind, SteeringAction};

impl SessionState {
    /// The session's budget account: its log's projection, or (without a log) what this process counted.
    pub(super) fn account(&self) -> Account {
        match self.logged() {
            Some(logged) => lock(&logged.projection).budget.clone(),
            None => lock(&self.account).clone(),
        }
    }

    /// The limit the session is paused over, if it is.
    pub(super) fn paused(&self) -> Option<BudgetReached> {
        match self.logged() {
            Some(logged) => lock(&logged.projection).budget.paused.clone(),
            None => lock(&self.account).paused.clone(),
        }
    }

    /// The meter a turn counts on: the session's budget (else `default`), what it spent before; a resumed turn
    /// also starts from what it spent before the stop.
    pub(super) fn meter(&self, default: &Budget, resumed: bool) -> Arc<Meter> {
        let account = self.account();
        let budget = account.budget.unwrap_or(*default);
        let turn = if resumed { account.turn } else { Spent::default() };
        let before = account.spent.minus(&turn);
        Arc::new(Meter::new(budget, before, turn))
    }

    /// After a turn: a limit it reached is announced; with a log, what the log cannot show of its spending and the
    /// limit (ledgered, pausing the session) are the entries returned, which go in the turn's end (so the session is
    /// paused by the time anyone sees the turn over, in the same commit); without one, they are counted here.
    pub(super) fn settle_budget(&self, ctx: &Context, meter: &Meter, turn: u64) -> Vec<Entry> {
        let reached = meter.reached();
        if let Some(reached) = &reached {
            let session = self.key().clone();
            let reached = reached.clone();
            ctx.emit(|| EventKind::BudgetReached { session, reached });
        }
        if self.logged().is_none() {
            let mut account = lock(&self.account);
            account.spent.add(&meter.turn_spent());
            if reached.is_some() {
                account.paused = reached;
            }
            return Vec::new();
        }
        let mut entries = Vec::new();
        let unlogged = meter.unlogged();
        if !unlogged.is_zero() {
            entries.push(Entry::BudgetSpent { turn, spent: unlogged });
        }
        if let Some(reached) = reached {
            entries.push(Entry::Decision { turn: Some(turn), entry: Box::new(ledger_entry(&reached)) });
            entries.push(Entry::BudgetReached { turn, reached });
        }
        entries
    }
}

/// The ledger's record of a limit reached: a DENY of everything after it, naming the limit and the amount.
fn ledger_entry(reached: &BudgetReached) -> LedgerEntry {
    LedgerEntry {
        rule_id: Some(format!("budget.{}.{}", reached.scope.name(), reached.limit.name())),
        guidance: Some(format!("{reached}; the session is paused until the limit is raised")),
        budget: Some(reached.clone()),
        ..LedgerEntry::new(LedgerKind::Custom, SteeringAction::Deny)
    }
}

impl Session {
    /// The session's budget (its own, else the runtime's default — [`RuntimeBuilder::budget`](crate::agent::RuntimeBuilder::budget)),
    /// what it spent so far, and the limit it is paused over, if it is.
    pub fn budget(&self) -> BudgetStatus {
        let state = self.live();
        let account = state.account();
        BudgetStatus {
            budget: account.budget.unwrap_or(self.runtime.default_budget),
            spent: account.spent,
            paused: account.paused,
        }
    }

    /// Sets the session's budget (recorded in its log, so it holds after a restart): the next turn is held to
    /// it, and a session paused over its budget is no longer paused — its queued messages run at the next
    /// [`Session::continue_session`] ([`Session::raise_budget`] does both). A zero or negative limit is
    /// [`SessionError::InvalidBudget`].
    pub async fn set_budget(&self, budget: Budget) -> Result<(), SessionError> {
        let session = || self.key().to_owned();
        budget.validate().map_err(|e| SessionError::InvalidBudget { session: session(), message: e.to_string() })?;
        self.opened().await.map_err(|message| SessionError::Unavailable { session: session(), message })?;
        let receipt = self.locked(|state, _| match state.submit(vec![Entry::BudgetSet { budget }]) {
            Some(receipt) => Some(receipt),
            None => {
                let mut account = lock(&state.account);
                account.budget = Some(budget);
                account.paused = None;
                None
            }
        });
        if let Some(receipt) = receipt {
            settled(receipt).await.map_err(|message| SessionError::Store { session: session(), message })?;
        }
        Ok(())
    }

    /// Sets the budget ([`Session::set_budget`]) and continues the session with the messages that queued while it
    /// was paused: the continuation [`Turn`], `None` when none wait. A budget the session has already spent (its
    /// session limits reached by what it spent) is [`SessionError::InvalidBudget`] and changes nothing.
    pub async fn raise_budget(&self, budget: Budget) -> Result<Option<Turn>, SessionError> {
        // A budget the session has spent already would end the continuation at once, its messages unanswered.
        let spent = self.live().account().spent;
        if let Err(reached) = Meter::new(budget, spent, Spent::default()).before_model_call() {
            return Err(SessionError::InvalidBudget {
                session: self.key().to_owned(),
                message: format!(
                    "with this budget {reached} already; raise the {} {} limit above {}",
                    reached.scope.name(),
                    reached.limit,
                    reached.used
                ),
            });
        }
        self.set_budget(budget).await?;
        self.continue_session().await
    }

    /// The error a paused session answers a message with; the message was queued (`queued`).
    pub(super) fn paused_error(
        &self,
        reached: &BudgetReached,
        queued: Option<crate::agent::MessageId>,
    ) -> SessionError {
        SessionError::Paused { session: self.key().to_owned(), reason: reached.to_string(), queued }
    }
}
