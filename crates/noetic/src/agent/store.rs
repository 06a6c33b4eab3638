//! The store seam: what a session needs to outlive its process (SPEC 6), as a trait a database implements.
//!
//! A runtime built with a [`SessionStore`] writes through: every item a turn appends (committed by the turn
//! driver at the points a resume needs, see [`TurnJournal`](crate::turn::TurnJournal)), every steering message
//! accepted, injected (in the same write as the user item it becomes) or cleared, the session's settings and turn
//! count, and the running turn's core. Opening a session reads it back; a turn a dead process left unfinished is
//! offered for resumption ([`Session::resume`](super::Session::resume)).
//!
//! The methods are synchronous: an embedded database answers in microseconds, and the calls happen at turn
//! boundaries and checkpoints, never per token. [`MemoryStore`] is the in-memory implementation (tests, and the
//! shape a database implementation follows); `noetic-sqlite` is the embedded one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use super::{BatchPolicy, SessionSnapshot, SteerMessage, SteeringMode};
use crate::context::lock;
use crate::error::NoeticError;
use crate::model::Item;

/// What a commit does to the session's running-turn journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalWrite<'a> {
    /// Leave it as it is.
    Keep,
    /// Save this core (JSON) of the `llm` step `step_id`.
    Save {
        /// The step.
        step_id: &'a str,
        /// The serialised `TurnCore`.
        core: &'a str,
    },
    /// The step ended: nothing is left to resume.
    Clear,
}

/// One atomic write of a running turn.
#[derive(Debug, Clone, Copy)]
pub struct StoreCommit<'a> {
    /// The index in the conversation of `items[0]` (the store holds exactly `first` items before this commit).
    pub first: usize,
    /// Items appended since the last commit.
    pub items: &'a [Item],
    /// Ids of steering messages injected with these items: they leave the queue in the same write.
    pub injected: &'a [String],
    /// The journal.
    pub journal: JournalWrite<'a>,
    /// Steering ledger entries (JSON) made since the last commit, appended in order.
    pub ledger: &'a [String],
}

/// One layer's state to save or delete ([`SessionStore::save_layer_states`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerStateWrite<'a> {
    /// Whose state ([`ScopeKey::store_name`](crate::layer::ScopeKey::store_name): `thread:<session key>`,
    /// `global`, …).
    pub scope: &'a str,
    /// The layer's id.
    pub layer: &'a str,
    /// The state (JSON), or `None` to delete what was kept.
    pub state: Option<&'a str>,
}

/// A turn a process left unfinished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedTurn {
    /// The `llm` step it was in.
    pub step_id: String,
    /// Its serialised `TurnCore`.
    pub core: String,
}

/// A session as a store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// History, queued messages, settings, turn count.
    pub snapshot: SessionSnapshot,
    /// The turn a process left unfinished, if any.
    pub unfinished: Option<UnfinishedTurn>,
}

/// One line of a store's session list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The key.
    pub key: String,
    /// Turns started.
    pub turns: u64,
    /// Items in the conversation.
    pub items: u64,
    /// Steering messages queued.
    pub queued: u64,
    /// A turn was left unfinished.
    pub unfinished: bool,
    /// Last write.
    pub updated_at: SystemTime,
}

