//! The JSON API's handlers (each route's OpenAPI operation is its `#[utoipa::path]` annotation, see `openapi.rs`).
//!
//! Over 500 lines because each handler carries its operation's annotation (about a third of the file): the document
//! is generated from them, so they stay beside the code they describe.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use noetic::agent::{Routed, Session, SessionError, SteeringMode, Turn};
use noetic::context::{Event, EventKind, Followed};
use noetic::tool::Approval;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::AppState;
use crate::approvals::DecideError;
use crate::bodies::{
    ContinueSessionOk, DecideOk, GetLedgerOk, GetSessionOk, Health, HealthOk, ListApprovalsOk, QueuedMessage,
    Readiness, ReadyOk, ResumeOk, SetModeOk, StopOk,
};
use crate::error::ApiError;
use crate::open::{session, session_error, shutting_down, steer_error};
use crate::sessions::store;
use crate::turns::{resume_for_message, run_turn};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageBody {
    #[schema(min_length = 1)]
    text: String,
}

/// What became of a message (`routed`).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(tag = "routed", rename_all = "snake_case", deny_unknown_fields)]
#[schema(as = PostMessage202)]
pub(crate) enum Routing {
    /// The session was idle: this message started turn `turn`.
    Started { turn: u64 },
    /// A turn was running: the message was queued for it.
    Steered { message_id: String, turn: u64 },
    /// The session is paused over its budget: the message was queued, and runs once the limit is raised.
    Paused {
        message_id: String,
        /// Why the message waits: the session is paused over its budget until the limit is raised.
        message: String,
    },
}

/// `POST /api/sessions/{key}/messages`: starts a turn or steers the running one, decided atomically.
#[utoipa::path(
    post,
    path = "/api/sessions/{key}/messages",
    summary = "Send a message: starts a turn when the session is idle, steers the running turn when busy (decided \
        atomically)",
    params(crate::openapi::common::SessionKey),
    request_body(content = MessageBody, content_type = "application/json"),
    responses(
        (
            status = 202,
            description = "Accepted",
            body = Routing,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 408, response = crate::openapi::common::ApiErrorResponse),
        (status = 413, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 429, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn post_message(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Result<Json<MessageBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let session = session(&state, &key).await?;
    if body.text.chars().count() > state.config.max_message_chars {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "message_too_long",
            format!("a message may have at most {} characters; send a shorter one", state.config.max_message_chars),
        ));
    }
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request("empty_message", "the message is empty; send some text"));
    }
    if state.shutdown.is_cancelled() {
        return Err(shutting_down());
    }
    let routing = match session.send_or_steer(body.text).await.map_err(steer_error)? {
        Routed::Started(turn) => {
            let number = turn.number();
            run_turn(&state, session, turn);
            Routing::Started { turn: number }
        }
        Routed::Steered(id) if session.budget().paused.is_some() => {
            let reached = session.budget().paused.map(|p| p.to_string()).unwrap_or_default();
            let message = format!(
                "the session is paused over its budget ({reached}); the message was queued and runs once the limit is \
                 raised (PUT /api/sessions/{key}/budget)"
            );
            Routing::Paused { message_id: id.to_string(), message }
        }
        Routed::Steered(id) => {
            let message_id = id.to_string();
            // A turn a stopped process left waits for whoever takes the session over: this worker does, now, and
            // the message reaches it at its first checkpoint.
            if session.unfinished_turn().is_some() {
                resume_for_message(&state, &session, &key).await;
            }
            Routing::Steered { message_id, turn: session.turns() }
        }
    };
    Ok((StatusCode::ACCEPTED, Json(routing)).into_response())
}

