//! `GET` and `PUT /api/sessions/{key}/budget`: what a session may spend, what it spent, and raising the limit of
//! a session paused over its budget (which then runs the messages that queued meanwhile).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use noetic::agent::Session;
use noetic::budget::Budget;
use serde_json::Value;

use crate::AppState;
use crate::bodies::{BudgetLimits, BudgetView, PausedView, SpentView};
use crate::error::ApiError;
use crate::open::{session, session_error};
use crate::turns::run_turn;

/// The session's budget as the API shows it: `{"budget": {"session": {...}, "turn": {...}}, "spent": {...},
/// "paused": {"scope", "limit", "allowed", "used"} | null}`.
pub(crate) fn status(session: &Session) -> BudgetView {
    let status = session.budget();
    BudgetView {
        budget: status.budget,
        spent: SpentView {
            tokens_in: status.spent.tokens_in,
            tokens_out: status.spent.tokens_out,
            cost: status.spent.cost,
            tool_calls: status.spent.tool_calls,
            model_calls: status.spent.model_calls,
            wall_time_ms: crate::millis::millis_of(status.spent.wall_time),
        },
        paused: status.paused.as_ref().map(|p| PausedView {
            scope: p.scope,
            limit: p.limit,
            allowed: p.allowed.to_string(),
            used: p.used.to_string(),
            message: p.to_string(),
        }),
        continued: None,
        turn: None,
    }
}

/// The limit the session is paused over as JSON (null when it is not), for the AG-UI state and A2A metadata.
pub(crate) fn paused(session: &Session) -> Value {
    serde_json::to_value(status(session).paused).unwrap_or(Value::Null)
}

/// `GET /api/sessions/{key}/budget`.
#[utoipa::path(
    get,
    path = "/api/sessions/{key}/budget",
    summary = "The session's budget, what it spent, and the limit it is paused over",
    params(crate::openapi::common::SessionKey),
    responses(
        (
            status = 200,
            description = "OK",
            body = BudgetView,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn get_budget(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<BudgetView>, ApiError> {
    let session = session(&state, &key).await?;
    Ok(Json(status(&session)))
}

/// `PUT /api/sessions/{key}/budget` `{"session": {...}, "turn": {...}}`: sets the session's budget (it replaces the
/// one it had; a part left out has no limits). A session paused over its budget continues with its queued messages
/// (`"continued": true, "turn": N`). A zero or negative limit, an unknown limit, a bad duration, or (for a paused
/// session) a budget it has spent already is 400 `invalid_budget`.
#[utoipa::path(
    put,
    path = "/api/sessions/{key}/budget",
    summary = "Set the session's budget (it replaces the one it had); a session paused over its budget continues with \
        its queued messages",
    params(crate::openapi::common::SessionKey),
    request_body(content = BudgetLimits, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "OK",
            body = BudgetView,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 408, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn put_budget(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<BudgetView>, ApiError> {
    // Read by the library rather than by the extractor, so a bad limit is `invalid_budget` naming it.
    let Json(body) = body?;
    let budget = Budget::from_json(&body)
        .and_then(|b| b.validate().map(|()| b))
        .map_err(|e| ApiError::bad_request("invalid_budget", e.to_string()))?;
    let session = session(&state, &key).await?;
    let paused = session.budget().paused.is_some() && !state.shutdown.is_cancelled();
    if !paused {
        session.set_budget(budget).await.map_err(|e| session_error(&key, e))?;
        let answer = BudgetView { continued: Some(false), ..status(&session) };
        return Ok(Json(answer));
    }
    let continued = session.raise_budget(budget).await.map_err(|e| session_error(&key, e))?;
    let answer = BudgetView {
        continued: Some(continued.is_some()),
        turn: continued.as_ref().map(|t| t.number()),
        ..status(&session)
    };
    if let Some(turn) = continued {
        run_turn(&state, session, turn);
    }
    Ok(Json(answer))
}
