//! The A2A server (A2A 1.0, JSON-RPC binding): other agents find this agent by its card at
//! `GET /.well-known/agent-card.json` and talk to it at `POST /a2a` with `SendMessage`, `SendStreamingMessage`,
//! `GetTask`, `CancelTask` and `SubscribeToTask`. The endpoint sits behind the same guards as the API (the `Host`
//! check, the cross-site refusal, the access token, the body limit); the card needs no token, and lists the bearer
//! scheme when the server has one.
//!
//! * **A context is a session, a task is a turn.** A message's `contextId` is a session key (a message without
//!   one gets a new session); the task it starts is that session's turn, with the id `KEY:TURN`. Tasks are read
//!   from the session (its turns, its pending approvals, its events), so they are found again after a restart
//!   wherever the session's store keeps it.
//! * **An approval is `TASK_STATE_INPUT_REQUIRED`.** A call that needs approval puts its task in that state; the
//!   status message says which call, with a data part listing the calls (`approvals`: `callId`, `tool`,
//!   `arguments`, `expiresAt`). A message to the task answers: `approve`, `reject: <why>`, or a data part
//!   `{"approved": bool, "reason"?, "callId"?}`. While a task waits, a message that is no answer is refused.
//! * **Steering (our extension, advertised in the card's `capabilities.extensions`).** A message to a working task
//!   — naming its `taskId`, or only its `contextId` — steers it: it reaches the agent at the turn's next checkpoint.
//!   The answer is the task with `metadata.noetic.routed = "steered"` and the queued message's id; A2A lets a client
//!   send a message to a task that is not in a terminal state, so plain A2A clients can steer.
//! * **Streams** (`SendStreamingMessage`, `SubscribeToTask`) start with the `Task`, then send the model's text as
//!   artifact chunks and what happens as `working` status updates with `metadata.noetic.event` (tool calls, tool
//!   progress, skipped calls, steering, approval decisions), and end with the status that stops the task or has it
//!   wait for input. `SendMessage` waits for that status too unless `configuration.returnImmediately` is set.
//! * **Errors** are JSON-RPC errors with A2A's codes (-32001 task not found, -32002 not cancelable, -32602
//!   invalid params, …) and our stable code in `data.code`.

mod card;
mod message;
mod rpc;
mod stream;
mod task;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use noetic::agent::{Routed, Session};
use noetic::tool::Approval;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::AppState;
use crate::error::ApiError;
use crate::open::{check_key, steer_error};
use crate::turns::{resume_for_message, run_turn};
use message::Incoming;
use rpc::{Request, RpcError};
use stream::Follow;
use task::{State as TaskState, TaskId};

/// The URI of the steering extension in the agent card: a message to a working task steers it.
pub const STEERING_EXTENSION: &str = "urn:noetic:a2a:steering:v1";

/// `GET /.well-known/agent-card.json`.
#[utoipa::path(
    get,
    path = "/.well-known/agent-card.json",
    summary = "The A2A agent card",
    description = "A2A 1.0's agent card: the agent's name and description, its JSON-RPC interface (POST /a2a, protocol \
        1.0), its skills, streaming, the steering extension (urn:noetic:a2a:steering:v1: a message to a working task \
        steers it) and, when the server has an access token, the bearer scheme. Needs no token.",
    responses(
        (
            status = 200,
            description = "The agent card",
            body = card::AgentCard,
            content_type = "application/json",
        ),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
    ),
    security(()),
)]
pub(crate) async fn agent_card(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    Json(card::card(&state.config, &headers)).into_response()
}

