//! Load on `noetic-server` over loopback HTTP: many sessions at once, each with a server-sent-events follower,
//! each running tool-calling turns that a client steers while the tool runs. Prints JSON lines: turns per second,
//! the time from a steer request to the message being in the next model request (p50/p99), and memory.
//!
//! ```text
//! cargo run --profile profiling -p noetic-bench --bin serve_load [SESSIONS] [TURNS_PER_SESSION]   (default 1000 × 3)
//! cargo run --profile profiling -p noetic-bench --bin serve_load agui [RUNS] [RUNS_PER_THREAD]   (default 1000 × 1)
//! ```
//!
//! The model is scripted (no network), the tool waits until the client's steer was accepted, so every turn
//! exercises claim, SSE, a steer into a running tool batch, the skip of the rest of the batch and injection.
//! The `agui` mode runs that many AG-UI runs at once instead (see `agui_load.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use noetic::agent::Runtime;
use noetic::agent::log::MemoryLogStore;
use noetic::model::{Item, ModelResponse, Role};
use noetic::testing::ScriptedModel;
use noetic::tool::{FnTool, Tool, ToolError};
use noetic_server::{Approvals, Server, ServerConfig};
use serde_json::{Value, json};
use tokio::sync::Notify;

#[path = "../probe.rs"]
#[allow(dead_code)]
mod probe;

#[path = "../agui_load.rs"]
mod agui_load;

use probe::rss_mib;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Per session: the notification that lets its running tool finish, and when each steer was sent.
#[derive(Default)]
struct Shared {
    release: Mutex<HashMap<String, Arc<Notify>>>,
    sent: Mutex<HashMap<String, Instant>>,
    latencies: Mutex<Vec<Duration>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// Why each of the load's tasks failed (it returned an error or panicked), in task order; empty when none did.
fn failures<E: std::fmt::Display>(results: Vec<Result<Result<(), E>, tokio::task::JoinError>>) -> Vec<String> {
    results
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        })
        .collect()
}

fn main() -> BenchResult<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("agui") {
        args.next();
        let runs: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
        let per_thread: usize = args.next().map_or(Ok(1), |a| a.parse())?;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        return rt.block_on(agui_load::load(runs, per_thread));
    }
    let sessions: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let turns: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(load(sessions, turns))
}