/// Where sessions live beyond their process. Every method is one atomic write or a consistent read; an error
/// means nothing of that call was written.
pub trait SessionStore: Send + Sync + 'static {
    /// Reads the session `key` and takes ownership of it for this process (released by
    /// [`SessionStore::close`]); `None` when the store has never seen it. Another live process owning it is
    /// an error naming that process; an owner that died is taken over.
    fn open(&self, key: &str) -> Result<Option<StoredSession>, NoeticError>;

    /// Gives up this process's ownership of `key`.
    fn close(&self, key: &str);

    /// Appends items, removes injected messages from the queue and writes the journal, all or nothing. A commit
    /// whose `first` is not the number of items held is refused (it would leave a hole or overwrite).
    fn commit(&self, key: &str, commit: StoreCommit<'_>) -> Result<(), NoeticError>;

    /// Queues a steering message at the tail.
    fn push_message(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError>;

    /// Removes the queued messages with these ids, or all of them (`None`).
    fn remove_messages(&self, key: &str, ids: Option<&[String]>) -> Result<(), NoeticError>;

    /// Saves the session's settings and turn count.
    fn save_settings(
        &self,
        key: &str,
        mode: SteeringMode,
        capacity: usize,
        batch_policy: BatchPolicy,
        turns: u64,
    ) -> Result<(), NoeticError>;

    /// Every session, most recently written first.
    fn list(&self) -> Result<Vec<SessionSummary>, NoeticError>;

    /// Deletes a session; false when there was none.
    fn delete(&self, key: &str) -> Result<bool, NoeticError>;

    /// The session's steering ledger entries (JSON), oldest first.
    fn ledger(&self, key: &str) -> Result<Vec<String>, NoeticError>;

    /// The layer states kept for `scope` (see [`LayerStateWrite::scope`]): (layer id, JSON), in no particular
    /// order. The state of a session's thread (`thread:<key>`) is deleted with the session.
    fn layer_states(&self, scope: &str) -> Result<Vec<(String, String)>, NoeticError>;

    /// Saves (or deletes) layer states, all or nothing. Each replaces what was kept for its scope and layer.
    fn save_layer_states(&self, writes: &[LayerStateWrite<'_>]) -> Result<(), NoeticError>;

    /// Queues a steering message for `key` from a process that need not own it (SPEC 6.4): durable at once; the
    /// owner takes it at its next checkpoint ([`SessionStore::take_inbox`]), and with no owner it waits in the queue
    /// like any other. A store only one process uses queues it as [`SessionStore::push_message`] does.
    fn steer_elsewhere(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        self.push_message(key, message)
    }

    /// Asks the owner of `key`, wherever it runs, to stop: at its next checkpoint it clears the queue and cancels
    /// its turn. With no live owner the queue is cleared at once. Returns false when the store has no such session.
    fn request_stop(&self, key: &str, reason: &str) -> Result<bool, NoeticError> {
        let _ = reason;
        match self.remove_messages(key, None) {
            Ok(()) => Ok(self.list()?.iter().any(|s| s.key == key)),
            Err(e) => Err(e),
        }
    }

    /// For the owner of `key`, at a checkpoint: the messages other processes queued since it last looked (they are
    /// ordinary queued messages from now on) and a stop another process asked for (consumed by this call). Must be
    /// cheap when there is nothing: it runs at every checkpoint of every turn.
    fn take_inbox(&self, key: &str) -> Result<Inbox, NoeticError> {
        let _ = key;
        Ok(Inbox::default())
    }

    /// Before a turn starts in `key` (this process holds it idle): takes the session's turn lease, for stores that
    /// several processes share turn by turn (`noetic-postgres`). [`TurnLease::Granted`] carries the session as
    /// stored when another process wrote to it since this one last read or wrote it (what memory holds is stale:
    /// replace it). The default, for stores one process owns from `open` to `close`: granted, nothing newer.
    fn begin_turn(&self, key: &str) -> Result<TurnLease, NoeticError> {
        let _ = key;
        Ok(TurnLease::Granted { refreshed: None })
    }

    /// [`SessionStore::begin_turn`] for a message that starts the turn if it can: when another process runs a turn
    /// in `key`, the message is queued for that turn instead ([`SessionStore::steer_elsewhere`]) in the same
    /// atomic step, and [`TurnLease::Elsewhere`] is returned — so a message never falls between a turn that is
    /// ending elsewhere and one that would start here.
    fn begin_turn_or_queue(&self, key: &str, message: &SteerMessage) -> Result<TurnLease, NoeticError> {
        let _ = message;
        self.begin_turn(key)
    }

    /// The turn in `key` ended (after its last commit): gives up the lease. Returns the messages other processes
    /// queued for it that it never took at a checkpoint (with the queue's order, as [`SessionStore::take_inbox`]
    /// does) — they are ordinary queued messages from now on, and the caller adds them to what it holds. The
    /// default: nothing.
    fn end_turn(&self, key: &str) -> Result<Inbox, NoeticError> {
        let _ = key;
        Ok(Inbox::default())
    }

    /// Stops the turn another process runs in `key`, if one does: clears the stored queue and asks that turn to
    /// stop at its next checkpoint ([`SessionStore::request_stop`]). False when no other process runs a turn
    /// there (the caller stops what it runs itself). The default, for stores one process owns: false.
    fn stop_elsewhere(&self, key: &str, reason: &str) -> Result<bool, NoeticError> {
        let _ = (key, reason);
        Ok(false)
    }

    /// What other processes left for an idle session this process keeps between turns (steering messages, a
    /// stop): taken by [`Session::continue_session`](super::Session::continue_session), which then runs them. A
    /// store that owns a session for as long as a process has it open (SQLite) hands over what
    /// [`SessionStore::take_inbox`] would; the default — for stores whose lease is per turn, where a message for
    /// an idle session starts its turn where it arrives — is nothing.
    fn take_idle_inbox(&self, _key: &str) -> Result<Inbox, NoeticError> {
        Ok(Inbox::default())
    }

    /// What a process that is not running `key`'s turn should show of it, for stores several processes share turn
    /// by turn: the session as stored and the worker running its turn now, read consistently. What this process
    /// holds in memory of such a session is only as new as its own last turn there. The default, for stores one
    /// process owns: `None` (memory is current).
    fn observe(&self, key: &str) -> Result<Option<Observed>, NoeticError> {
        let _ = key;
        Ok(None)
    }

    /// Sessions that need a turn no live process runs: an unfinished turn whose lease expired (the process died),
    /// to take over with [`Session::resume`](super::Session::resume), or messages queued for a turn that never took
    /// them, to start one with [`Session::continue_session`](super::Session::continue_session). The default: none
    /// (one process owns every session it opened; another finds the unfinished turn when it opens the session).
    fn orphaned(&self) -> Result<Vec<String>, NoeticError> {
        Ok(Vec::new())
    }
}

/// What [`SessionStore::begin_turn`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnLease {
    /// This process runs the turn.
    Granted {
        /// The session as stored, when another process changed it since this one last saw it.
        refreshed: Option<StoredSession>,
    },
    /// Another process runs a turn in the session.
    Elsewhere {
        /// Who (a worker id).
        owner: String,
    },
}

/// A session as another process sees it ([`SessionStore::observe`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The session as stored; `None` when the store has never seen it.
    pub stored: Option<StoredSession>,
    /// The worker running a turn in it now (its lease is live), if any.
    pub running_on: Option<String>,
}

/// What other processes left for a session's owner ([`SessionStore::take_inbox`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inbox {
    /// Steering messages, oldest first.
    pub messages: Vec<SteerMessage>,
    /// A stop, with its reason.
    pub stop: Option<String>,
    /// The lease on the session was lost (another process took it over): the running turn must stop at once
    /// without writing anything more, and leave the queue to the new owner. With why.
    pub lease_lost: Option<String>,
    /// With `messages`: the ids of every message the store holds queued for the session, in the order it accepted
    /// them, whichever process accepted them — the owner arranges what it holds by it, so messages reach the model
    /// in acceptance order (SPEC 4.2). Empty: no order known (messages join at the tail).
    pub order: Vec<String>,
}

