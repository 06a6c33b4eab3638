//! The HTTP side: fetching the card, sending a message and following the answer (a JSON body or server-sent
//! events), cancelling the task when our turn is cancelled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;
use tokio::sync::mpsc;

use futures::StreamExt;
use noetic_steps::tool::{ToolContext, ToolError, ToolErrorKind};
use serde_json::{Value, json};

use crate::wire::{self, Card, TaskState, Update};
use crate::{A2aAgentConfig, A2aError};

/// The most one answer (or one streamed event) may be.
const MAX_BYTES: usize = 16 * 1024 * 1024;
/// How long connecting and a cancel request may take.
const SHORT: Duration = Duration::from_secs(10);

/// An agent's HTTP client.
pub(crate) struct Client {
    http: reqwest::Client,
    headers: reqwest::header::HeaderMap,
    endpoint: String,
    streaming: bool,
    timeout: Duration,
    next_id: AtomicU64,
}

fn unreachable(url: &str, reason: impl std::fmt::Display) -> A2aError {
    A2aError::Unreachable { url: url.to_owned(), reason: reason.to_string() }
}

/// A transport error with its causes (reqwest's own message hides them).
fn chain(e: &reqwest::Error) -> String {
    noetic_http::error_chain(e)
}

impl Client {
    pub(crate) fn new(config: &A2aAgentConfig) -> Result<Client, A2aError> {
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &config.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| unreachable(&config.url, format!("header '{name}': {e}")))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|e| unreachable(&config.url, format!("the value of header '{name}': {e}")))?;
            headers.insert(name, value);
        }
        headers.insert("a2a-version", reqwest::header::HeaderValue::from_static("1.0"));
        let http = reqwest::Client::builder()
            .connect_timeout(SHORT)
            .build()
            .map_err(|e| unreachable(&config.url, chain(&e)))?;
        Ok(Client {
            http,
            headers,
            endpoint: String::new(),
            streaming: false,
            timeout: config.timeout,
            next_id: AtomicU64::new(1),
        })
    }

    pub(crate) fn with_endpoint(mut self, card: &Card) -> Client {
        self.endpoint = card.endpoint.clone();
        self.streaming = card.streaming;
        self
    }

    /// The card at `url`.
    pub(crate) async fn card(&self, url: &str) -> Result<Value, A2aError> {
        let response = self
            .http
            .get(url)
            .headers(self.headers.clone())
            .timeout(SHORT)
            .send()
            .await
            .map_err(|e| unreachable(url, chain(&e)))?;
        if !response.status().is_success() {
            return Err(A2aError::Card { url: url.to_owned(), reason: format!("HTTP {}", response.status()) });
        }
        response.json().await.map_err(|e| A2aError::Card { url: url.to_owned(), reason: e.to_string() })
    }

    async fn post(&self, body: &Value, timeout: Duration) -> Result<reqwest::Response, A2aError> {
        let response = self
            .http
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| unreachable(&self.endpoint, chain(&e)))?;
        if !response.status().is_success() {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            return Err(unreachable(
                &self.endpoint,
                format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()),
            ));
        }
        Ok(response)
    }

    /// Asks the agent to cancel `task` (best effort: the call is being cancelled anyway).
    async fn cancel(&self, task: &str) {
        let body = wire::cancel_request(self.next_id.fetch_add(1, Ordering::Relaxed), task);
        if let Err(e) = self.post(&body, SHORT).await {
            tracing::warn!(task, error = %e, "could not cancel the A2A agent's task");
        }
    }
}

/// What a call saw of the task so far.
#[derive(Default)]
struct Seen {
    task: Option<String>,
    state: Option<TaskState>,
    says: String,
    /// The artifacts' text, by artifact id, in the order they came.
    artifacts: Vec<(String, String)>,
    /// A direct answer.
    message: Option<String>,
    /// The call answers a task that asked for input: the task as it was (still asking) may come first.
    replying: bool,
}

