//! One conversation and its turns: the [`Session`] handle, its reads and settings. Starting and steering turns
//! (`messages`), the turn itself (`turn`), resuming (`resume`) and the state behind the handle (`state`) are in
//! the files of `session/`.

use std::borrow::Cow;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::log::{Entry, LogStore, Projection, TurnOutcome};
use super::logged::{Logged, Receipt, settled};
use super::queue::{MessageId, SessionQueue};
use super::{BatchPolicy, SteerError, SteerMessage, SteeringMode, TurnSteering};
use super::{Handles, RuntimeInner, SessionSettings, TurnHandle};
use crate::context::{
    Context, EventFollower, EventKind, EventReceiver, EventSink, ExecutionId, RecordSink, TurnServices, lock,
};
use crate::error::NoeticError;
use crate::model::{History, Item};
use crate::turn::TurnJournal;
use tracing::Instrument;

mod budget;
mod compact;
mod journal;
mod lease;
mod messages;
mod resume;
mod state;
mod title;
mod turn;

use journal::{LogJournal, LogRecords, ReplayIndex};
use messages::*;
pub(crate) use state::SessionState;
use state::*;
pub use turn::Turn;
use turn::*;

pub use title::{MAX_TITLE_CHARS, check_title};

/// What [`Session::send_or_steer`] did with a message.
pub enum Routed {
    /// The session was idle: a turn started.
    Started(Turn),
    /// A turn was running: the message was queued for it.
    Steered(MessageId),
}

/// How many of its most recent events a session's log keeps for followers that resume (and subscribers read: one
/// that falls further behind loses events).
pub const SESSION_EVENT_LOG_CAPACITY: usize = 4096;

/// Why a session could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A turn is already running in this session.
    #[error("session '{session}' is busy with a turn; wait for it, cancel it, or steer it")]
    Busy {
        /// The session key.
        session: String,
    },
    /// Another process sharing the session's store runs a turn in it (`noetic-postgres`); a message for it is
    /// steered there ([`Session::send_or_steer`]).
    #[error("session '{session}' is busy with a turn on worker {owner}; wait for it, stop it, or steer it")]
    BusyElsewhere {
        /// The session key.
        session: String,
        /// The worker running the turn.
        owner: String,
    },
    /// A turn a stopped process left is waiting: resume it or discard it first.
    #[error(
        "session '{session}' has an unfinished turn left by a stopped process; resume it (Session::resume) or discard it (Session::discard_unfinished) first"
    )]
    Unfinished {
        /// The session key.
        session: String,
    },
    /// The store could not write what the session needed.
    #[error("session '{session}': the store failed ({message})")]
    Store {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
    /// The session is paused over its budget: the message (if there was one) was queued, and runs once a person
    /// raises the limit ([`Session::raise_budget`]).
    #[error(
        "session '{session}' is paused over its budget ({reason}); {} raise the limit to continue \
         (/budget in noetic chat, Raise on the page, PUT /api/sessions/{{key}}/budget, or Session::raise_budget)",
        if queued.is_some() { "the message was queued and runs once the limit is raised;" } else { "nothing runs:" }
    )]
    Paused {
        /// The session key.
        session: String,
        /// The limit reached.
        reason: String,
        /// The message queued, if one was sent.
        queued: Option<MessageId>,
    },
    /// A budget with a zero or negative limit.
    #[error("session '{session}': {message}")]
    InvalidBudget {
        /// The session key.
        session: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A title that is empty, too long or holds control characters ([`Session::set_title`]).
    #[error("session '{session}': {message}")]
    InvalidTitle {
        /// The session key.
        session: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The session's log could not be read; nothing runs in it until it can be.
    #[error(
        "session '{session}' could not be opened from its log ({message}); check the session store and open it again"
    )]
    Unavailable {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
}