/// `POST /a2a`: one JSON-RPC request.
#[utoipa::path(
    post,
    path = "/a2a",
    summary = "A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask",
    description = "A context (contextId) is a session key, a task is one of its turns (id SESSION:TURN, read from the \
        session). A message without taskId starts a task when the session is idle and steers the running one when it \
        is busy; a message to a working task steers it (metadata.noetic.routed = steered); a call that needs approval \
        puts the task in TASK_STATE_INPUT_REQUIRED and a message to it answers (approve, reject: <why>, or a data part \
        {approved, reason?, callId?}). SendStreamingMessage and SubscribeToTask answer with server-sent events (each a \
        JSON-RPC response whose result is a StreamResponse: the task, artifact chunks of the model's text, working \
        status updates with metadata.noetic.event, and the final or input-required status). Errors are JSON-RPC errors \
        with A2A's codes and the API's error code in data.code.",
    request_body(content = rpc::RequestSchema, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "A JSON-RPC response, or for the streaming methods the event stream",
            content(
                (rpc::Envelope = "application/json"),
                (String = "text/event-stream"),
            ),
        ),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 413, description = "The body is over the limit (a JSON-RPC error, data.code body_too_large)"),
        (
            status = 415,
            description = "Not JSON by its type: the API's error when the cross-site guard refuses it (no \
                X-Noetic-Request header), a JSON-RPC error (code -32600) when it passed the guard",
            body = rpc::Refused,
        ),
    ),
)]
pub(crate) async fn rpc(State(state): State<Arc<AppState>>, body: Result<Json<Value>, JsonRejection>) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => {
            let e = ApiError::from(rejection);
            if e.status() == StatusCode::BAD_REQUEST {
                return Json(rpc::error(&Value::Null, &RpcError::parse(e.message().to_owned()))).into_response();
            }
            // Too large, too slow or not JSON by its type: the API's HTTP status, with a JSON-RPC error as the body.
            return (e.status(), Json(rpc::error(&Value::Null, &RpcError::refused(&e)))).into_response();
        }
    };
    let request = match Request::parse(body) {
        Ok(request) => request,
        Err((id, e)) => return Json(rpc::error(&id, &e)).into_response(),
    };
    let id = request.id.clone();
    let answered = match request.method.as_str() {
        "SendMessage" => send_message(&state, &request.params).await,
        "SendStreamingMessage" => return send_streaming(&state, &request).await,
        "GetTask" => get_task(&state, &request.params).await,
        "CancelTask" => cancel_task(&state, &request.params).await,
        "SubscribeToTask" => return subscribe(&state, &request).await,
        other => Err(RpcError::method_not_found(other)),
    };
    let envelope = match answered {
        Ok(result) => rpc::result(&id, result),
        Err(e) => rpc::error(&id, &e),
    };
    Json(envelope).into_response()
}

/// What became of a message.
enum Routing {
    /// It started the task.
    Started,
    /// It steered the task (the queued message's id).
    Steered(String),
    /// It decided the approvals the task waited on.
    Decided,
    /// The session is paused over its budget: it was queued (its id), and runs as the next task once the limit is
    /// raised (the limit reached).
    Paused(String, Value),
}

impl Routing {
    fn metadata(&self) -> Value {
        match self {
            Routing::Started => json!({ "routed": "started" }),
            Routing::Steered(id) => json!({ "routed": "steered", "messageId": id, "extension": STEERING_EXTENSION }),
            Routing::Decided => json!({ "routed": "decided" }),
            Routing::Paused(id, budget) => json!({ "routed": "paused", "messageId": id, "budget": budget }),
        }
    }
}

/// A routed message: the task, what became of the message, and where to follow the task from.
struct Sent {
    follow: Follow,
    routing: Routing,
    follower: noetic::EventFollower,
    replayed_to: u64,
    return_immediately: bool,
}

async fn the_session(state: &AppState, key: &str) -> Result<Session, RpcError> {
    if state.shutdown.is_cancelled() {
        return Err(RpcError::internal("shutting_down", "the server is shutting down; try another worker"));
    }
    crate::open::session(state, key).await.map_err(|e| RpcError::from_api(&e))
}

