//! `serve_load agui [RUNS] [RUNS_PER_THREAD]`: RUNS concurrent AG-UI runs against one server (default 1000 × 1):
//! each thread's client posts a `RunAgentInput` to `/ag-ui/default` and reads the event stream to `RUN_FINISHED`
//! (a tool call and its result, a text answer, state snapshots); a thread's next run adds one message to the
//! conversation it sends. Prints JSON lines: runs per second, the run time (p50/p99), events per run, and memory.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use noetic::agent::Runtime;
use noetic::agent::log::MemoryLogStore;
use noetic::model::{Item, ModelResponse};
use noetic::testing::ScriptedModel;
use noetic::tool::{FnTool, Tool, ToolError};
use noetic_server::{Approvals, Server, ServerConfig};
use serde_json::{Value, json};

use super::probe::rss_mib;
use super::{BenchResult, percentile};

/// The run times and event counts of the runs that finished.
#[derive(Default)]
struct Seen {
    run_times: Mutex<Vec<Duration>>,
    events: Mutex<u64>,
}

/// The load: a server on loopback, `threads` clients at once, `per_thread` runs each.
pub(crate) async fn load(threads: usize, per_thread: usize) -> BenchResult<()> {
    // The model: a request after a tool result gets the answer; any other gets one tool call.
    let model = ScriptedModel::responder(|request| {
        if matches!(request.history.as_slice().last(), Some(Item::ToolResult(_))) {
            return Ok(ModelResponse::text("done: the work is in"));
        }
        let n = request.history.len();
        Ok(ModelResponse::tool_calls([(format!("w{n}").as_str(), "work", json!({ "payload": "x".repeat(200) }))]))
    })
    .without_recording();
    let tool: Arc<dyn Tool> = Arc::new(
        FnTool::builder("work", "Does the work.")
            .handler(|_, _| async { Ok::<_, ToolError>(json!({ "result": "r".repeat(300) })) })
            .build()?,
    );
    let approvals = Approvals::new(Duration::from_secs(60));
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tool(tool)
        .approver(approvals.approver())
        .log_store(Arc::new(MemoryLogStore::default()))
        .max_idle_sessions(threads * 2)
        .build()?;
    let config =
        ServerConfig { max_connections: threads.saturating_mul(2).saturating_add(64), ..ServerConfig::default() };
    let server = Server::new(runtime, approvals, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/ag-ui/default", listener.local_addr()?);
    let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let rss_before = rss_mib().0;
    let client = reqwest::Client::builder().pool_max_idle_per_host(threads).build()?;
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let clients = (0..threads).map(|i| {
        let (client, url, seen) = (client.clone(), url.clone(), seen.clone());
        tokio::spawn(async move { thread(client, url, seen, format!("agui-load-{i}"), per_thread).await })
    });
    let results = futures::future::join_all(clients).await;
    let elapsed = started.elapsed();
    let failures = super::failures(results);
    let (rss, peak) = rss_mib();
    server.shutdown();
    let _ = serving.await;
    if let Some(first) = failures.first() {
        return Err(format!("{} of {threads} threads failed; first: {first}", failures.len()).into());
    }
    let mut times = seen.run_times.lock().map_err(|_| "a client panicked")?.clone();
    times.sort();
    let runs = threads * per_thread;
    let events = *seen.events.lock().map_err(|_| "a client panicked")?;
    println!(
        "{}",
        json!({ "name": "agui_concurrent_runs", "value": threads, "unit": "runs", "runs_per_thread": per_thread })
    );
    println!(
        "{}",
        json!({ "name": "agui_runs_per_s", "value": (runs as f64 / elapsed.as_secs_f64()).round(), "unit": "runs/s", "runs": runs, "elapsed_s": (elapsed.as_secs_f64() * 100.0).round() / 100.0 })
    );
    println!(
        "{}",
        json!({ "name": "agui_run_ms", "p50": percentile(&times, 0.5) / 1e3, "p99": percentile(&times, 0.99) / 1e3, "max": percentile(&times, 1.0) / 1e3, "unit": "ms", "events_per_run": events as f64 / runs as f64 })
    );
    println!(
        "{}",
        json!({ "name": "agui_memory_mib", "rss_added": ((rss - rss_before) * 10.0).round() / 10.0, "peak": (peak * 10.0).round() / 10.0, "per_thread_kib": ((rss - rss_before) * 1024.0 / threads as f64).round(), "unit": "MiB" })
    );
    Ok(())
}

/// One thread's client: `runs` runs, one after another, each with one more user message.
async fn thread(client: reqwest::Client, url: String, seen: Arc<Seen>, key: String, runs: usize) -> BenchResult<()> {
    let mut messages = Vec::new();
    for run in 0..runs {
        messages.push(json!({ "id": format!("u{run}"), "role": "user", "content": format!("work {run} of {key}") }));
        let input = json!({ "threadId": key, "runId": format!("{key}-r{run}"), "messages": messages, "tools": [], "context": [], "state": {}, "forwardedProps": {} });
        let began = Instant::now();
        let response = client.post(&url).header("accept", "text/event-stream").json(&input).send().await?;
        if !response.status().is_success() {
            return Err(format!("run {run} of {key}: HTTP {}", response.status()).into());
        }
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        let mut count = 0u64;
        let mut finished = false;
        'stream: while let Some(chunk) = body.next().await {
            buffer.push_str(std::str::from_utf8(&chunk?)?);
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                let event: Value = serde_json::from_str(data)?;
                count += 1;
                match event["type"].as_str() {
                    Some("RUN_FINISHED") => {
                        finished = true;
                        break 'stream;
                    }
                    Some("RUN_ERROR") => return Err(format!("run {run} of {key}: {event}").into()),
                    _ => {}
                }
            }
        }
        if !finished {
            return Err(format!("run {run} of {key}: the stream ended before RUN_FINISHED").into());
        }
        seen.run_times.lock().map_err(|_| "a client panicked")?.push(began.elapsed());
        *seen.events.lock().map_err(|_| "a client panicked")? += count;
    }
    Ok(())
}