/// A [`SessionStore`] in memory: what a database implementation does, without the durability.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, (StoredSession, SystemTime)>>,
    ledgers: Mutex<HashMap<String, Vec<String>>>,
    /// (scope, layer) → state.
    layer_states: Mutex<HashMap<(String, String), String>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// A copy of everything it holds: what a process killed at this moment would leave on disk (tests use it to
    /// "crash" a runtime and open its sessions in another).
    pub fn snapshot(&self) -> MemoryStore {
        MemoryStore {
            sessions: Mutex::new(lock(&self.sessions).clone()),
            ledgers: Mutex::new(lock(&self.ledgers).clone()),
            layer_states: Mutex::new(lock(&self.layer_states).clone()),
        }
    }
}

fn fresh(key: &str) -> StoredSession {
    StoredSession {
        snapshot: SessionSnapshot {
            key: key.to_owned(),
            history: Vec::new(),
            queued: Vec::new(),
            turns: 0,
            mode: SteeringMode::default(),
            capacity: super::DEFAULT_QUEUE_CAPACITY,
            batch_policy: BatchPolicy::default(),
        },
        unfinished: None,
    }
}

/// A unit enum setting's serde name (`one-at-a-time`, `skip-remaining` …), as a store keeps it in a text column.
pub fn setting_text<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Reads back what [`setting_text`] wrote.
pub fn parse_setting<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
}

/// The scope name a session's thread state is kept under (what [`ScopeKey::store_name`] gives for the session's
/// thread): `thread:<key>`.
///
/// [`ScopeKey::store_name`]: crate::layer::ScopeKey::store_name
pub fn thread_scope(key: &str) -> String {
    format!("thread:{key}")
}

/// The error of a commit that does not continue the stored conversation.
pub fn out_of_order(key: &str, held: usize, first: usize) -> NoeticError {
    NoeticError::other(format!(
        "session '{key}': a commit starting at item {first} does not continue the stored conversation of {held} \
         items; another process may have written to it — reopen the session"
    ))
}

