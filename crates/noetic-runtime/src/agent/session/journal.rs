//! A running turn on the session log: its journal (the `llm` steps' inputs, calls started, steps finished, the
//! conversation items, in the order they happened) and its ledger records; and the replay index a resumed turn
//! reads its steps back from.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;

use crate::agent::RuntimeInner;
use crate::agent::log::{Entry, Record, StepPath};
use crate::agent::logged::settled;
use crate::agent::session::SessionState;
use crate::context::{ApprovalRecord, RecordSink, RewriteRecord, lock};
use crate::error::NoeticError;
use crate::model::Item;
use crate::steering::{LedgerEntry, LedgerKind, SteeringAction};
use crate::turn::{Finished, Input, Replay, TurnCommit, TurnJournal};

/// What a stopped process's turn left in the log, by step path: finished steps' answers, running steps' inputs.
#[derive(Default)]
pub(crate) struct ReplayIndex {
    finished: HashMap<Arc<str>, Finished>,
    inputs: HashMap<Arc<str>, Vec<Input>>,
}

impl ReplayIndex {
    /// The index of a turn's records (its entries from its start).
    pub(crate) fn of(records: &[Record]) -> ReplayIndex {
        let mut index = ReplayIndex::default();
        for record in records {
            match &record.entry {
                Entry::Core { step, input, .. } => {
                    index.inputs.entry(step.0.clone()).or_default().push(input.clone());
                }
                Entry::StepFinished { step, output: Some(output), .. } => {
                    if let Ok(finished) = serde_json::from_value::<Finished>(output.clone()) {
                        index.finished.insert(step.0.clone(), finished);
                    }
                }
                _ => {}
            }
        }
        index
    }

    /// The `llm` step the turn was in (the last one with inputs and no answer), if any.
    pub(crate) fn running_step(records: &[Record]) -> Option<String> {
        let finished: HashSet<&str> = records
            .iter()
            .filter_map(|r| match &r.entry {
                Entry::StepFinished { step, .. } => Some(&*step.0),
                _ => None,
            })
            .collect();
        records.iter().rev().find_map(|r| match &r.entry {
            Entry::Core { step, .. } | Entry::ToolStarted { step, .. } if !finished.contains(&*step.0) => {
                Some(step.0.split('#').next().unwrap_or_default().to_owned())
            }
            _ => None,
        })
    }
}

/// A session turn's journal on the session log.
pub(crate) struct LogJournal {
    state: Arc<SessionState>,
    turn: u64,
    /// Inputs recorded since the last commit.
    pending: Mutex<Vec<Entry>>,
    /// The step path last written: the entries of one step share its text.
    step: Mutex<StepPath>,
    /// A finished step's end, kept for the turn's next write (the turn's end, or the next step's first commit)
    /// instead of a write of its own; its items count as written.
    deferred: Mutex<Vec<Entry>>,
    /// How many runs of each `llm` step this turn has entered.
    runs: Mutex<HashMap<String, u32>>,
    replay: ReplayIndex,
    /// The turn's end was written: later decisions (async verdicts) are appended on their own.
    ended: AtomicBool,
    /// A commit handed to the writer without waiting (before a model request): the next one is written after it
    /// only if it landed, so the turn's entries are never written with a hole in them.
    written: Mutex<Option<(crate::agent::logged::Receipt, usize)>>,
    /// Where the conversation's durable part ended before that commit (what it goes back to if it failed).
    before: std::sync::atomic::AtomicUsize,
    /// The turn's writes, refused after one fails.
    chain: crate::agent::logged::Chain,
    /// The turn's opening is the commit handed over without waiting ([`LogJournal::open`]).
    opening: AtomicBool,
    /// Why the turn's opening did not land, once that is known.
    unopened: Mutex<Option<String>>,
}

impl LogJournal {
    pub(crate) fn new(state: Arc<SessionState>, turn: u64, replay: ReplayIndex) -> Self {
        LogJournal {
            state,
            turn,
            pending: Mutex::default(),
            step: Mutex::default(),
            deferred: Mutex::default(),
            runs: Mutex::default(),
            replay,
            ended: AtomicBool::new(false),
            written: Mutex::default(),
            before: std::sync::atomic::AtomicUsize::new(0),
            chain: Arc::default(),
            opening: AtomicBool::new(false),
            unopened: Mutex::default(),
        }
    }