async fn load(sessions: usize, turns: usize) -> BenchResult<()> {
    let shared = Arc::new(Shared::default());
    // The model: a task gets two tool calls; a request whose last user message is a steer records its latency and
    // gets the answer.
    let model = {
        let shared = shared.clone();
        ScriptedModel::responder(move |request| {
            let last_user = request.history.as_slice().iter().rev().find_map(|item| match item {
                Item::Message { role: Role::User, content } => Some(content.clone()),
                _ => None,
            });
            let text = last_user.unwrap_or_default();
            if let Some(sent) = lock(&shared.sent).remove(&text) {
                lock(&shared.latencies).push(sent.elapsed());
                return Ok(ModelResponse::text("steered answer"));
            }
            let n = request.history.len();
            Ok(ModelResponse::tool_calls([
                (format!("a{n}").as_str(), "work", json!({ "payload": "x".repeat(200) })),
                (format!("b{n}").as_str(), "work", json!({ "payload": "y".repeat(200) })),
            ]))
        })
        .without_recording()
    };
    let tool: Arc<dyn Tool> = {
        let shared = shared.clone();
        Arc::new(
            FnTool::builder("work", "Works until the client has steered.")
                .handler(move |_, ctx| {
                    let key = ctx.ctx.thread_id().map(str::to_owned).unwrap_or_default();
                    let notify = lock(&shared.release).get(&key).cloned();
                    async move {
                        if let Some(notify) = notify {
                            notify.notified().await;
                        }
                        Ok::<_, ToolError>(json!({ "result": "r".repeat(300) }))
                    }
                })
                .build()?,
        )
    };
    let approvals = Approvals::new(Duration::from_secs(60));
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tool(tool)
        .approver(approvals.approver())
        .log_store(Arc::new(MemoryLogStore::default()))
        .max_idle_sessions(sessions * 2)
        .build()?;
    // An event stream and a pooled request connection per session: above the default cap of 1024 connections,
    // where new connections would close idle pooled ones.
    let config =
        ServerConfig { max_connections: sessions.saturating_mul(2).saturating_add(64), ..ServerConfig::default() };
    let server = Server::new(runtime, approvals, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let rss_before = rss_mib().0;
    let client = reqwest::Client::builder().pool_max_idle_per_host(sessions).build()?;
    let started = Instant::now();
    let drivers = (0..sessions).map(|i| {
        let (client, base, shared) = (client.clone(), base.clone(), shared.clone());
        tokio::spawn(async move { drive(client, base, shared, format!("load-{i}"), turns).await })
    });
    let results = futures::future::join_all(drivers).await;
    let elapsed = started.elapsed();
    let failures = failures(results);
    let (rss, peak) = rss_mib();
    server.shutdown();
    let _ = serving.await;
    if let Some(first) = failures.first() {
        return Err(format!("{} of {sessions} sessions failed; first: {first}", failures.len()).into());
    }
    let mut latencies = lock(&shared.latencies).clone();
    latencies.sort();
    let total_turns = sessions * turns;
    println!(
        "{}",
        json!({ "name": "serve_sessions", "value": sessions, "unit": "sessions", "turns_per_session": turns })
    );
    println!(
        "{}",
        json!({ "name": "serve_turns_per_s", "value": (total_turns as f64 / elapsed.as_secs_f64()).round(), "unit": "turns/s", "turns": total_turns })
    );
    println!(
        "{}",
        json!({ "name": "serve_steer_to_request_us", "p50": percentile(&latencies, 0.5).round(), "p99": percentile(&latencies, 0.99).round(), "max": percentile(&latencies, 1.0).round(), "unit": "us", "samples": latencies.len() })
    );
    println!(
        "{}",
        json!({ "name": "serve_memory_mib", "rss_added": ((rss - rss_before) * 10.0).round() / 10.0, "peak": (peak * 10.0).round() / 10.0, "per_session_kib": ((rss - rss_before) * 1024.0 / sessions as f64).round(), "unit": "MiB" })
    );
    Ok(())
}

/// One session's client: an event follower, then `turns` times: send a task, wait for its tool to start, steer,
/// let the tool finish, wait for the turn's end.
async fn drive(
    client: reqwest::Client,
    base: String,
    shared: Arc<Shared>,
    key: String,
    turns: usize,
) -> BenchResult<()> {
    let notify = Arc::new(Notify::new());
    lock(&shared.release).insert(key.clone(), notify.clone());
    let response = client.get(format!("{base}/api/sessions/{key}/events")).send().await?;
    if !response.status().is_success() {
        return Err(format!("events: HTTP {}", response.status()).into());
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut next_event = async || -> BenchResult<Value> {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return Ok(serde_json::from_str(data)?);
                }
                continue;
            }
            let chunk = body.next().await.ok_or("the event stream ended")??;
            buffer.push_str(std::str::from_utf8(&chunk)?);
        }
    };
    for turn in 0..turns {
        let task = format!("task {turn} of {key}");
        let routed: Value = client
            .post(format!("{base}/api/sessions/{key}/messages"))
            .json(&json!({ "text": task }))
            .send()
            .await?
            .json()
            .await?;
        if routed["routed"] != "started" {
            return Err(format!("expected a new turn, got {routed}").into());
        }
        loop {
            if next_event().await?["type"] == "tool_call_started" {
                break;
            }
        }
        let steer = format!("steer {turn} of {key}");
        lock(&shared.sent).insert(steer.clone(), Instant::now());
        let routed: Value = client
            .post(format!("{base}/api/sessions/{key}/messages"))
            .json(&json!({ "text": steer }))
            .send()
            .await?
            .json()
            .await?;
        if routed["routed"] != "steered" {
            return Err(format!("expected a steer, got {routed}").into());
        }
        notify.notify_one();
        loop {
            let event = next_event().await?;
            match event["type"].as_str() {
                Some("turn_completed") => break,
                Some("turn_failed") => return Err(format!("turn failed: {event}").into()),
                _ => {}
            }
        }
    }
    Ok(())
}