/// `GET /api/sessions/{key}`: the conversation, its queue and whether a turn runs (here or on another worker) or
/// was left unfinished, as the session's log says (what other workers append reaches this worker's copy as they
/// append it).
#[utoipa::path(
    get,
    path = "/api/sessions/{key}",
    summary = "Read a session: history, queued messages, busy, unfinished turn, pending approvals",
    params(crate::openapi::common::SessionKey),
    responses(
        (
            status = 200,
            description = "OK",
            body = GetSessionOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn get_session(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<GetSessionOk>, ApiError> {
    let session = session(&state, &key).await?;
    let running_on = match session.is_busy() {
        true => None,
        false => session.running_elsewhere().await,
    };
    let pending_approvals = state.approvals.listed(Some(&key)).await;
    Ok(Json(GetSessionOk {
        title: session.title(),
        busy: session.is_busy() || running_on.is_some(),
        turns: session.turns(),
        steering_mode: session.steering_mode().as_str(),
        steering_capacity: session.steering_capacity(),
        queued: session.queued_messages().into_iter().map(QueuedMessage::from).collect(),
        // A turn running on another worker is not a turn left behind.
        unfinished_turn: session.unfinished_turn().filter(|_| running_on.is_none()),
        running_on,
        last_event_seq: session.last_event_seq(),
        pending_approvals,
        budget: crate::budget::status(&session),
        history: session.history(),
        key,
    }))
}

/// `GET /api/sessions/{key}/ledger`: the steering decisions, oldest first.
#[utoipa::path(
    get,
    path = "/api/sessions/{key}/ledger",
    summary = "The session's steering ledger, oldest first",
    params(crate::openapi::common::SessionKey),
    responses(
        (
            status = 200,
            description = "OK",
            body = GetLedgerOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 501, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn get_ledger(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<GetLedgerOk>, ApiError> {
    store(&state)?;
    let entries = session(&state, &key).await?.ledger();
    Ok(Json(GetLedgerOk { key, entries }))
}

/// `POST /api/sessions/{key}/stop`: clears the queue and cancels the running turn.
#[utoipa::path(
    post,
    path = "/api/sessions/{key}/stop",
    summary = "Stop: clear the queue and cancel the running turn",
    params(
        crate::openapi::common::SessionKey,
        crate::openapi::common::RequestHeader,
    ),
    responses(
        (
            status = 200,
            description = "OK",
            body = StopOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn stop(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<StopOk>, ApiError> {
    let session = session(&state, &key).await?;
    let (cleared, cancelled) = session.stop("stopped through the API").await;
    Ok(Json(StopOk { cleared, cancelled }))
}

/// `POST /api/sessions/{key}/continue`: an idle session with queued messages starts a turn with them.
#[utoipa::path(
    post,
    path = "/api/sessions/{key}/continue",
    summary = "Start a turn with the queued messages of an idle session",
    params(
        crate::openapi::common::SessionKey,
        crate::openapi::common::RequestHeader,
    ),
    responses(
        (
            status = 200,
            description = "OK",
            body = ContinueSessionOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn continue_session(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<ContinueSessionOk>, ApiError> {
    let session = startable(&state, &key).await?;
    let started = session.continue_session().await;
    let turn = start_with(&state, &key, session, started)?;
    Ok(Json(ContinueSessionOk { started: turn.is_some(), turn }))
}

/// `POST /api/sessions/{key}/resume`: finishes the turn a stopped process left unfinished.
#[utoipa::path(
    post,
    path = "/api/sessions/{key}/resume",
    summary = "Finish the turn a stopped process left unfinished",
    params(
        crate::openapi::common::SessionKey,
        crate::openapi::common::RequestHeader,
    ),
    responses(
        (
            status = 200,
            description = "OK",
            body = ResumeOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn resume(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<ResumeOk>, ApiError> {
    let session = startable(&state, &key).await?;
    let started = session.resume().await;
    let turn = start_with(&state, &key, session, started)?;
    Ok(Json(ResumeOk { resumed: turn.is_some(), turn }))
}

/// The session `key`, when the server still starts turns.
async fn startable(state: &AppState, key: &str) -> Result<Session, ApiError> {
    let session = session(state, key).await?;
    if state.shutdown.is_cancelled() {
        return Err(shutting_down());
    }
    Ok(session)
}

/// Runs the turn `started` gave (if any) and answers with its number.
fn start_with(
    state: &AppState,
    key: &str,
    session: Session,
    started: Result<Option<Turn>, SessionError>,
) -> Result<Option<u64>, ApiError> {
    let Some(turn) = started.map_err(|e| session_error(key, e))? else { return Ok(None) };
    let number = turn.number();
    run_turn(state, session, turn);
    Ok(Some(number))
}

/// `PUT /api/sessions/{key}/mode`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SetModeRequest)]
pub(crate) struct ModeBody {
    /// Read in any case, surrounding spaces ignored.
    #[schema(value_type = crate::bodies::SteeringModeName)]
    mode: String,
}

/// `PUT /api/sessions/{key}/mode`: how many queued messages a checkpoint takes.
#[utoipa::path(
    put,
    path = "/api/sessions/{key}/mode",
    summary = "Set the session's steering mode",
    params(crate::openapi::common::SessionKey),
    request_body(content = ModeBody, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "OK",
            body = SetModeOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 408, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn set_mode(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Result<Json<ModeBody>, JsonRejection>,
) -> Result<Json<SetModeOk>, ApiError> {
    let Json(body) = body?;
    let session = session(&state, &key).await?;
    let mode = SteeringMode::parse(&body.mode).map_err(|e| ApiError::bad_request("invalid_mode", e.to_string()))?;
    session.set_steering_mode(mode).await;
    Ok(Json(SetModeOk { mode: mode.as_str() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    after: Option<u64>,
    #[allow(dead_code)]
    access_token: Option<String>,
}

/// `GET /api/sessions/{key}/events`: server-sent events from after `?after=` or the `Last-Event-ID` header (the
/// oldest the log holds when neither is given), then live ones. Each event's SSE id is its sequence number; events
/// the log no longer holds arrive as one `gap` event.
#[utoipa::path(
    get,
    path = "/api/sessions/{key}/events",
    summary = "Follow the session's events as server-sent events",
    params(
        crate::openapi::common::SessionKey,
        ("after" = Option<u64>, Query, description = "start after this event number (a Last-Event-ID header wins)"),
        ("Last-Event-ID" = Option<String>, Header),
    ),
    responses(
        (
            status = 200,
            description = "text/event-stream; each event's id is its sequence number, its data the event as JSON \
                (field 'type'); events the log no longer holds arrive as one event named 'gap' with {from, to}. An \
                event that carries an error (turn_failed, step_failed, steering_denied, retry_scheduled, \
                loop_iteration_error, every_iteration_error) also has 'error_text': the error as one readable sentence",
            body = String,
            content_type = "text/event-stream",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(query) = query?;
    let session = session(&state, &key).await?;
    let from_header =
        match headers.get("last-event-id") {
            Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
                ApiError::bad_request("invalid_last_event_id", "Last-Event-ID must be an event number")
            })?),
            None => None,
        };
    // A reconnecting EventSource repeats its first URL and adds the header: the header is the newer position.
    let after = from_header.or(query.after).unwrap_or(0);
    let follower = session.follow(after);
    let shutdown = state.shutdown.clone();
    let stream = futures::stream::unfold((follower, shutdown), |(mut follower, shutdown)| async move {
        let next = tokio::select! {
            biased;
            () = shutdown.cancelled() => None,
            next = follower.next() => next,
        };
        let event = match next? {
            Followed::Event(event) => SseEvent::default().id(event.seq.to_string()).data(event_json(&event)),
            Followed::Gap { from, to } => SseEvent::default()
                .event("gap")
                .id(to.to_string())
                .data(json!({ "type": "gap", "from": from, "to": to }).to_string()),
        };
        Some((Ok(event), (follower, shutdown)))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// An event as JSON; one that carries an error also gets `error_text`, the error as one readable sentence (its
/// chain of causes), so a client need not know every error's fields to say what went wrong.
fn event_json(event: &Event) -> String {
    let error = match &event.kind {
        EventKind::TurnFailed { error, .. }
        | EventKind::StepFailed { error, .. }
        | EventKind::RetryScheduled { error, .. }
        | EventKind::EveryIterationError { error, .. }
        | EventKind::LoopIterationError { error, .. }
        | EventKind::SteeringDenied { error, .. } => Some(error.to_string()),
        _ => None,
    };
    let mut value = match serde_json::to_value(event) {
        Ok(value) => value,
        Err(e) => return json!({ "type": "unserialisable", "seq": event.seq, "error": e.to_string() }).to_string(),
    };
    if let (Some(text), Value::Object(fields)) = (error, &mut value) {
        fields.insert("error_text".into(), Value::String(text));
    }
    value.to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsQuery {
    session: Option<String>,
}

/// `GET /api/approvals`: calls waiting for a decision (only `?session=`'s when given).
#[utoipa::path(
    get,
    path = "/api/approvals",
    summary = "Calls waiting for approval",
    params(("session" = Option<String>, Query)),
    responses(
        (
            status = 200,
            description = "OK",
            body = ListApprovalsOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn list_approvals(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ApprovalsQuery>, QueryRejection>,
) -> Result<Json<ListApprovalsOk>, ApiError> {
    let Query(query) = query?;
    Ok(Json(ListApprovalsOk { approvals: state.approvals.listed(query.session.as_deref()).await }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    approve: bool,
    reason: Option<String>,
    /// Needed when calls of several sessions wait under this call id (409 ambiguous_call_id otherwise).
    session: Option<String>,
    /// The arguments_sha256 of the call as listed: when the call now waiting under this id has other arguments,
    /// nothing is decided (409 arguments_changed).
    arguments_sha256: Option<String>,
}

/// `POST /api/approvals/{call_id}`: approves or rejects a waiting call.
#[utoipa::path(
    post,
    path = "/api/approvals/{call_id}",
    summary = "Approve or reject a waiting call",
    params(("call_id" = String, Path)),
    request_body(content = DecisionBody, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "OK",
            body = DecideOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 404, response = crate::openapi::common::ApiErrorResponse),
        (status = 408, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    Path(call_id): Path<String>,
    body: Result<Json<DecisionBody>, JsonRejection>,
) -> Result<Json<DecideOk>, ApiError> {
    let Json(body) = body?;
    let approval = if body.approve {
        Approval::Approve
    } else {
        let reason = body.reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| "rejected by the user".into());
        Approval::Reject { reason }
    };
    let shown = body.arguments_sha256.as_deref();
    match state.approvals.decide_shown(body.session.as_deref(), &call_id, shown, approval) {
        Ok(pending) => {
            Ok(Json(DecideOk { call_id: pending.call_id, session: pending.session, approved: body.approve }))
        }
        Err(DecideError::NotWaiting) => Err(ApiError::not_found(
            "no_such_approval",
            "no call with this id waits for a decision (it was decided, timed out or its turn ended)",
        )),
        Err(DecideError::Ambiguous) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "ambiguous_call_id",
            "calls of several sessions wait under this call id; add \"session\" to the body",
        )),
        Err(DecideError::ArgumentsChanged) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "arguments_changed",
            "the call waiting under this id has other arguments than the ones you decided on, so nothing was \
             decided; list the approvals again and decide on what is shown now",
        )),
    }
}

/// `GET /healthz`: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    summary = "Liveness",
    responses(
        (
            status = 200,
            description = "OK",
            body = HealthOk,
            content_type = "application/json",
        ),
    ),
    security(()),
)]
pub(crate) async fn health() -> Json<HealthOk> {
    Json(HealthOk { status: Health::Ok })
}

/// `GET /readyz`: the server takes work (not shutting down, and its store answers).
#[utoipa::path(
    get,
    path = "/readyz",
    summary = "Readiness: not shutting down and the store answers",
    responses(
        (
            status = 200,
            description = "OK",
            body = ReadyOk,
            content_type = "application/json",
        ),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
    security(()),
)]
pub(crate) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if state.shutdown.is_cancelled() {
        return shutting_down().into_response();
    }
    if let Some(store) = state.runtime.log_store()
        && let Err(e) = store.list().await
    {
        return crate::sessions::unavailable(e).into_response();
    }
    Json(ReadyOk { status: Readiness::Ready }).into_response()
}

/// Any other route.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no_such_route", "no such route; GET /openapi.json lists the API")
}
