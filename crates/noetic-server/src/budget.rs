//! `GET` and `PUT /api/sessions/{key}/budget`: what a session may spend, what it spent, and raising the limit of
//! a session paused over its budget (which then runs the messages that queued meanwhile).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use noetic::agent::Session;
use noetic::budget::Budget;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::open::{session, session_error};
use crate::turns::run_turn;

/// The session's budget as the API shows it: `{"budget": {"session": {...}, "turn": {...}}, "spent": {...},
/// "paused": {"scope", "limit", "allowed", "used"} | null}`.
pub(crate) fn status(session: &Session) -> Value {
    let status = session.budget();
    json!({
        "budget": status.budget,
        "spent": {
            "tokens_in": status.spent.tokens_in,
            "tokens_out": status.spent.tokens_out,
            "cost": status.spent.cost,
            "tool_calls": status.spent.tool_calls,
            "model_calls": status.spent.model_calls,
            "wall_time_ms": u64::try_from(status.spent.wall_time.as_millis()).unwrap_or(u64::MAX),
        },
        "paused": status.paused.as_ref().map(|p| json!({
            "scope": p.scope,
            "limit": p.limit,
            "allowed": p.allowed.to_string(),
            "used": p.used.to_string(),
            "message": p.to_string(),
        })),
    })
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
            body = inline(crate::openapi::bodies::GetBudgetOk),
            content_type = "application/json",
        ),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn get_budget(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
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
    request_body(content = inline(crate::openapi::bodies::PutBudgetRequest), content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "OK",
            body = inline(crate::openapi::bodies::PutBudgetOk),
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
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let budget = Budget::from_json(&body)
        .and_then(|b| b.validate().map(|()| b))
        .map_err(|e| ApiError::bad_request("invalid_budget", e.to_string()))?;
    let session = session(&state, &key).await?;
    let paused = session.budget().paused.is_some() && !state.shutdown.is_cancelled();
    if !paused {
        session.set_budget(budget).await.map_err(|e| session_error(&key, e))?;
        let mut answer = status(&session);
        answer["continued"] = json!(false);
        return Ok(Json(answer));
    }
    let continued = session.raise_budget(budget).await.map_err(|e| session_error(&key, e))?;
    let mut answer = status(&session);
    answer["continued"] = json!(continued.is_some());
    if let Some(turn) = continued {
        answer["turn"] = json!(turn.number());
        run_turn(&state, session, turn);
    }
    Ok(Json(answer))
}