    /// Hands the turn's opening (its start, and the messages it shows the model first) to the writer without
    /// waiting: the turn goes on to its first model request meanwhile, and its first durable write (the response,
    /// with the call it starts) goes after it — in the same append when the model answers within the writer's hold
    /// — and only if it landed. `before`: where the conversation's durable part ended before the opening's items.
    /// A crash before it lands loses the turn's start, as a crash before a start written on its own did; nothing the
    /// turn did before its first durable write is in the log either.
    pub(crate) fn open(&self, entries: Vec<Entry>, before: usize) {
        let Some(logged) = self.state.logged() else { return };
        let receipt = logged.submit_lazy(entries, Some(self.chain.clone()));
        self.before.store(before, Ordering::SeqCst);
        self.opening.store(true, Ordering::SeqCst);
        *lock(&self.written) = Some((receipt, logged.persisted()));
    }

    /// Whether the turn's opening landed; waited for when no write of the turn waited for it yet.
    pub(crate) async fn opened(&self) -> Result<(), String> {
        if self.opening.load(Ordering::SeqCst) {
            // Its error, if any, is kept below.
            let _ = self.landed().await;
        }
        lock(&self.unopened).clone().map_or(Ok(()), Err)
    }

    /// Waits for the commit handed over without waiting, if any: an error when it did not land.
    async fn landed(&self) -> Result<(), String> {
        let Some((mut receipt, persisted)) = lock(&self.written).take() else { return Ok(()) };
        let opening = self.opening.swap(false, Ordering::SeqCst);
        let Some(logged) = self.state.logged() else { return Ok(()) };
        let answer = match receipt.try_recv() {
            Ok(answer) => answer,
            // Handed over lazily: the writer may be holding it for the next write, which is not coming.
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                logged.flush();
                settled(receipt).await
            }
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => settled(receipt).await,
        };
        match answer {
            Ok(_) => {
                logged.set_persisted(persisted.max(logged.persisted()));
                Ok(())
            }
            Err(e) => {
                // Its items are not in the log: the next write of this session starts from them again.
                logged.set_persisted(self.before.load(Ordering::SeqCst));
                if opening {
                    *lock(&self.unopened) = Some(e.clone());
                }
                Err(e)
            }
        }
    }

    /// `path` as a step path, sharing the text of the one made last (a step's inputs and its commits name it).
    fn step_path(&self, path: &str) -> StepPath {
        let mut last = lock(&self.step);
        if &*last.0 != path {
            *last = StepPath(path.into());
        }
        last.clone()
    }

    /// The entries of `commit`: the items (those injected as their messages), the recorded inputs, the finished
    /// step's answer, the call about to start.
    fn entries(&self, commit: &TurnCommit<'_>) -> Vec<Entry> {
        let turn = self.turn;
        let mut entries = std::mem::take(&mut *lock(&self.deferred));
        let shown = commit.injected.len().min(commit.items.len());
        let plain = &commit.items[..commit.items.len() - shown];
        if !plain.is_empty() {
            entries.push(Entry::Appended { turn, items: plain.to_vec() });
        }
        if shown > 0 {
            let ids = commit.injected.iter().filter_map(|id| crate::agent::MessageId::parse(id)).collect();
            entries.push(Entry::Injected { turn, ids });
        }
        entries.append(&mut lock(&self.pending));
        let step = self.step_path(commit.path);
        if let Some(finished) = &commit.finished {
            let output = serde_json::to_value(finished).ok();
            entries.push(Entry::StepFinished { turn, step: step.clone(), output });
        }
        if let Some((last, group)) = commit.starts.split_last() {
            for call in group {
                let step = step.clone();
                entries.push(Entry::ToolStarted { turn, step, call_id: call.id.clone(), tool: call.name.clone() });
            }
            entries.push(Entry::ToolStarted { turn, step, call_id: last.id.clone(), tool: last.name.clone() });
        }
        entries
    }

    /// Whether `commit` waits for the turn's next write instead of being written now: everything in it can be done
    /// again after a crash, nothing waits on it, and no finished step's end is kept for the next write. That is
    /// what an idempotent call's outcome and the polls after it are (the next call's start takes them: one write
    /// per call; not a compaction, which would cost a model call to redo), and what a step's start is before its
    /// first model request (its prompt and the polls: a crash there starts the step again).
    fn waits(&self, commit: &TurnCommit<'_>) -> bool {
        let pending = lock(&self.pending);
        let redoable = commit.redoable && pending.iter().all(|e| matches!(e, Entry::Core { .. }));
        let starting = commit.core.is_some()
            && commit.finished.is_none()
            && pending.iter().all(|e| matches!(e, Entry::Core { input: Input::Start | Input::Polled(_), .. }));
        !commit.wait
            && commit.starts.is_empty()
            && commit.injected.is_empty()
            && lock(&self.deferred).is_empty()
            && (redoable || starting)
    }

    /// Appends what the turn did since its last commit (a finished step's end with it), `also` (its budget, the
    /// layers' changed states) and how it ended; `release` names the holder of the session's lease, given up with
    /// this append (when it fails, the lease is still held).
    pub(crate) async fn end(
        &self,
        ctx: &crate::context::Context,
        also: Vec<Entry>,
        outcome: crate::agent::log::TurnOutcome,
        release: Option<Arc<str>>,
    ) -> Result<(), String> {
        let Some(logged) = self.state.logged() else { return Ok(()) };
        // A write handed over before (the step's end) is not waited for first: the writer keeps the order, refuses
        // this one if that one failed, and may put both in one transaction.
        let first = logged.persisted();
        let (new, total) =
            ctx.with_items(|items| (items.get(first..).map(<[Item]>::to_vec).unwrap_or_default(), items.len()));
        let mut entries = std::mem::take(&mut *lock(&self.deferred));
        if !new.is_empty() {
            entries.push(Entry::Appended { turn: self.turn, items: new });
        }
        entries.append(&mut lock(&self.pending));
        entries.extend(also);
        entries.push(Entry::TurnEnded { turn: self.turn, outcome });
        self.ended.store(true, Ordering::SeqCst);
        let this = settled(logged.submit_releasing(entries, Some(self.chain.clone()), release)).await;
        self.landed().await?;
        this?;
        logged.set_persisted(total.max(first));
        Ok(())
    }
}

