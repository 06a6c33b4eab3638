//! Picking a session up again: continuing with queued messages, resuming or discarding the turn a stopped
//! process left, and waiting for the session to be idle.

use super::*;

impl Session {
    /// Resumes an idle session with its queued messages in a new [`Turn`]: `Ok(None)` when none are queued (no
    /// model call); [`SessionError::Busy`] while a turn runs. The messages (taken by the queue's mode) reach the
    /// model as separate user messages; the turn-start poll is skipped.
    pub async fn continue_session(&self) -> Result<Option<Turn>, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let started = self.locked(|state, conversation| {
            if matches!(*conversation, Conversation::Running { .. }) {
                return Err(SessionError::Busy { session: state.key.to_string() });
            }
            if let Some(reached) = state.paused() {
                return Err(self.paused_error(&reached, None));
            }
            // What other processes queued for the idle session is in the queue already (heard through the log).
            if state.queue.len() == 0 {
                return Ok(None);
            }
            let history = claim(state, conversation)?;
            let messages = state.queue.take(state.settings.mode());
            if messages.is_empty() {
                *conversation = Conversation::Idle(history);
                return Ok(None);
            }
            Ok(Some(self.start_turn(state, conversation, history, String::new(), messages, TurnKind::Continuation)))
        });
        if !matches!(started, Ok(Some(_))) {
            self.unlease().await;
        }
        started
    }

    /// The `llm` step of a turn a stopped process left unfinished, if there is one (see [`Session::resume`]).
    pub fn unfinished_turn(&self) -> Option<String> {
        self.live().unfinished_step()
    }

    /// Resumes the turn a stopped process left: journaled model responses are not requested again, journaled
    /// tool outcomes are not re-run, and a call that was running gets the interrupted result (SPEC 6.3).
    /// The resumed [`Turn`], `Ok(None)` when there is none; [`SessionError::Busy`] while a turn runs.
    pub async fn resume(&self) -> Result<Option<Turn>, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let started = self.locked(|state, conversation| {
            if matches!(conversation, Conversation::Running { .. }) {
                return Err(SessionError::Busy { session: state.key.to_string() });
            }
            if state.unfinished_step().is_none() {
                return Ok(None);
            }
            let Conversation::Idle(history) = conversation else {
                return Err(SessionError::Busy { session: state.key.to_string() });
            };
            let history = std::mem::take(history);
            // The agent runs again with the message the turn started with (its finished steps answer from the log).
            let input = state
                .logged()
                .and_then(|l| lock(&l.projection).open_turn.as_ref().map(|t| t.input.clone()))
                .unwrap_or_default();
            Ok(Some(self.start_turn(state, conversation, history, input, Vec::new(), TurnKind::Resumed)))
        });
        if !matches!(started, Ok(Some(_))) {
            self.unlease().await;
        }
        started
    }

    /// Gives up the turn a stopped process left: every tool call in the conversation without a result gets the
    /// interrupted result, and nothing is left to resume. Returns false when there was none; a
    /// [`SessionError`] while a turn runs or when the store cannot write it.
    pub async fn discard_unfinished(&self) -> Result<bool, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let discarded = self.discard_held().await;
        self.unlease().await;
        discarded
    }

    /// [`Session::discard_unfinished`] once this process may write the session.
    pub(super) async fn discard_held(&self) -> Result<bool, SessionError> {
        let logged = self.locked(|state, conversation| {
            let Conversation::Idle(history) = conversation else {
                return Err(SessionError::Busy { session: state.key.to_string() });
            };
            if state.unfinished_step().is_none() {
                return Ok(None);
            }
            let Some(logged) = state.logged() else { return Ok(None) };
            let open = unanswered_calls(history.as_slice());
            let results: Vec<Item> =
                open.iter().map(|id| Item::ToolResult(crate::turn::interrupted_result(id))).collect();
            // The interrupted results and the turn's end are one append; the session changes once it is durable.
            let turn = lock(&logged.projection).open_turn.as_ref().map_or(0, |t| t.turn);
            let mut entries = Vec::new();
            if !results.is_empty() {
                entries.push(Entry::Appended { turn, items: results.clone() });
            }
            entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Discarded });
            Ok(Some((state.clone(), logged.submit(entries), results)))
        });
        let Some((state, receipt, results)) = logged? else { return Ok(false) };
        settled(receipt).await.map_err(|message| SessionError::Store { session: state.key.to_string(), message })?;
        let mut conversation = lock(&state.conversation);
        if let Conversation::Idle(history) = &mut *conversation {
            let mut items = history.to_vec();
            items.extend(results);
            if let Some(logged) = state.logged() {
                logged.set_persisted(items.len());
            }
            *history = History::new(items);
        }
        drop(conversation);
        state.clear_unfinished();
        Ok(true)
    }

    /// Waits until no turn runs.
    pub async fn idle(&self) {
        loop {
            let state = self.live().into_owned();
            let ended = state.turn_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !matches!(*lock(&state.conversation), Conversation::Running { .. }) {
                return;
            }
            ended.await;
        }
    }
}

/// The ids of the calls in `items` with no result after them, in call order. Calls and results pair up in order:
/// call ids are unique within a turn, not across turns (a model may reuse `c1` in every turn).
pub(super) fn unanswered_calls(items: &[Item]) -> Vec<String> {
    let mut open: Vec<&str> = Vec::new();
    for item in items {
        match item {
            Item::ToolCall(c) => open.push(&c.id),
            Item::ToolResult(r) => {
                if let Some(at) = open.iter().position(|id| **id == *r.call_id) {
                    open.remove(at);
                }
            }
            _ => {}
        }
    }
    open.into_iter().map(str::to_owned).collect()
}
