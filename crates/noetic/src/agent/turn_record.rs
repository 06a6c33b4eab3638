//! What a store keeps of a running turn: the answers of the `llm` step runs that finished and the cores of those
//! still running, keyed by where each run is in the turn (`step_id#n`). A resumed turn runs its agent again: each
//! finished run gives its answer back without asking the model, the running one continues from its core.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::session::SessionState;
use super::store::{JournalWrite, StoreCommit, UnfinishedTurn};
use crate::context::lock;
use crate::error::NoeticError;
use crate::turn::{Finished, Replay, TurnCommit, TurnCore, TurnJournal};

/// The record's format version (version 1 was one bare [`TurnCore`], read as the first run of its step).
const RECORD_VERSION: u32 = 2;

/// A running turn's record, as the journal column keeps it (JSON).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct TurnRecord {
    v: u32,
    /// Answers of runs that finished, by path.
    #[serde(default)]
    finished: BTreeMap<String, Finished>,
    /// Cores of runs that were running, by path.
    #[serde(default)]
    running: BTreeMap<String, TurnCore>,
}

impl TurnRecord {
    /// Reads what a store kept: this format, or the bare core earlier versions wrote (the first run of `step_id`).
    pub(crate) fn read(saved: &UnfinishedTurn) -> Result<TurnRecord, serde_json::Error> {
        match serde_json::from_str::<TurnRecord>(&saved.core) {
            Ok(record) if record.v == RECORD_VERSION => Ok(record),
            _ => {
                let core: TurnCore = serde_json::from_str(&saved.core)?;
                let running = BTreeMap::from([(format!("{}#0", saved.step_id), core)]);
                Ok(TurnRecord { v: RECORD_VERSION, finished: BTreeMap::new(), running })
            }
        }
    }
}

/// A session turn's journal in the runtime's store.
pub(crate) struct StoreJournal {
    state: Arc<SessionState>,
    record: Mutex<TurnRecord>,
    /// How many runs of each `llm` step this turn has entered.
    runs: Mutex<HashMap<String, u32>>,
}

impl StoreJournal {
    /// The journal of a new turn (`record`: the one a stopped process left, for a resumed turn).
    pub(crate) fn new(state: Arc<SessionState>, record: Option<TurnRecord>) -> Self {
        let record = record.unwrap_or(TurnRecord { v: RECORD_VERSION, ..TurnRecord::default() });
        StoreJournal { state, record: Mutex::new(record), runs: Mutex::default() }
    }

    fn write(&self, commit: &TurnCommit<'_>) -> Result<(), NoeticError> {
        let Some(store) = self.state.store() else { return Ok(()) };
        let record = {
            let mut record = lock(&self.record);
            match commit.core {
                Some(core) => record.running.insert(commit.path.to_owned(), core.clone()),
                None => record.running.remove(commit.path),
            };
            if let Some(finished) = &commit.finished {
                record.finished.insert(commit.path.to_owned(), finished.clone());
            }
            serde_json::to_string(&*record).map_err(|e| {
                NoeticError::other(format!("the turn of step '{}' could not be serialised: {e}", commit.step_id))
            })?
        };
        let journal = JournalWrite::Save { step_id: commit.step_id, core: &record };
        let write =
            StoreCommit { first: commit.first, items: &commit.items, injected: &commit.injected, journal, ledger: &[] };
        self.state.commit_with_ledger(store.as_ref(), write)?;
        self.state.set_persisted(commit.first + commit.items.len());
        Ok(())
    }
}

impl TurnJournal for StoreJournal {
    fn persisted(&self) -> usize {
        self.state.persisted()
    }

    fn commit<'a>(&'a self, commit: TurnCommit<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(std::future::ready(self.write(&commit)))
    }

    fn enter(&self, step_id: &str) -> String {
        let mut runs = lock(&self.runs);
        let n = runs.entry(step_id.to_owned()).or_default();
        let path = format!("{step_id}#{n}");
        *n += 1;
        path
    }

    fn replay(&self, path: &str) -> Option<Replay> {
        let record = lock(&self.record);
        if let Some(finished) = record.finished.get(path) {
            return Some(Replay::Finished(finished.clone()));
        }
        record.running.get(path).cloned().map(Replay::Running)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_bare_core_an_earlier_version_left_is_read_as_the_first_run_of_its_step() {
        let core = TurnCore::new("assistant", 8, true);
        let saved = UnfinishedTurn { step_id: "assistant".into(), core: serde_json::to_string(&core).unwrap() };
        let record = TurnRecord::read(&saved).unwrap();
        assert!(record.finished.is_empty());
        assert_eq!(record.running.get("assistant#0"), Some(&core));
    }

    #[test]
    fn a_record_reads_back_with_its_finished_and_running_runs() {
        let mut record = TurnRecord { v: RECORD_VERSION, ..TurnRecord::default() };
        let finished = Finished { text: "the plan".into(), usage: Default::default(), cost: 0.5 };
        record.finished.insert("plan#0".into(), finished.clone());
        record.running.insert("act#0".into(), TurnCore::new("act", 8, true));
        let saved = UnfinishedTurn { step_id: "act".into(), core: serde_json::to_string(&record).unwrap() };
        let back = TurnRecord::read(&saved).unwrap();
        assert_eq!(back.finished.get("plan#0"), Some(&finished));
        assert!(back.running.contains_key("act#0"));
    }

    #[test]
    fn an_unreadable_record_is_an_error_not_a_guess() {
        let saved = UnfinishedTurn { step_id: "assistant".into(), core: "{\"v\":7}".into() };
        assert!(TurnRecord::read(&saved).is_err());
    }
}
