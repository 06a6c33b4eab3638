//! The turns the server runs: a started turn and the turns its queue makes after it, the turns of a stopped
//! process taken over, and a left turn resumed for a new message.

use std::sync::Arc;

use noetic::agent::{Session, Turn};

use crate::AppState;

/// Runs a started turn and then, before letting go of the session, turns for messages that arrived after its
/// last checkpoint, so no message is left in the queue of an idle session.
pub(crate) fn run_turn(state: &AppState, session: Session, turn: Turn) {
    let running = state.running.start(session.key());
    state.turns.spawn(async move {
        let _running = running;
        let mut turn = turn;
        loop {
            // The outcome is in the session's events and history; nothing more to do with it here.
            let _ = turn.await;
            match session.continue_session().await {
                Ok(Some(next)) => turn = next,
                Ok(None) | Err(_) => return,
            }
        }
    });
}

/// Every `every`, resumes the turns dead workers left and runs messages nobody took (SPEC 6: a turn whose
/// worker's lease ran out, or whose process is gone). Several workers may try the same session: its lease lets
/// exactly one resume it. The first look is one period after the start, not at once: a message sent to a session a
/// stopped process left, right after this one starts, resumes its turn with the message queued before the turn's
/// first checkpoint (as when it arrives later), rather than racing a takeover that would resume the turn without
/// it and leave the message for a later checkpoint.
pub(crate) async fn take_over(state: Arc<AppState>, every: std::time::Duration) {
    let Some(store) = state.runtime.log_store().cloned() else { return };
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if state.shutdown.is_cancelled() {
            return;
        }
        let listed = match store.list().await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for turns left by dead workers");
                continue;
            }
        };
        for line in listed {
            let waiting = line.summary.open_turn.is_some() || line.summary.queued > 0;
            if !waiting || state.running.contains(&line.key) {
                continue;
            }
            if let Some(leases) = store.leases()
                && !matches!(leases.holder(&line.key).await, Ok(None))
            {
                continue;
            }
            take_over_one(&state, &line.key).await;
        }
    }
}

/// Resumes `key`'s unfinished turn, else runs the messages waiting in its queue.
async fn take_over_one(state: &Arc<AppState>, key: &str) {
    let Ok(session) = state.runtime.open(key).await else { return };
    let started = match session.resume().await {
        Ok(None) => session.continue_session().await,
        other => other,
    };
    match started {
        Ok(Some(turn)) => {
            tracing::info!(session = %key, turn = turn.number(), "took over a session no live worker runs");
            run_turn(state, session, turn);
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(session = %key, error = %e, "not taken over (another worker may have it)"),
    }
}

/// Resumes the unfinished turn of `session`, which a message just queued for (another worker may have taken it
/// first: then the message reaches it there).
pub(crate) async fn resume_for_message(state: &AppState, session: &Session, key: &str) {
    match session.resume().await {
        Ok(Some(turn)) => {
            tracing::info!(session = %key, turn = turn.number(), "resumed a turn a stopped process left, for a new message");
            run_turn(state, session.clone(), turn);
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(session = %key, error = %e, "not resumed here (another worker may have it)"),
    }
}