impl Seen {
    fn take(&mut self, update: Update, tcx: &ToolContext) {
        match update {
            Update::Task { id, state, says, artifacts } => {
                self.task = Some(id);
                let stale = std::mem::take(&mut self.replying) && state == TaskState::InputRequired;
                let state = if stale { TaskState::Working } else { state };
                self.state = Some(state);
                self.says = says;
                if !artifacts.is_empty() && self.artifacts.is_empty() {
                    self.artifacts.push((String::new(), artifacts));
                }
                let _ = tcx.progress(json!({ "state": state.as_str() }));
            }
            Update::Status { id, state, says, metadata } => {
                self.replying = false;
                if !id.is_empty() {
                    self.task = Some(id);
                }
                self.state = Some(state);
                if !says.is_empty() {
                    self.says = says.clone();
                }
                let mut progress = json!({ "state": state.as_str() });
                if let Value::Object(fields) = &mut progress {
                    if !says.is_empty() {
                        fields.insert("says".into(), says.into());
                    }
                    if let Some(metadata) = metadata {
                        fields.insert("metadata".into(), metadata);
                    }
                }
                let _ = tcx.progress(progress);
            }
            Update::Artifact { artifact_id, text, append } => {
                let _ = tcx.progress(json!({ "artifact": artifact_id, "text": text }));
                match self.artifacts.iter_mut().find(|(id, _)| *id == artifact_id) {
                    Some((_, held)) if append => held.push_str(&text),
                    Some((_, held)) => *held = text,
                    None => self.artifacts.push((artifact_id, text)),
                }
            }
            Update::Message { text } => self.message = Some(text),
        }
    }

    fn stops(&self) -> bool {
        self.message.is_some() || self.state.is_some_and(TaskState::stops)
    }

    /// The tool's result for what the agent said last.
    fn outcome(self, agent: &str) -> Result<Value, ToolError> {
        if let Some(text) = self.message {
            return Ok(json!({ "state": "completed", "answer": text }));
        }
        let task = self.task.unwrap_or_default();
        let answer = || {
            let texts: Vec<&str> = self.artifacts.iter().map(|(_, t)| t.as_str()).filter(|t| !t.is_empty()).collect();
            if texts.is_empty() { self.says.clone() } else { texts.join("\n") }
        };
        match self.state {
            Some(TaskState::Completed) => Ok(json!({ "task_id": task, "state": "completed", "answer": answer() })),
            Some(TaskState::InputRequired) => Ok(json!({
                "task_id": task,
                "state": "input-required",
                "question": self.says,
                "reply": format!("call {agent} again with your answer as message and task_id \"{task}\""),
            })),
            Some(TaskState::Failed) => Err(ToolError::of(
                ToolErrorKind::Upstream,
                format!(
                    "{agent}: the agent's task {task} failed: {}",
                    if self.says.is_empty() { "it gave no reason" } else { &self.says }
                ),
            )),
            Some(TaskState::Canceled) => {
                Err(ToolError::of(ToolErrorKind::Cancelled, format!("{agent}: the agent canceled task {task}")))
            }
            Some(TaskState::Working) | None => Err(ToolError::of(
                ToolErrorKind::Upstream,
                format!("{agent}: the agent's answer ended while task {task} was still working; try again"),
            )),
        }
    }
}

fn upstream(agent: &str, e: impl std::fmt::Display) -> ToolError {
    ToolError::of(ToolErrorKind::Upstream, format!("{agent}: {e}"))
}

fn upstream_text(agent: &str, what: &str) -> ToolError {
    ToolError::of(ToolErrorKind::Upstream, format!("{agent}: {what}"))
}

/// What the exchange with the agent sends the call: an update, or why the exchange failed.
type Sent = Result<Update, ToolError>;

/// One call of an agent's tool. The exchange with the agent runs as a task of its own, so that when the call ends
/// first — our turn cancelled (the runtime then drops the call), or the call timed out — the exchange still learns
/// the task's id (waiting briefly for it) and cancels the agent's task.
pub(crate) async fn run(
    client: Arc<Client>,
    agent: &str,
    skill: Option<&str>,
    args: &Value,
    tcx: &ToolContext,
) -> Result<Value, ToolError> {
    let message = args.get("message").and_then(Value::as_str).unwrap_or_default();
    if message.trim().is_empty() {
        return Err(ToolError::of(ToolErrorKind::InvalidArguments, "message is empty: say what to ask the agent"));
    }
    let task_id = args.get("task_id").and_then(Value::as_str).filter(|t| !t.is_empty());
    let body =
        wire::send_request(client.next_id.fetch_add(1, Ordering::Relaxed), client.streaming, message, task_id, skill);
    let (tx, mut rx) = mpsc::channel::<Sent>(64);
    let timeout = client.timeout;
    tokio::spawn(exchange(client, body, tx, agent.to_owned()));
    let mut seen = Seen { replying: task_id.is_some(), ..Seen::default() };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let sent = tokio::select! {
            biased;
            () = tcx.ctx.cancelled() => {
                return Err(ToolError::of(ToolErrorKind::Cancelled, format!("{agent}: cancelled with our turn")));
            }
            () = tokio::time::sleep_until(deadline) => {
                return Err(ToolError::of(ToolErrorKind::Timeout, format!("{agent}: no answer within {} s", timeout.as_secs())));
            }
            sent = rx.recv() => sent,
        };
        match sent {
            Some(Ok(update)) => seen.take(update, tcx),
            Some(Err(error)) => return Err(error),
            None => return seen.outcome(agent),
        }
        if seen.stops() {
            return seen.outcome(agent);
        }
    }
}

