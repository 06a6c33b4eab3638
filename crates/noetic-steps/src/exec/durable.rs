//! What an `llm` step makes durable: its commits to the turn journal (the items since the last one, the core's
//! position, calls about to start), the step's end, and the steering checkpoint polls whose findings it records.

use crate::context::{Checkpoints, Context, HookContext};
use crate::error::NoeticError;
use crate::model::{Item, ToolCall};
use crate::turn::{Finished, Input, Polled, TurnCommit, TurnCore, TurnJournal};

/// Commits what is new in the conversation since the journal's last commit, the injected message ids and the
/// core (`None`: the step ended).
pub(super) async fn commit(
    ctx: &Context,
    journal: &dyn TurnJournal,
    (step_id, path): (&str, &str),
    core: Option<&TurnCore>,
    injected: Vec<String>,
    (starts, wait, redoable): (&[ToolCall], bool, bool),
) -> Result<(), NoeticError> {
    let first = journal.persisted();
    let items = ctx.with_items(|items| items.get(first..).map(<[Item]>::to_vec).unwrap_or_default());
    let commit = TurnCommit { step_id, path, first, items, injected, core, finished: None, starts, wait, redoable };
    journal.commit(commit).await
}

/// Runs `work` (the review of a response, the layers storing the answer). When it does not finish at once and the
/// journal records inputs, the response it works on is committed while it runs: a crash during a slow review (an
/// LLM judge) never asks the model for that response again, and a quick one adds no write of its own.
pub(super) async fn while_durable<T>(
    ctx: &Context,
    (journal, at, core): (Option<&dyn TurnJournal>, (&str, &str), &TurnCore),
    work: impl std::future::Future<Output = T>,
) -> Result<T, NoeticError> {
    let Some(journal) = journal.filter(|j| j.records_inputs()) else { return Ok(work.await) };
    let mut work = std::pin::pin!(work);
    if let std::task::Poll::Ready(done) = futures::poll!(work.as_mut()) {
        return Ok(done);
    }
    let (done, committed) = futures::join!(work, commit(ctx, journal, at, Some(core), Vec::new(), (&[], true, false)));
    committed.map(|()| done)
}

/// Commits the end of the step's run: its answer when it finished (`None`: it failed). Handed over without
/// waiting: what comes next (the next step's first write, the turn's end) is written after it, often in the same
/// transaction.
pub(super) async fn finish(
    ctx: &Context,
    journal: &dyn TurnJournal,
    (step_id, path): (&str, &str),
    finished: Option<Finished>,
) -> Result<(), NoeticError> {
    let first = journal.persisted();
    let items = ctx.with_items(|items| items.get(first..).map(<[Item]>::to_vec).unwrap_or_default());
    let commit = TurnCommit {
        step_id,
        path,
        first,
        items,
        injected: Vec::new(),
        core: None,
        finished,
        starts: &[],
        wait: false,
        redoable: false,
    };
    journal.commit(commit).await
}

/// True when the session log records this execution's model responses and tool starts (a session turn's root).
pub(super) fn logs_inputs(ctx: &HookContext<'_>) -> bool {
    ctx.journal().is_some_and(|j| j.records_inputs())
}

/// Performs a checkpoint. Without steering (a child execution, a plain context) nothing is ever pending.
pub(super) fn poll(steering: Option<&dyn Checkpoints>, turn_start: bool) -> Input {
    let Some(ts) = steering else {
        return Input::Polled(Polled { pending: false, capacity: 0, skip_rest: true });
    };
    let pending = if turn_start {
        ts.poll_at_turn_start();
        ts.has_pending()
    } else {
        ts.poll()
    };
    Input::Polled(Polled { pending, capacity: ts.capacity(), skip_rest: ts.skips_rest_of_batch() })
}
