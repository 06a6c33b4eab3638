//! `PATCH /api/sessions/{key}` `{"title": "…"}`: renames a session (its key stays its key). A title is untrusted
//! text: the library checks it ([`noetic::agent::check_title`]) and the page shows it as text.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;
use crate::open::{check_key, session, session_error};
use crate::sessions::{store, unavailable};

/// `PATCH /api/sessions/{key}`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RenameRequest)]
pub(crate) struct RenameBody {
    /// The new title, trimmed; 1 to 120 characters, no control characters.
    #[schema(max_length = 120)]
    title: String,
}

/// The renamed session.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenameOk {
    key: String,
    /// The title as kept (trimmed).
    #[schema(required = true)]
    title: Option<String>,
}

/// Sets the session's title; 404 for a session the store does not hold (a rename creates nothing), 400
/// `invalid_title` for a body without a string `title` or a title the library refuses. Allowed while a turn runs.
#[utoipa::path(
    patch,
    path = "/api/sessions/{key}",
    summary = "Rename a session: give it a title (its key stays its key); allowed while a turn runs",
    description = "The title is trimmed; an empty one, one longer than 120 characters or one holding control \
        characters (line breaks, escapes) is 400 'invalid_title'. 404 'no_such_session' for a session the store does \
        not hold.",
    params(crate::openapi::common::SessionKey),
    request_body(content = RenameBody, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "Renamed",
            body = RenameOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 404, response = crate::openapi::common::ApiErrorResponse),
        (status = 413, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn rename(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<RenameOk>, ApiError> {
    let Json(body) = body?;
    check_key(&key)?;
    // Read here rather than by the extractor, so a body of another shape is `invalid_title`, not `invalid_json`.
    let Ok(RenameBody { title }) = serde_json::from_value(body) else {
        return Err(ApiError::bad_request("invalid_title", r#"send the new title as a string: {"title": "…"}"#));
    };
    let store = store(&state)?.clone();
    if store.last(&key).await.map_err(unavailable)? == 0 {
        return Err(ApiError::not_found("no_such_session", format!("there is no session '{key}' to rename")));
    }
    let session = session(&state, &key).await?;
    session.set_title(&title).await.map_err(|e| session_error(&key, e))?;
    Ok(Json(RenameOk { title: session.title(), key }))
}