/// Reads a message and starts, steers or answers its task.
async fn route(state: &Arc<AppState>, params: &Value) -> Result<Sent, RpcError> {
    let incoming = Incoming::parse(params, state.config.max_message_chars)?;
    let named = match &incoming.task_id {
        Some(task) => Some(TaskId::parse(task).ok_or_else(|| RpcError::task_not_found(task))?),
        None => None,
    };
    let key = match (&named, &incoming.context_id) {
        (Some(id), Some(context)) if *context != id.key => {
            return Err(RpcError::invalid_params(
                "context_mismatch",
                format!("task '{id}' belongs to context '{}', not '{context}'", id.key),
            ));
        }
        (Some(id), _) => id.key.clone(),
        (None, Some(context)) => {
            check_key(context).map_err(|_| {
                RpcError::invalid_params(
                    "invalid_context_id",
                    format!(
                        "a contextId is 1 to {} characters of A-Z, a-z, 0-9, '-', '_' and '.', and not only dots",
                        crate::open::MAX_KEY_LEN
                    ),
                )
            })?;
            context.clone()
        }
        (None, None) => format!("a2a-{}", uuid::Uuid::now_v7().simple()),
    };
    let session = the_session(state, &key).await?;
    let replayed_to = session.last_event_seq();
    let follower = session.follow(replayed_to);
    let sent = |turn: u64, routing: Routing, follower, session: Session| Sent {
        follow: Follow { state: state.clone(), session, id: TaskId { key: key.clone(), turn } },
        routing,
        follower,
        replayed_to,
        return_immediately: incoming.return_immediately,
    };
    let current = match &named {
        Some(id) => {
            Some(task::view(state, &session, id.turn).await.ok_or_else(|| RpcError::task_not_found(&id.to_string()))?)
        }
        // Only a running turn can be waiting for input (an idle session's last task needs no reading).
        None if session.is_busy() => task::view(state, &session, session.turns()).await,
        None => None,
    };
    match current {
        Some(view) if view.state == TaskState::InputRequired => {
            if named.is_none() {
                return Err(RpcError::invalid_params(
                    "interrupts_pending",
                    format!(
                        "task '{}' waits for approval: answer it first (a message with its taskId saying 'approve' \
                         or 'reject: <why>'); new messages wait until then",
                        view.id
                    ),
                ));
            }
            let decision = incoming.decision()?;
            let chosen: Vec<_> =
                view.waiting.iter().filter(|p| decision.call_id.as_ref().is_none_or(|c| *c == p.call_id)).collect();
            if chosen.is_empty() {
                return Err(RpcError::invalid_params(
                    "no_such_call",
                    format!("task '{}' waits on no call with that callId; see its status's approvals", view.id),
                ));
            }
            for pending in chosen {
                let approval = if decision.approved {
                    Approval::Approve
                } else {
                    Approval::Reject {
                        reason: decision.reason.clone().unwrap_or_else(|| "rejected by the caller".into()),
                    }
                };
                // A call that stopped waiting a moment ago (timed out, decided elsewhere) takes no decision.
                let _ = state.approvals.decide_shown(
                    Some(&key),
                    &pending.call_id,
                    Some(&pending.arguments_sha256),
                    approval,
                );
            }
            Ok(sent(view.id.turn, Routing::Decided, follower, session))
        }
        Some(view) if named.is_some() && view.state.is_terminal() => Err(RpcError::unsupported(
            "task_ended",
            format!(
                "task '{}' is {}: send a message without a taskId (same contextId) to start a new task",
                view.id,
                view.state.wire()
            ),
        )),
        _ => {
            let text = incoming.said()?.to_owned();
            if session.budget().paused.is_some() {
                // Nothing runs over the budget: the message waits as the task the next turn will be.
                return match session.send_or_steer(text).await.map_err(|e| RpcError::from_api(&steer_error(e)))? {
                    Routed::Steered(message) => {
                        let budget = crate::budget::paused(&session);
                        let next = session.turns() + 1;
                        Ok(sent(next, Routing::Paused(message.to_string(), budget), follower, session))
                    }
                    // The limit was raised meanwhile: the message started a turn like any other.
                    Routed::Started(turn) => {
                        let number = turn.number();
                        run_turn(state, session.clone(), turn);
                        Ok(sent(number, Routing::Started, follower, session))
                    }
                };
            }
            let (turn, routing) =
                match session.send_or_steer(text).await.map_err(|e| RpcError::from_api(&steer_error(e)))? {
                    Routed::Started(turn) => {
                        let number = turn.number();
                        run_turn(state, session.clone(), turn);
                        (number, Routing::Started)
                    }
                    Routed::Steered(message) => (session.turns(), Routing::Steered(message.to_string())),
                };
            if session.unfinished_turn().is_some() {
                resume_for_message(state, &session, &key).await;
            }
            Ok(sent(turn, routing, follower, session))
        }
    }
}

/// `SendMessage`: the task once it waits for input or ends (at once for a steering message, or with
/// `returnImmediately`).
async fn send_message(state: &Arc<AppState>, params: &Value) -> Result<Value, RpcError> {
    let sent = route(state, params).await?;
    let metadata = sent.routing.metadata();
    if sent.return_immediately || matches!(sent.routing, Routing::Steered(_) | Routing::Paused(..)) {
        let view = task::view(state, &sent.follow.session, sent.follow.id.turn).await;
        let view = view.ok_or_else(|| RpcError::task_not_found(&sent.follow.id.to_string()))?;
        return Ok(json!({ "task": view.task(Some(metadata)) }));
    }
    let view = sent
        .follow
        .run(sent.follower, sent.replayed_to, None)
        .await
        .ok_or_else(|| RpcError::internal("shutting_down", "the server is shutting down; get the task again"))?;
    Ok(json!({ "task": view.task(Some(metadata)) }))
}

