//! A run whose thread is paused over its budget: its messages are queued (they run once a person raises the
//! limit), and the run says so — `noetic.run_routed` with `routed: "paused"`, the queued messages' ids and the
//! limit reached (`budget`: scope, limit, allowed, used, message), the state snapshot (whose `paused` holds the
//! same limit), then `RUN_ERROR` with the code `budget_paused` and a message saying how the thread continues.
//! A front-end shows the error's message as it shows any run error; one that knows `noetic.run_routed` can offer
//! to raise the limit (`PUT /api/sessions/{threadId}/budget`).

use std::sync::Arc;

use noetic::agent::{Routed, Session};
use noetic::budget::BudgetReached;
use serde_json::json;

use super::Plan;
use super::stream::{End, Run};
use crate::AppState;
use crate::error::ApiError;
use crate::open::steer_error;

/// The error code of a run whose thread is paused over its budget.
pub(crate) const BUDGET_PAUSED: &str = "budget_paused";

/// Queues `texts` on the paused `session` and plans the run that says so.
pub(super) async fn paused(
    state: &Arc<AppState>,
    run: Run,
    thread: &str,
    texts: Vec<(String, String)>,
    reached: &BudgetReached,
) -> Result<Plan, ApiError> {
    let session: &Session = &run.session;
    let mut ids = Vec::new();
    for (id, text) in texts {
        match session.send_or_steer(text).await.map_err(steer_error)? {
            Routed::Steered(message) => ids.push(message.to_string()),
            // The limit was raised meanwhile: the message started a turn like any other.
            Routed::Started(turn) => crate::turns::run_turn(state, session.clone(), turn),
        }
        state.threads.accept(thread, &id);
    }
    let budget = crate::budget::paused(session);
    let message = format!(
        "thread '{thread}' is paused over its budget ({reached}); the message was queued and runs once the limit is \
         raised (PUT /api/sessions/{thread}/budget, Raise on the page, or /budget in noetic chat)"
    );
    let routed = json!({ "routed": "paused", "message_ids": ids, "budget": budget });
    Ok(Plan::Short { run, routed, end: End::Error(BUDGET_PAUSED.to_owned(), message) })
}
