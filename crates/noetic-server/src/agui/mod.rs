//! The AG-UI endpoint: `POST /ag-ui/{agent}` takes AG-UI's `RunAgentInput` and answers with the AG-UI event
//! stream (server-sent events, one JSON event per `data:` line), so AG-UI front-ends (CopilotKit, `@ag-ui/client`'s
//! `HttpAgent`) talk to the agent, watch it and steer it. It sits behind the same guards as the API: the `Host`
//! check, the cross-site refusal, the access token and the body limit.
//!
//! * **Threads are sessions.** A `threadId` is a session key (same grammar). The server keeps the conversation,
//!   so of `messages` it takes only the user messages at the end that the thread has not taken before (by id):
//!   sending the same input twice says nothing twice.
//! * **A run streams a turn**: `RUN_STARTED`, the model's text (`TEXT_MESSAGE_*`), tool calls (`TOOL_CALL_*`, with
//!   `TOOL_CALL_RESULT`), a `STATE_SNAPSHOT` of what the page shows (`busy`, `queued`, `pending_approvals`,
//!   `paused`, …) first, then its changes as `STATE_DELTA` (JSON Patch) where that is smaller than a snapshot,
//!   `CUSTOM` events named `noetic.*` for steering decisions, queued and injected messages and skipped calls, and
//!   `RUN_FINISHED` (outcome `cancelled` for a stopped turn) or `RUN_ERROR` whose `code` is our error kind.
//! * **Approvals are interrupts.** A call that needs approval ends the run with the `interrupt` outcome (reason
//!   `tool_approval`, the call's `toolCallId`, an answer schema `{"approved": bool, "reason"?: string}`). The turn
//!   waits; a run whose `resume` answers every open interrupt decides them and streams the rest of the turn. While
//!   interrupts are open, a run with a new message gets `RUN_ERROR` `interrupts_pending`; answering an interrupt
//!   again is a no-op.
//! * **A new message while the thread's turn runs** follows the [`BusyPolicy`] (`noetic serve --agui-busy`):
//!   it steers the turn by default. Every run says what became of its input in the `X-Noetic-Routed` header and
//!   in its first `CUSTOM` event, `noetic.run_routed`: `started`, `steered`, `queued`, `restarted`, `attached` (no
//!   new message: the run streams the running turn) or `idle`.
//! * **A thread paused over its budget** queues a run's messages and ends the run with `RUN_ERROR`
//!   `budget_paused`, after `noetic.run_routed` `paused` naming the limit (see [`budget`]).
//! * **Errors in the input** (not a `RunAgentInput`, a bad `threadId`, an empty or too long message, a resume
//!   without an answer) are a stream with one `RUN_ERROR` whose `code` is the API's error code; a missing token,
//!   a foreign `Host` or a cross-site request are refused with the API's HTTP errors before any run.

mod budget;
mod input;
mod patch;
pub(crate) mod policy;
mod stream;
mod threads;
mod translate;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use noetic::agent::{Routed, Session};
use noetic::tool::Approval;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use policy::BusyPolicy;
pub(crate) use threads::Threads;

use crate::AppState;
use crate::error::ApiError;
use crate::open::{check_key, steer_error};
use crate::turns::{resume_for_message, run_turn};
use input::{Answer, RunInput};
use stream::{End, Run, Tx, waiting};
use translate::custom;

/// The header that says what became of a run's input (`started`, `steered`, `queued`, `restarted`, `attached`,
/// `idle`).
pub const ROUTED_HEADER: &str = "x-noetic-routed";

/// What a run does after its input was taken.
enum Plan {
    /// One `RUN_ERROR`.
    Error(ApiError),
    /// `RUN_STARTED`, `noetic.run_routed`, a snapshot and the end.
    Short { run: Run, routed: Value, end: End },
    /// `RUN_STARTED`, `noetic.run_routed`, then the session's events from `follower`.
    Stream { run: Run, routed: Value, follower: noetic::EventFollower, replayed_to: u64 },
    /// `RUN_STARTED`, `noetic.run_routed`, then the turn a follow-up message starts once the thread is idle.
    Queued { run: Run, routed: Value, started: tokio::sync::oneshot::Receiver<Result<Started, ApiError>> },
}