/// A handle on one conversation, from [`Runtime::session`](super::Runtime::session). Clones share it.
///
/// [`Session::send`] starts a [`Turn`]; [`Session::steer`] queues a message for the running one;
/// [`Session::subscribe`] and [`Session::follow`] stream its [`Event`](crate::context::Event)s.
#[derive(Clone)]
pub struct Session {
    runtime: Arc<RuntimeInner>,
    /// What its turns hold the runtime by.
    handles: Handles,
    state: Arc<SessionState>,
}

impl Session {
    pub(super) fn new(runtime: Arc<RuntimeInner>, handles: Handles, state: Arc<SessionState>) -> Self {
        Session { runtime, handles, state }
    }

    /// The session's live state: this handle's, unless the runtime evicted it since — then the one the runtime
    /// holds now (read from its log again if needed).
    fn live(&self) -> Cow<'_, Arc<SessionState>> {
        if self.state.evicted.load(Ordering::SeqCst) {
            Cow::Owned(super::state_of(&self.runtime, &self.state.key))
        } else {
            Cow::Borrowed(&self.state)
        }
    }

    /// Runs `f` on the live state's conversation, locked; looks again when an eviction won the race for the lock.
    fn locked<R>(&self, f: impl FnOnce(&Arc<SessionState>, &mut Conversation) -> R) -> R {
        let mut state = self.live();
        loop {
            let mut conversation = lock(&state.conversation);
            if !state.evicted.load(Ordering::SeqCst) {
                return f(&state, &mut conversation);
            }
            drop(conversation);
            state = Cow::Owned(super::state_of(&self.runtime, &self.state.key));
        }
    }

    /// The session key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The conversation so far, as [`Item`]s (including what a running turn has added).
    pub fn history(&self) -> Vec<Item> {
        self.locked(|_, conversation| match conversation {
            Conversation::Idle(h) => h.to_vec(),
            Conversation::Running { ctx, .. } => ctx.items(),
        })
    }

    /// The steering decisions the session's log holds, oldest first (with a log store; empty without one — a
    /// [`SteeringLayer`](crate::steering::SteeringLayer) keeps each execution's own in memory).
    pub fn ledger(&self) -> Vec<crate::steering::LedgerEntry> {
        self.live().logged().map(Logged::ledger).unwrap_or_default()
    }

    /// Adds a decision made outside the steering layer (an approval a configuration gave without a question, say)
    /// to the session's ledger, chained after its last entry (and signed with the runtime's
    /// [ledger key](super::RuntimeBuilder::ledger_key) when no turn runs: it is then the last entry). Without a
    /// log store the ledger is the steering layer's, and this does nothing.
    pub fn record_decision(&self, entry: &crate::steering::LedgerEntry) {
        let state = self.live();
        let Some(logged) = state.logged() else { return };
        let idle = !self.is_busy();
        let signer = self.runtime.ledger_key.as_deref();
        super::log_chain::append_decision(logged, state.key(), None, entry.clone(), signer, idle, Vec::new);
    }

    /// True while a turn runs.
    pub fn is_busy(&self) -> bool {
        self.locked(|_, conversation| matches!(conversation, Conversation::Running { .. }))
    }

    /// Subscribes to this session's events (turns, steps, model and tool calls, tool progress) from now on —
    /// also those of a turn already running — as an [`EventReceiver`] of
    /// [`Event`](crate::context::Event)s (match on [`Event::kind`](crate::context::Event::kind), an [`EventKind`]), read from the session's event log. A receiver
    /// that falls so far behind that the log dropped what it would read next loses those events
    /// ([`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged)); use [`Session::follow`] to get
    /// every event or an explicit gap.
    pub fn subscribe(&self) -> EventReceiver {
        sink(&self.live()).subscribe().unwrap_or_else(EventReceiver::closed)
    }

    /// Follows this session's events with an [`EventFollower`], in order from the one numbered after `after`
    /// ([`Event::seq`](crate::context::Event::seq); 0: from the oldest the session's log still holds): what the log holds first, then live events. Events the bounded log
    /// (the last [`SESSION_EVENT_LOG_CAPACITY`]) no longer holds are reported as one [`Followed::Gap`](crate::context::Followed::Gap), never
    /// skipped silently; a follower that falls behind catches up the same way. The log starts at the first
    /// subscription or follow. A session that is followed is never evicted.
    pub fn follow(&self, after: u64) -> EventFollower {
        // A session's sink always has a log; were it missing, the follower would just end.
        sink(&self.live()).follow(after).unwrap_or_else(EventFollower::ended)
    }

    /// The number of the session's newest event (0 before the first subscription).
    pub fn last_event_seq(&self) -> u64 {
        self.live().events.get().map_or(0, EventSink::last_seq)
    }

    /// How many turns this session has started (the running turn's number while one runs).
    pub fn turns(&self) -> u64 {
        self.live().turns.load(Ordering::SeqCst)
    }

    /// Cancels the running turn, if any. Returns true if there was one.
    pub fn cancel(&self, reason: &str) -> bool {
        self.locked(|_, conversation| match conversation {
            Conversation::Running { ctx, .. } => {
                ctx.cancel(reason);
                true
            }
            Conversation::Idle(_) => false,
        })
    }

    /// This session's dequeue mode, a [`SteeringMode`] (it starts with the runtime's).
    pub fn steering_mode(&self) -> SteeringMode {
        self.live().settings.mode()
    }

    /// Changes this session's dequeue mode ([`SteeringMode`]; no other session's); its next checkpoint uses it.
    pub async fn set_steering_mode(&self, mode: SteeringMode) {
        self.change_settings(|settings| settings.set_mode(mode)).await;
    }

    /// Changes a setting and writes the settings where the session is kept (a failure is logged: the session goes
    /// on with them in memory).
    async fn change_settings(&self, change: impl FnOnce(&SessionSettings)) {
        if let Err(e) = self.opened().await {
            tracing::error!(session = %self.key(), error = %e, "the setting is not saved");
        }
        let (state, receipt) = self.locked(|state, _| {
            change(&state.settings);
            (state.clone(), state.submit(vec![state.settings_entry()]))
        });
        note_failure(&state, receipt, "could not write the session's settings to the log").await;
    }

    /// How many messages this session may have queued at once (it starts with the runtime's).
    pub fn steering_capacity(&self) -> usize {
        self.live().settings.capacity()
    }

    /// Changes this session's queue capacity (at least 1); messages already queued stay.
    pub async fn set_steering_capacity(&self, capacity: usize) {
        self.change_settings(|settings| settings.set_capacity(capacity)).await;
    }

    /// Messages queued for this session.
    pub fn queued(&self) -> usize {
        self.live().queue.len()
    }

    /// What happens to the rest of a tool batch when steering arrives, for this session: a [`BatchPolicy`] (it
    /// starts with the runtime's).
    pub fn batch_policy(&self) -> BatchPolicy {
        self.live().settings.batch_policy()
    }

    /// Changes this session's batch policy ([`BatchPolicy`]); the next checkpoint uses it.
    pub async fn set_batch_policy(&self, policy: BatchPolicy) {
        self.change_settings(|settings| settings.set_batch_policy(policy)).await;
    }

    /// A copy of the messages ([`SteerMessage`]s) queued for this session, oldest first.
    pub fn queued_messages(&self) -> Vec<SteerMessage> {
        self.live().queue.peek()
    }

    /// Empties this session's queue; returns how many messages were removed.
    pub async fn clear_queue(&self) -> usize {
        if let Err(e) = self.opened().await {
            tracing::error!(session = %self.key(), error = %e, "could not clear the queue");
            return 0;
        }
        let (state, receipt, cleared) = self.locked(|state, _| {
            let cleared = clear_queue(state);
            (state.clone(), state.drop_logged_queue("the queue was cleared"), cleared)
        });
        note_failure(&state, receipt, "could not write the cleared queue to the log").await;
        cleared
    }
}