impl TurnJournal for LogJournal {
    fn persisted(&self) -> usize {
        self.state.logged().map_or(0, |l| l.persisted())
    }

    fn commit<'a>(&'a self, commit: TurnCommit<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            let Some(logged) = self.state.logged() else { return Ok(()) };
            let failed = |e: String| {
                NoeticError::other(format!(
                    "the turn of step '{}' could not be written to the log: {e}",
                    commit.step_id
                ))
            };
            if self.waits(&commit) {
                return Ok(());
            }
            let entries = self.entries(&commit);
            let persisted = commit.first + commit.items.len();
            // A step's end waits for the turn's next write: the turn's end (one commit for both), or the next
            // step's first commit, written while its model answers as the step's end was before. A crash before
            // it lands leaves the step running in the log: its last response is asked for again, as when a crash
            // came before a step's end was written on its own. A write handed over before it (the last call's
            // outcome) is not waited for here: the next write goes after it (and with it, when it is still held).
            if commit.finished.is_some() && !commit.wait {
                *lock(&self.deferred) = entries;
                logged.set_persisted(persisted);
                return Ok(());
            }
            if entries.is_empty() {
                return self.landed().await.map_err(failed);
            }
            // Handed over at once, also after a write not yet landed: the writer keeps the order and refuses this
            // one if that one failed, so both may even share a transaction.
            if !commit.wait {
                let receipt = logged.submit_lazy(entries, Some(self.chain.clone()));
                self.landed().await.map_err(failed)?;
                // The items count as written for the next commit's slice.
                self.before.store(commit.first, Ordering::SeqCst);
                logged.set_persisted(persisted);
                *lock(&self.written) = Some((receipt, persisted));
                return Ok(());
            }
            let this = settled(logged.submit_in(entries, Some(self.chain.clone()))).await;
            self.landed().await.map_err(failed)?;
            this.map_err(failed)?;
            logged.set_persisted(persisted);
            Ok(())
        })
    }

    fn enter(&self, step_id: &str) -> String {
        let mut runs = lock(&self.runs);
        let n = runs.entry(step_id.to_owned()).or_default();
        let path = format!("{step_id}#{n}");
        *n += 1;
        path
    }

    fn replay(&self, path: &str) -> Option<Replay> {
        if let Some(finished) = self.replay.finished.get(path) {
            return Some(Replay::Finished(finished.clone()));
        }
        self.replay.inputs.get(path).cloned().map(Replay::Inputs)
    }

    fn record(&self, path: &str, input: &Input) {
        lock(&self.pending).push(Entry::Core { turn: self.turn, step: self.step_path(path), input: input.clone() });
    }

    fn records_inputs(&self) -> bool {
        true
    }

    /// Written with the turn's next commit.
    fn compacted(&self, folded: &crate::model::Folded) {
        lock(&self.pending).push(Entry::Compacted {
            turn: Some(self.turn),
            upto: folded.upto,
            summary: folded.summary.clone(),
        });
    }
}

