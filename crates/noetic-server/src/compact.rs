//! `POST /api/sessions/{key}/compact`: compacts an idle session's conversation now (SPEC 8.2).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::error::ApiError;
use crate::open::session;

/// The optional body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompactBody {
    /// The model id that writes the summary (default: the runtime's).
    model: Option<String>,
}

/// What a compaction did: `compacted` alone when there was nothing to fold.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompactOk {
    compacted: bool,
    /// Messages folded by this compaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    folded: Option<usize>,
    /// Messages no longer sent (all compactions so far).
    #[serde(skip_serializing_if = "Option::is_none")]
    upto: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_before: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_after: Option<u64>,
}

/// Everything before the session's last turn is replaced, in what later requests send, by a summary the model
/// writes; the conversation and the log keep every item. Answers `{"compacted": true, "folded", "upto",
/// "tokens_before", "tokens_after"}`, or `{"compacted": false}` when there was nothing to fold; 409 while a turn
/// runs.
#[utoipa::path(
    post,
    path = "/api/sessions/{key}/compact",
    summary = "Compact the conversation now: the turns before the last one are replaced, in what later requests send, \
        by a summary the model writes (the conversation and the log keep every item)",
    params(
        crate::openapi::common::SessionKey,
        crate::openapi::common::RequestHeader,
    ),
    request_body(content = CompactBody, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "OK",
            body = CompactOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 502, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn compact(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Option<Json<CompactBody>>,
) -> Result<Json<CompactOk>, ApiError> {
    let session = session(&state, &key).await?;
    if session.is_busy() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            format!("session '{key}' is busy with a turn; compact it when the turn ends"),
        ));
    }
    let model = body.and_then(|Json(b)| b.model).unwrap_or_else(|| state.runtime.model_id().to_owned());
    match session.compact(&model).await {
        Ok(Some(done)) => Ok(Json(CompactOk {
            compacted: true,
            folded: Some(done.folded),
            upto: Some(done.upto),
            tokens_before: Some(done.tokens_before),
            tokens_after: Some(done.tokens_after),
        })),
        Ok(None) => {
            Ok(Json(CompactOk { compacted: false, folded: None, upto: None, tokens_before: None, tokens_after: None }))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "compaction_failed",
            format!("session '{key}' could not be compacted: {e}"),
        )),
    }
}
