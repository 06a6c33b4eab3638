//! The recorded steering decisions of session logs, ready to replay through new rules
//! ([`crate::steering::replay`]): each `tool_call` and `model_turn` decision with its session and turn, and a
//! model-turn decision paired with the response it judged (the [`Entry::Core`] response input of the same turn).

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use super::entry::Entry;
use super::projection::READ_PAGE;
use super::seam::{LogStore, StoreError};
use crate::model::ModelResponse;
use crate::steering::LedgerEntry;
use crate::steering::replay::Recorded;
use crate::turn::Input;

/// Which sessions and decisions to load.
#[derive(Debug, Clone, Default)]
pub struct RecordingFilter {
    /// Only these sessions (empty: every session of the store). A key the store does not hold is an error.
    pub sessions: Vec<String>,
    /// Only decisions made at or after this time.
    pub since: Option<SystemTime>,
}

/// Why the recorded decisions could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// A session asked for is not in the store.
    #[error("the store has no session '{key}'; its sessions are: {known} (see `noetic sessions`)")]
    UnknownSession {
        /// The key asked for.
        key: String,
        /// The keys it has, comma-separated (or "none").
        known: String,
    },
    /// The store failed, or an entry cannot be read (a newer noetic wrote it: upgrade).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One recorded decision: where, the entry, and the index of its response among the recording's responses.
#[derive(Debug, Clone)]
struct Decision {
    session: usize,
    turn: Option<u64>,
    entry: LedgerEntry,
    response: Option<usize>,
}

/// The recorded decisions of some sessions of a log store, in log order per session.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    sessions: Vec<String>,
    decisions: Vec<Decision>,
    responses: Vec<ModelResponse>,
    /// Decisions before this time are read (a response is paired by its turn's order) but not replayed.
    since: Option<SystemTime>,
}

impl Recording {
    /// Reads the decisions of the sessions `filter` names (all by default) from `store`.
    pub async fn load(store: &dyn LogStore, filter: &RecordingFilter) -> Result<Recording, RecordingError> {
        let mut keys: Vec<String> = store.list().await?.into_iter().map(|line| line.key).collect();
        if !filter.sessions.is_empty() {
            for key in &filter.sessions {
                if !keys.contains(key) {
                    let known = if keys.is_empty() { "none".to_owned() } else { keys.join(", ") };
                    return Err(RecordingError::UnknownSession { key: key.clone(), known });
                }
            }
            keys = filter.sessions.clone();
        } else {
            // Oldest first reads best; the store lists the most recently used first.
            keys.reverse();
        }
        let mut recording = Recording { since: filter.since, ..Recording::default() };
        for key in keys {
            let session = recording.sessions.len();
            recording.sessions.push(key.clone());
            let mut pairing = Pairing::default();
            let mut after = 0;
            loop {
                let records = store.read(&key, after, READ_PAGE).await?;
                let Some(last) = records.last() else { break };
                after = last.pos;
                for record in records {
                    recording.take(session, record.entry, &mut pairing);
                }
            }
        }
        Ok(recording)
    }

    /// Keeps a decision or a response of session `session`.
    fn take(&mut self, session: usize, entry: Entry, pairing: &mut Pairing) {
        match entry {
            Entry::Core { turn, input: Input::Response(response), .. } => {
                self.responses.push(*response);
                pairing.response(turn, self.responses.len() - 1, &mut self.decisions);
            }
            Entry::Decision { turn, entry } => {
                if !Recorded::is_decision(&entry) {
                    return;
                }
                let model_turn = entry.kind == crate::steering::LedgerKind::ModelTurn;
                self.decisions.push(Decision { session, turn, entry: *entry, response: None });
                if model_turn {
                    pairing.decision(turn, self.decisions.len() - 1, &mut self.decisions);
                }
            }
            _ => {}
        }
    }

    /// The sessions read, in order.
    pub fn sessions(&self) -> &[String] {
        &self.sessions
    }

    /// How many decisions there are to replay.
    pub fn len(&self) -> usize {
        self.decisions().count()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.decisions().next().is_none()
    }

    /// The decisions to replay, in log order per session.
    pub fn decisions(&self) -> impl Iterator<Item = Recorded<'_>> {
        let since = self.since;
        let kept = move |d: &&Decision| since.is_none_or(|since| d.entry.timestamp >= since);
        self.decisions.iter().filter(kept).map(|d| Recorded {
            session: self.sessions.get(d.session).map_or("", String::as_str),
            turn: d.turn,
            entry: &d.entry,
            response: d.response.and_then(|i| self.responses.get(i)),
        })
    }
}

/// Model responses and model-turn decisions of one session waiting for each other, per turn: the n-th decision
/// of a turn judged its n-th response, whichever of the two the log holds first.
#[derive(Default)]
struct Pairing {
    responses: HashMap<Option<u64>, VecDeque<usize>>,
    decisions: HashMap<Option<u64>, VecDeque<usize>>,
}

impl Pairing {
    fn response(&mut self, turn: u64, response: usize, decisions: &mut [Decision]) {
        let waiting = self.decisions.get_mut(&Some(turn)).and_then(VecDeque::pop_front);
        match waiting.and_then(|d| decisions.get_mut(d)) {
            Some(decision) => decision.response = Some(response),
            None => self.responses.entry(Some(turn)).or_default().push_back(response),
        }
    }

    fn decision(&mut self, turn: Option<u64>, decision: usize, decisions: &mut [Decision]) {
        match self.responses.get_mut(&turn).and_then(VecDeque::pop_front) {
            Some(response) => {
                if let Some(d) = decisions.get_mut(decision) {
                    d.response = Some(response);
                }
            }
            None => self.decisions.entry(turn).or_default().push_back(decision),
        }
    }
}