/// Sends the message and passes on what the agent answers until the task stops. When the call is gone before
/// that, cancels the agent's task once its id is known (waiting at most [`SHORT`] for it).
async fn exchange(client: Arc<Client>, body: Value, tx: mpsc::Sender<Sent>, agent: String) {
    // When the call went away: the exchange gives up at this instant.
    let mut give_up: Option<tokio::time::Instant> = None;
    let gone = |give_up: &mut Option<tokio::time::Instant>| {
        give_up.get_or_insert_with(|| tokio::time::Instant::now() + SHORT);
    };
    let until = |give_up: Option<tokio::time::Instant>| async move {
        match give_up {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let post = client.post(&body, client.timeout);
    tokio::pin!(post);
    let response = loop {
        tokio::select! {
            () = tx.closed(), if give_up.is_none() => gone(&mut give_up),
            () = until(give_up) => return,
            response = &mut post => break response,
        }
    };
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            let _ = tx.send(Err(upstream(&agent, e))).await;
            return;
        }
    };
    let is_sse = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut task: Option<String> = None;
    let mut stopped = false;
    let pass = |update: Update, task: &mut Option<String>, stopped: &mut bool| {
        match &update {
            Update::Task { id, state, .. } | Update::Status { id, state, .. } if !id.is_empty() => {
                *task = Some(id.clone());
                *stopped =
                    state.stops() && !(matches!(update, Update::Task { .. }) && *state == TaskState::InputRequired);
            }
            Update::Message { .. } => *stopped = true,
            _ => {}
        }
        update
    };
    if !is_sse {
        let sent = match response.json::<Value>().await {
            Ok(envelope) => wire::rpc_result(envelope).map_err(|e| upstream(&agent, e)).and_then(|result| {
                wire::parse_update(&result)
                    .ok_or_else(|| upstream_text(&agent, "the answer is neither a task nor a message"))
            }),
            Err(e) => Err(upstream(&agent, e)),
        };
        let _ = tx.send(sent).await;
        return;
    }
    let mut events = Box::pin(noetic_http::sse_events(response.bytes_stream(), MAX_BYTES));
    loop {
        let event = tokio::select! {
            () = tx.closed(), if give_up.is_none() => {
                gone(&mut give_up);
                // The call is gone: a task whose id is known is cancelled now, not when the agent next speaks.
                if let Some(task) = &task {
                    client.cancel(task).await;
                    return;
                }
                continue;
            }
            () = until(give_up) => return,
            event = events.next() => event,
        };
        let sent = match event {
            None => return,
            Some(Err(e)) => Err(upstream_text(&agent, &format!("the event stream broke: {e}"))),
            Some(Ok(event)) if event.data.trim().is_empty() => continue,
            Some(Ok(event)) => serde_json::from_str::<Value>(&event.data)
                .map_err(|e| upstream_text(&agent, &format!("an event is not JSON: {e}")))
                .and_then(|envelope| wire::rpc_result(envelope).map_err(|e| upstream(&agent, e)))
                .map(|result| wire::parse_update(&result)),
        };
        let failed = sent.is_err();
        match sent {
            Ok(None) => continue,
            Ok(Some(update)) => {
                let update = pass(update, &mut task, &mut stopped);
                if give_up.is_none() {
                    let _ = tx.send(Ok(update)).await;
                }
            }
            Err(error) => {
                let _ = tx.send(Err(error)).await;
            }
        }
        if stopped || failed {
            return;
        }
        if give_up.is_some()
            && let Some(task) = &task
        {
            client.cancel(task).await;
            return;
        }
    }
}