/// The server-sent events of a stream whose results `rx` gives, each in a JSON-RPC envelope for request `id`.
fn sse(id: Value, rx: mpsc::Receiver<Value>) -> Response {
    let events = futures::stream::unfold((rx, id), |(mut rx, id)| async move {
        let result = rx.recv().await?;
        let data = serde_json::to_string(&rpc::result(&id, result)).unwrap_or_default();
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), (rx, id)))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// Streams `follow`'s task: the task as it is, then its updates.
fn stream_task(id: Value, follow: Follow, follower: noetic::EventFollower, replayed_to: u64, first: Value) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(async move {
        if tx.send(json!({ "task": first })).await.is_ok() {
            follow.run(follower, replayed_to, Some(&tx)).await;
        }
    });
    sse(id, rx)
}

/// `SendStreamingMessage`.
async fn send_streaming(state: &Arc<AppState>, request: &Request) -> Response {
    let sent = match route(state, &request.params).await {
        Ok(sent) => sent,
        Err(e) => return Json(rpc::error(&request.id, &e)).into_response(),
    };
    let first = task::view(state, &sent.follow.session, sent.follow.id.turn).await;
    let first = first.map_or_else(
        || json!({ "id": sent.follow.id.to_string(), "contextId": sent.follow.id.key, "status": { "state": "TASK_STATE_WORKING" } }),
        |v| v.task(Some(sent.routing.metadata())),
    );
    if matches!(sent.routing, Routing::Paused(..)) {
        // The stream of a task waiting for its budget is the task: it runs when a person raises the limit.
        let (tx, rx) = mpsc::channel::<Value>(1);
        let _ = tx.try_send(json!({ "task": first }));
        return sse(request.id.clone(), rx);
    }
    stream_task(request.id.clone(), sent.follow, sent.follower, sent.replayed_to, first)
}

/// The task `params.id` names, and its session.
async fn named_task(state: &Arc<AppState>, params: &Value) -> Result<(Session, task::View), RpcError> {
    let raw = params.get("id").and_then(Value::as_str).ok_or_else(|| {
        RpcError::invalid_params("missing_task_id", "name the task: params.id (the task's id, SESSION:TURN)")
    })?;
    let id = TaskId::parse(raw).ok_or_else(|| RpcError::task_not_found(raw))?;
    let session = the_session(state, &id.key).await?;
    let view = task::view(state, &session, id.turn).await.ok_or_else(|| RpcError::task_not_found(raw))?;
    Ok((session, view))
}

/// `GetTask`.
async fn get_task(state: &Arc<AppState>, params: &Value) -> Result<Value, RpcError> {
    let (_, view) = named_task(state, params).await?;
    Ok(view.task(None))
}

/// `CancelTask`: stops the turn and answers once it ended.
async fn cancel_task(state: &Arc<AppState>, params: &Value) -> Result<Value, RpcError> {
    let (session, view) = named_task(state, params).await?;
    if view.state.is_terminal() {
        return Err(RpcError::not_cancelable(&view.id.to_string(), view.state.wire()));
    }
    if view.state == TaskState::Submitted {
        // Messages queued over the budget: dropping them cancels the task they would have run as.
        session.stop("canceled by the A2A client").await;
        let note = Some("canceled by the A2A client: the queued messages were dropped".to_owned());
        return Ok(task::View { state: TaskState::Canceled, note, ..view }.task(None));
    }
    let replayed_to = session.last_event_seq();
    let follower = session.follow(replayed_to);
    session.stop("canceled by the A2A client").await;
    let follow = Follow { state: state.clone(), session, id: view.id };
    let ended = follow.run(follower, replayed_to, None).await;
    let ended =
        ended.ok_or_else(|| RpcError::internal("shutting_down", "the server is shutting down; get the task again"))?;
    Ok(ended.task(None))
}

/// `SubscribeToTask`: the stream of a task that has not ended.
async fn subscribe(state: &Arc<AppState>, request: &Request) -> Response {
    let (session, view) = match named_task(state, &request.params).await {
        Ok(found) => found,
        Err(e) => return Json(rpc::error(&request.id, &e)).into_response(),
    };
    if view.state.is_terminal() {
        let e = RpcError::unsupported(
            "task_ended",
            format!("task '{}' is {}: there is nothing to subscribe to; GetTask reads it", view.id, view.state.wire()),
        );
        return Json(rpc::error(&request.id, &e)).into_response();
    }
    let first = view.task(None);
    if matches!(view.state, TaskState::InputRequired | TaskState::Submitted) {
        // The stream of a task waiting for input is the task: it goes on when the input comes.
        let (tx, rx) = mpsc::channel::<Value>(1);
        let _ = tx.try_send(json!({ "task": first }));
        return sse(request.id.clone(), rx);
    }
    let replayed_to = session.last_event_seq();
    let follower = session.follow(replayed_to);
    let follow = Follow { state: state.clone(), session, id: view.id };
    stream_task(request.id.clone(), follow, follower, replayed_to, first)
}