/// A session turn's ledger on the session log: each decision is appended as it is made, also one an async rule
/// makes after its turn ended.
pub(crate) struct LogRecords {
    pub(crate) journal: Arc<LogJournal>,
    /// The runtime's layers (weakly: a verdict may outlive the runtime).
    pub(crate) runtime: Weak<RuntimeInner>,
}

impl RecordSink for LogRecords {
    fn approval(&self, approval: ApprovalRecord<'_>) {
        let Some(logged) = self.journal.state.logged() else { return };
        let turn = self.journal.turn;
        let entry = match approval {
            ApprovalRecord::Asked { call_id, tool, arguments, arguments_sha256 } => Entry::ApprovalAsked {
                turn,
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                arguments: arguments.to_owned(),
                arguments_sha256: Some(arguments_sha256.to_owned()),
            },
            ApprovalRecord::Decided { call_id, approved, reason } => Entry::ApprovalDecided {
                turn,
                call_id: call_id.to_owned(),
                approved,
                reason: reason.map(str::to_owned),
            },
        };
        logged.submit_detached(vec![entry]);
    }

    /// A rewrite is a ledger entry of its own: the layer as its rule, the reason as its guidance, the arguments
    /// before and after.
    fn rewrite(&self, rewrite: RewriteRecord<'_>) {
        let entry = LedgerEntry {
            tool_name: Some(rewrite.tool.to_owned()),
            tool_args: Some(rewrite.before.clone()),
            rewritten_args: Some(rewrite.after.clone()),
            rule_id: Some(rewrite.layer.to_owned()),
            guidance: Some(rewrite.reason.to_owned()),
            ..LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)
        };
        self.ledger_entry(Box::new(entry));
    }

    fn ledger_entry(&self, entry: Box<dyn std::any::Any + Send>) {
        let state = &self.journal.state;
        let Some(logged) = state.logged() else { return };
        let Ok(entry) = entry.downcast::<LedgerEntry>() else {
            tracing::error!(session = %state.key(), "a ledger record that is not a ledger entry was not logged");
            return;
        };
        let ended = self.journal.ended.load(Ordering::SeqCst);
        let runtime = self.runtime.upgrade();
        let signer = runtime.as_ref().and_then(|r| r.ledger_key.as_deref());
        crate::agent::log_chain::append_decision(
            logged,
            state.key(),
            Some(self.journal.turn),
            *entry,
            signer,
            ended,
            || {
                // A verdict resolving after its turn ended changed what the session's thread carries to its next
                // turn: saved with it, so it survives a restart.
                match runtime.as_ref().filter(|_| ended) {
                    Some(runtime) => {
                        crate::agent::persist::thread_changes(&runtime.layers, state.key(), &logged.layers)
                    }
                    None => Vec::new(),
                }
            },
        );
    }
}