impl SessionStore for MemoryStore {
    fn open(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        Ok(lock(&self.sessions).get(key).map(|(s, _)| s.clone()))
    }

    fn close(&self, _key: &str) {}

    fn commit(&self, key: &str, commit: StoreCommit<'_>) -> Result<(), NoeticError> {
        let mut sessions = lock(&self.sessions);
        let (session, updated) = sessions.entry(key.to_owned()).or_insert_with(|| (fresh(key), SystemTime::now()));
        let held = session.snapshot.history.len();
        if commit.first != held {
            return Err(out_of_order(key, held, commit.first));
        }
        session.snapshot.history.extend_from_slice(commit.items);
        session.snapshot.queued.retain(|m| !commit.injected.contains(&m.id.to_string()));
        match commit.journal {
            JournalWrite::Keep => {}
            JournalWrite::Save { step_id, core } => {
                session.unfinished = Some(UnfinishedTurn { step_id: step_id.to_owned(), core: core.to_owned() });
            }
            JournalWrite::Clear => session.unfinished = None,
        }
        *updated = SystemTime::now();
        lock(&self.ledgers).entry(key.to_owned()).or_default().extend_from_slice(commit.ledger);
        Ok(())
    }

    fn push_message(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        let mut sessions = lock(&self.sessions);
        let (session, updated) = sessions.entry(key.to_owned()).or_insert_with(|| (fresh(key), SystemTime::now()));
        session.snapshot.queued.push(message.clone());
        *updated = SystemTime::now();
        Ok(())
    }

    fn remove_messages(&self, key: &str, ids: Option<&[String]>) -> Result<(), NoeticError> {
        if let Some((session, _)) = lock(&self.sessions).get_mut(key) {
            match ids {
                Some(ids) => session.snapshot.queued.retain(|m| !ids.contains(&m.id.to_string())),
                None => session.snapshot.queued.clear(),
            }
        }
        Ok(())
    }

    fn save_settings(
        &self,
        key: &str,
        mode: SteeringMode,
        capacity: usize,
        batch_policy: BatchPolicy,
        turns: u64,
    ) -> Result<(), NoeticError> {
        let mut sessions = lock(&self.sessions);
        let (session, updated) = sessions.entry(key.to_owned()).or_insert_with(|| (fresh(key), SystemTime::now()));
        let snapshot = &mut session.snapshot;
        (snapshot.mode, snapshot.capacity, snapshot.batch_policy, snapshot.turns) =
            (mode, capacity, batch_policy, turns);
        *updated = SystemTime::now();
        Ok(())
    }

    fn list(&self) -> Result<Vec<SessionSummary>, NoeticError> {
        let mut list: Vec<SessionSummary> = lock(&self.sessions)
            .values()
            .map(|(s, updated)| SessionSummary {
                key: s.snapshot.key.clone(),
                turns: s.snapshot.turns,
                items: s.snapshot.history.len() as u64,
                queued: s.snapshot.queued.len() as u64,
                unfinished: s.unfinished.is_some(),
                updated_at: *updated,
            })
            .collect();
        list.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
        Ok(list)
    }

    fn delete(&self, key: &str) -> Result<bool, NoeticError> {
        lock(&self.ledgers).remove(key);
        let thread = thread_scope(key);
        lock(&self.layer_states).retain(|(scope, _), _| *scope != thread);
        Ok(lock(&self.sessions).remove(key).is_some())
    }

    fn ledger(&self, key: &str) -> Result<Vec<String>, NoeticError> {
        Ok(lock(&self.ledgers).get(key).cloned().unwrap_or_default())
    }

    fn layer_states(&self, scope: &str) -> Result<Vec<(String, String)>, NoeticError> {
        Ok(lock(&self.layer_states)
            .iter()
            .filter(|((s, _), _)| s == scope)
            .map(|((_, layer), state)| (layer.clone(), state.clone()))
            .collect())
    }

    fn save_layer_states(&self, writes: &[LayerStateWrite<'_>]) -> Result<(), NoeticError> {
        let mut states = lock(&self.layer_states);
        for w in writes {
            let at = (w.scope.to_owned(), w.layer.to_owned());
            match w.state {
                Some(state) => states.insert(at, state.to_owned()),
                None => states.remove(&at),
            };
        }
        Ok(())
    }
}
