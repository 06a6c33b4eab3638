//! The AG-UI event stream's cost against our own SSE, per session event: one turn of `rounds` model calls (each
//! streaming a text and asking for one tool call) is run through a real `noetic-server` on loopback twice — once
//! watched through `GET /api/sessions/{key}/events` (our SSE, one event per session event), once as an AG-UI run
//! (`POST /ag-ui/default`: the events translated, plus state snapshots) — and each is timed from the request that
//! starts the turn to the end of its stream. The figure is the difference divided by the turn's session events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use noetic::agent::Runtime;
use noetic::agent::log::MemoryLogStore;
use noetic::model::{Item, ModelResponse};
use noetic::testing::ScriptedModel;
use noetic::tool::{FnTool, Tool, ToolError};
use noetic_server::{Approvals, Server, ServerConfig};
use serde_json::{Value, json};

use crate::BenchResult;

/// A served runtime whose turns make `rounds` model calls with a text and a tool call each, then answer.
async fn serve(rounds: usize) -> BenchResult<(Server, String, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let model = ScriptedModel::responder(move |request| {
        let results = request.history.as_slice().iter().filter(|i| matches!(i, Item::ToolResult(_))).count();
        let round = results % (rounds + 1);
        Ok(if round < rounds {
            ModelResponse::tool_calls([(format!("c{round}").as_str(), "noop", json!({ "n": round }))])
                .with_text(format!("Working on step {round} of the task, one tool call at a time."))
        } else {
            ModelResponse::text("All steps are done.")
        })
    })
    .without_recording();
    let tool: Arc<dyn Tool> = Arc::new(
        FnTool::builder("noop", "Does nothing.").handler(|_, _| async { Ok::<_, ToolError>(json!("ok")) }).build()?,
    );
    let approvals = Approvals::new(Duration::from_secs(60));
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tool(tool)
        .stream(true)
        .log_store(Arc::new(MemoryLogStore::default()))
        .build()?;
    let server = Server::new(runtime, approvals, ServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
    Ok((server, base, serving))
}

/// Reads server-sent events from `response` until `last` accepts one (or the stream ends); returns how many came.
async fn read_until(mut response: reqwest::Response, last: impl Fn(&Value) -> bool) -> BenchResult<usize> {
    let (mut buffer, mut count) = (String::new(), 0);
    while let Some(chunk) = response.chunk().await? {
        buffer.push_str(std::str::from_utf8(&chunk)?);
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                count += 1;
                if last(&serde_json::from_str(data)?) {
                    return Ok(count);
                }
            }
        }
    }
    Ok(count)
}

/// One turn watched through our SSE: (microseconds from the message to `turn_completed`, session events).
async fn ours(client: &reqwest::Client, base: &str, key: &str) -> BenchResult<(f64, usize)> {
    let events = client.get(format!("{base}/api/sessions/{key}/events")).send().await?;
    let started = Instant::now();
    let posted =
        client.post(format!("{base}/api/sessions/{key}/messages")).json(&json!({ "text": "go" })).send().await?;
    if !posted.status().is_success() {
        return Err(format!("the message was refused: {}", posted.text().await?).into());
    }
    let count = read_until(events, |e| e["type"] == "turn_completed").await?;
    Ok((started.elapsed().as_secs_f64() * 1e6, count))
}

/// One turn as an AG-UI run: (microseconds from the run input to the end of its stream, AG-UI events).
async fn agui(client: &reqwest::Client, base: &str, thread: &str) -> BenchResult<(f64, usize)> {
    let started = Instant::now();
    let input =
        json!({ "threadId": thread, "runId": "r", "messages": [{ "id": "u", "role": "user", "content": "go" }] });
    let response = client.post(format!("{base}/ag-ui/default")).json(&input).send().await?;
    let count = read_until(response, |e| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR").await?;
    Ok((started.elapsed().as_secs_f64() * 1e6, count))
}

/// What `pairs` interleaved pairs of `rounds`-round turns measured: each side's time per session event
/// (microseconds), and the AG-UI events per session event. Some runs on loopback stall ~40 ms on a delayed ACK (the
/// server's small SSE writes wait for it), on either side: compare the fastest runs of each side, which did not.
pub struct Figures {
    pub ours_us_per_event: Vec<f64>,
    pub agui_us_per_event: Vec<f64>,
    pub agui_events_per_session_event: f64,
}

/// Runs the pairs (see [`Figures`]).
pub async fn per_event(rounds: usize, pairs: usize) -> BenchResult<Figures> {
    let (server, base, serving) = serve(rounds).await?;
    let client = reqwest::Client::new();
    let mut figures =
        Figures { ours_us_per_event: Vec::new(), agui_us_per_event: Vec::new(), agui_events_per_session_event: 0.0 };
    for n in 0..pairs {
        let (t_ours, session_events) = ours(&client, &base, &format!("ours-{n}")).await?;
        let (t_agui, agui_events) = agui(&client, &base, &format!("agui-{n}")).await?;
        let events = session_events.max(1) as f64;
        figures.ours_us_per_event.push(t_ours / events);
        figures.agui_us_per_event.push(t_agui / events);
        figures.agui_events_per_session_event = agui_events as f64 / events;
    }
    server.shutdown();
    let _ = serving.await;
    Ok(figures)
}
