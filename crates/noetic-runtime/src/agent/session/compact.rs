//! Compacting an idle session's conversation by hand (`/compact` in the chat, `POST /api/sessions/{key}/compact`).

use super::{Conversation, Session, settled};
use crate::agent::log::Entry;
use crate::context::Context;
use crate::error::NoeticError;
use crate::window::{Compacted, Compaction, compact_now};

impl Session {
    /// Compacts the conversation now (SPEC 8.2): everything before its last turn is replaced, in what later
    /// requests send, by a summary the runtime's model writes as `model_id`; the conversation, the session log
    /// (which records an [`Entry::Compacted`]), the ledger and replay keep every item. `None` when there was
    /// nothing to fold (a conversation of one turn). Fails while a turn runs (compact between turns) and when the
    /// model fails.
    pub async fn compact(&self, model_id: &str) -> Result<Option<Compacted>, NoeticError> {
        let busy = || {
            NoeticError::other(format!(
                "session '{}' is busy with a turn; compact it when the turn ends (requests that do not fit are \
                 compacted by the turn itself)",
                self.key()
            ))
        };
        self.opened().await.map_err(|message| NoeticError::other(format!("session '{}': {message}", self.key())))?;
        let history = self.locked(|_, conversation| match conversation {
            Conversation::Idle(history) => Ok(history.clone()),
            Conversation::Running { .. } => Err(busy()),
        })?;
        let Some(model) = self.runtime.shared.local().services().model.clone() else {
            return Err(NoeticError::other("the runtime has no model to write the summary"));
        };
        // The session's sink: its followers (the page, the chat) see the compaction as it happens.
        let ctx = Context::builder().history(history.clone()).events(super::sink(&self.live()).clone()).build();
        let Some(compacted) = compact_now(&ctx, model.as_ref(), model_id, Compaction::Summarize).await? else {
            return Ok(None);
        };
        let folded = ctx.history().folded().cloned();
        let receipt = self.locked(|state, conversation| match conversation {
            // Only onto the conversation it was made of: a turn that ran meanwhile changed it.
            Conversation::Idle(now) if now.len() == history.len() => {
                *now = std::mem::take(now).with_folded(folded.clone());
                Ok(folded
                    .map(|f| state.submit(vec![Entry::Compacted { turn: None, upto: f.upto, summary: f.summary }])))
            }
            _ => Err(busy()),
        })?;
        if let Some(Some(receipt)) = receipt {
            settled(receipt)
                .await
                .map_err(|e| NoeticError::other(format!("the compaction could not be logged: {e}")))?;
        }
        Ok(Some(compacted))
    }
}