/// A turn a run's messages started (or steered), and where to follow it from.
struct Started {
    follower: noetic::EventFollower,
    replayed_to: u64,
    routed: &'static str,
}

/// `POST /ag-ui/{agent}`: one AG-UI run.
#[utoipa::path(
    post,
    path = "/ag-ui/{agent}",
    summary = "An AG-UI run: RunAgentInput in, the AG-UI event stream out",
    description = "Takes AG-UI's RunAgentInput (threadId is a session key; the user messages at the end of messages \
        not taken before are the new input; resume answers interrupts) and answers with AG-UI events as server-sent \
        events: RUN_STARTED, a CUSTOM noetic.run_routed saying what became of the input (started, steered, queued, \
        restarted, attached, idle; also in the X-Noetic-Routed header), STATE_SNAPSHOTs (busy, queued, \
        pending_approvals), TEXT_MESSAGE_*, TOOL_CALL_*, CUSTOM noetic.* events for steering decisions, queued and \
        injected messages, skipped calls and approval decisions, then RUN_FINISHED (outcome interrupt when a call \
        waits for approval: answer it with resume [{interruptId, status: resolved, payload: {approved, reason?}}]; \
        cancelled for a stopped turn) or RUN_ERROR (code: our error kind, or the API's error code for a bad input). A \
        new message while the thread's turn runs steers it, or follows the server's --agui-busy policy.",
    params(
        (
            "agent" = String,
            Path,
            description = "the agent's name (the workflow file's stem, chat for the chat agent) or default",
        ),
    ),
    request_body(content = input::RunInput, content_type = "application/json"),
    responses(
        (
            status = 200,
            description = "The AG-UI event stream (a bad input is one RUN_ERROR event)",
            body = String,
            content_type = "text/event-stream",
        ),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 404, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn run(
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> Response {
    if agent != "default" && agent != state.config.agent_name {
        return ApiError::not_found(
            "no_such_agent",
            format!(
                "this server's agent is '{}' (or 'default'): POST /ag-ui/{}",
                state.config.agent_name, state.config.agent_name
            ),
        )
        .into_response();
    }
    let plan = match body.map_err(ApiError::from).and_then(|Json(body)| RunInput::parse(body)) {
        Ok(input) => plan(&state, input).await.unwrap_or_else(Plan::Error),
        Err(e) => Plan::Error(e),
    };
    let routed = match &plan {
        Plan::Error(_) => "rejected".to_owned(),
        Plan::Short { routed, .. } | Plan::Stream { routed, .. } | Plan::Queued { routed, .. } => {
            routed["routed"].as_str().unwrap_or_default().to_owned()
        }
    };
    let (tx, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(drive(plan, tx));
    let events = futures::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(event.to_string())), rx))
    });
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response();
    if let Ok(value) = HeaderValue::from_str(&routed) {
        response.headers_mut().insert(HeaderName::from_static(ROUTED_HEADER), value);
    }
    response
}

/// Sends a run's events as its plan says.
async fn drive(plan: Plan, tx: Tx) {
    let (run, routed, end) = match plan {
        Plan::Error(e) => {
            let _ = tx
                .send(translate::agui_event(
                    "RUN_ERROR",
                    SystemTime::now(),
                    json!({ "code": e.code(), "message": e.message() }),
                ))
                .await;
            return;
        }
        Plan::Short { run, routed, end } => (run, routed, Some(end)),
        Plan::Stream { run, routed, follower, replayed_to } => {
            if !opened(&run, routed, &tx).await {
                return;
            }
            let end = run.follow(follower, replayed_to, &tx).await;
            finish(&run, end, &tx).await;
            return;
        }
        Plan::Queued { run, routed, started } => {
            if !opened(&run, routed, &tx).await {
                return;
            }
            let end = match started.await {
                Ok(Ok(started)) => {
                    let note =
                        custom("run_routed", SystemTime::now(), json!({ "routed": started.routed, "after": "queued" }));
                    if tx.send(note).await.is_err() {
                        return;
                    }
                    run.follow(started.follower, started.replayed_to, &tx).await
                }
                Ok(Err(e)) => End::Error(e.code().to_owned(), e.message().to_owned()),
                Err(_) => End::Error("shutting_down".into(), "the server stopped before the queued message ran".into()),
            };
            finish(&run, end, &tx).await;
            return;
        }
    };
    if opened(&run, routed, &tx).await
        && let Some(end) = end
    {
        finish(&run, end, &tx).await;
    }
}

/// `RUN_STARTED`, `noetic.run_routed` and a snapshot; false when the client went away.
async fn opened(run: &Run, routed: Value, tx: &Tx) -> bool {
    tx.send(run.started()).await.is_ok()
        && tx.send(custom("run_routed", SystemTime::now(), routed)).await.is_ok()
        && tx.send(run.snapshot().await).await.is_ok()
}

/// The last snapshot and the event that ends the run.
async fn finish(run: &Run, end: End, tx: &Tx) {
    if matches!(end, End::Gone) {
        return;
    }
    if matches!(end, End::Finished(_))
        && let Some(update) = run.state_update().await
        && tx.send(update).await.is_err()
    {
        return;
    }
    if let Some(event) = run.end_event(&end) {
        let _ = tx.send(event).await;
    }
}

/// Takes a run's input: decides its resume entries, routes its new messages, and says what the run streams.
async fn plan(state: &Arc<AppState>, input: RunInput) -> Result<Plan, ApiError> {
    check_key(&input.thread_id).map_err(|_| {
        ApiError::bad_request(
            "invalid_thread_id",
            format!(
                "a threadId is 1 to {} characters of A-Z, a-z, 0-9, '-', '_' and '.', and not only dots",
                crate::open::MAX_KEY_LEN
            ),
        )
    })?;
    if state.shutdown.is_cancelled() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down; try another worker",
        ));
    }
    let thread = input.thread_id.clone();
    let session = crate::open::session(state, &thread).await?;
    let texts = input.new_user_texts(|id| state.threads.accepted(&thread, id), state.config.max_message_chars)?;
    let run = Run::new(state.clone(), session.clone(), thread.clone(), input.run_id.clone());

    // Interrupts: every open one must be answered before new input; an answer to one that was open is a no-op.
    let open = waiting(state, &session);
    let mut decisions = Vec::new();
    for entry in &input.resume {
        let answer = entry.answer()?;
        match open.iter().find(|(id, _)| *id == entry.interrupt_id) {
            Some((_, pending)) => decisions.push((pending.clone(), answer)),
            None if state.threads.issued(&thread, &entry.interrupt_id) => {}
            None => {
                return Err(ApiError::bad_request(
                    "unknown_interrupt",
                    format!(
                        "thread '{thread}' was never given interrupt '{}'; answer the interrupts of the run that ended \
                         with them",
                        entry.interrupt_id.escape_debug()
                    ),
                ));
            }
        }
    }
    let unanswered: Vec<&str> = open
        .iter()
        .filter(|(id, _)| !input.resume.iter().any(|e| e.interrupt_id == *id))
        .map(|(id, _)| id.as_str())
        .collect();
    if !unanswered.is_empty() {
        if texts.is_empty() && input.resume.is_empty() {
            // A run with nothing to say is told what the thread waits for.
            let end = run.interrupted(None);
            return Ok(Plan::Short { run, routed: json!({ "routed": "idle" }), end });
        }
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "interrupts_pending",
            format!(
                "thread '{thread}' waits for answers to interrupts {}: send a run whose resume answers every one \
                 of them (new messages wait until then)",
                unanswered.join(", ")
            ),
        ));
    }
    if !texts.is_empty()
        && let Some(reached) = session.budget().paused
    {
        return budget::paused(state, run, &thread, texts, &reached).await;
    }
    let busy = session.is_busy();
    if busy && !texts.is_empty() && state.config.agui_busy == BusyPolicy::Reject {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "thread_busy",
            format!(
                "thread '{thread}' is running a turn and this server rejects new runs meanwhile (--agui-busy reject); try again when it ends"
            ),
        ));
    }
    let replayed_to = session.last_event_seq();
    let cursor = match state.threads.cursor(&thread) {
        0 => replayed_to,
        cursor => cursor,
    };
    // The follower starts before the decisions, so the run sees what they cause.
    let attach = session.follow(cursor);
    for (pending, answer) in decisions {
        let approval = match answer {
            Answer::Approve => Approval::Approve,
            Answer::Reject(reason) => Approval::Reject { reason },
        };
        // A call that stopped waiting a moment ago (timed out, decided on the page) takes no decision.
        let _ =
            state.approvals.decide_shown(Some(&thread), &pending.call_id, Some(&pending.arguments_sha256), approval);
    }
    let resumed = !input.resume.is_empty();
    if texts.is_empty() {
        // A resume makes an idle thread no busier: only a running turn is streamed.
        if session.is_busy() {
            return Ok(Plan::Stream { run, routed: json!({ "routed": "attached" }), follower: attach, replayed_to });
        }
        return Ok(Plan::Short { run, routed: json!({ "routed": "idle" }), end: End::Finished(None) });
    }
    if !busy {
        let started = send(state, &session, &thread, texts).await?;
        return Ok(Plan::Stream {
            run,
            routed: json!({ "routed": started.routed }),
            follower: started.follower,
            replayed_to: started.replayed_to,
        });
    }
    match state.config.agui_busy {
        BusyPolicy::Steer | BusyPolicy::Reject => {
            let mut ids = Vec::new();
            let mut started = false;
            for (id, text) in texts {
                match session.send_or_steer(text).await.map_err(steer_error)? {
                    Routed::Started(turn) => {
                        run_turn(state, session.clone(), turn);
                        started = true;
                    }
                    Routed::Steered(message) => ids.push(message.to_string()),
                }
                state.threads.accept(&thread, &id);
            }
            if session.unfinished_turn().is_some() {
                resume_for_message(state, &session, &thread).await;
            }
            let routed = json!({ "routed": if started { "started" } else { "steered" }, "message_ids": ids, "turn": session.turns() });
            if started || resumed {
                Ok(Plan::Stream { run, routed, follower: attach, replayed_to })
            } else {
                Ok(Plan::Short { run, routed, end: End::Finished(None) })
            }
        }
        BusyPolicy::Queue => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (state2, session2, thread2) = (state.clone(), session.clone(), thread.clone());
            // The follow-up is sent whether or not the client stays to watch it.
            tokio::spawn(async move {
                let sent = tokio::select! {
                    () = state2.shutdown.cancelled() => return,
                    () = state2.running.released(&thread2, state2.running.chain(&thread2)) => {
                        session2.idle().await;
                        send(&state2, &session2, &thread2, texts).await
                    }
                };
                let _ = tx.send(sent);
            });
            Ok(Plan::Queued { run, routed: json!({ "routed": "queued" }), started: rx })
        }
        BusyPolicy::Restart => {
            let (cleared, _) = session.stop("a new AG-UI run restarted the thread").await;
            state.running.released(&thread, state.running.chain(&thread)).await;
            session.idle().await;
            let started = send(state, &session, &thread, texts).await?;
            let routed = json!({ "routed": "restarted", "cleared": cleared });
            Ok(Plan::Stream { run, routed, follower: started.follower, replayed_to: started.replayed_to })
        }
    }
}

/// Sends the messages (the first starts a turn when the thread is idle; the rest steer it) and says where to
/// follow the turn from.
async fn send(
    state: &AppState,
    session: &Session,
    thread: &str,
    texts: Vec<(String, String)>,
) -> Result<Started, ApiError> {
    let replayed_to = session.last_event_seq();
    let follower = session.follow(replayed_to);
    let mut routed = None;
    for (id, text) in texts {
        match session.send_or_steer(text).await.map_err(steer_error)? {
            Routed::Started(turn) => {
                run_turn(state, session.clone(), turn);
                routed.get_or_insert("started");
            }
            Routed::Steered(_) => {
                routed.get_or_insert("steered");
            }
        }
        state.threads.accept(thread, &id);
    }
    if session.unfinished_turn().is_some() {
        resume_for_message(state, session, thread).await;
    }
    Ok(Started { follower, replayed_to, routed: routed.unwrap_or("steered") })
}
