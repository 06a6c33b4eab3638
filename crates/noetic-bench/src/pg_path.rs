//! Sessions shared by workers through PostgreSQL (run when a server is up: `scripts/postgres.sh start`, or
//! `NOETIC_POSTGRES_URL`): time added per tool call on the real path, a steer through worker B to the message being
//! available at worker A's checkpoint, and the throughput of tool-calling turns with 1, 2 and 4 workers (each a
//! runtime with its own store, connections and worker id) against one database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use noetic::agent::{Runtime, SessionStore, SteerMessage, TurnLease};
use noetic::model::{Item, ModelResponse, ScriptedModel};
use noetic_postgres::PgStore;
use serde_json::json;

use crate::BenchResult;
use crate::probe::noop_tool;
use crate::real_path;

/// The database, if one answers.
pub fn url() -> Option<String> {
    let url = std::env::var("NOETIC_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://noetic:noetic@127.0.0.1:54329/noetic".to_owned());
    let probe = url.clone();
    let up =
        std::thread::spawn(move || postgres::Client::connect(&probe, postgres::NoTls).is_ok()).join().unwrap_or(false);
    up.then_some(url)
}

/// A key no earlier run used.
fn fresh_key(name: &str) -> String {
    format!("bench-{name}-{}-{}", std::process::id(), fastrand::u64(..))
}

/// µs per tool call of a session of `calls` calls on the real path, with the PostgreSQL store.
pub async fn tool_call_us(url: &str, calls: usize) -> BenchResult<f64> {
    let store: Arc<dyn SessionStore> = Arc::new(PgStore::connect(url)?);
    // The real path's session is named "bench": start from an empty one.
    store.delete("bench")?;
    Ok(real_path::session_tool_calls_with(calls, false, Some(store)).await?.0)
}

/// µs from a steer through worker B (its transaction included) to the message being in hand at worker A's
/// checkpoint (the notification delivered and the inbox read), `samples` times.
pub fn steer_to_checkpoint_us(url: &str, samples: usize) -> BenchResult<Vec<f64>> {
    let (a, b) = (PgStore::connect(url)?, PgStore::connect(url)?);
    let key = fresh_key("steer");
    let TurnLease::Granted { .. } = a.begin_turn(&key)? else { return Err("worker A did not get the lease".into()) };
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let message = SteerMessage::new(format!("steer {i}"));
        let start = Instant::now();
        let TurnLease::Elsewhere { .. } = b.begin_turn_or_queue(&key, &message)? else {
            return Err("worker B took the lease A holds".into());
        };
        // A's checkpoints, as fast as they come: each is free until the notification marks the session.
        let deadline = start + Duration::from_secs(5);
        loop {
            let inbox = a.take_inbox(&key)?;
            if inbox.messages.iter().any(|m| m.id == message.id) {
                out.push(start.elapsed().as_secs_f64() * 1e6);
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("steer {i} did not reach worker A within 5 s").into());
            }
            std::thread::yield_now();
        }
    }
    a.end_turn(&key)?;
    a.delete(&key)?;
    Ok(out)
}

/// Tool-calling turns per second with `workers` workers, each running `sessions` sessions at once, `turns` turns
/// each (a tool call and an answer per turn).
pub async fn turns_per_s(url: &str, workers: usize, sessions: usize, turns: usize) -> BenchResult<f64> {
    let mut runtimes = Vec::with_capacity(workers);
    for _ in 0..workers {
        let model = ScriptedModel::responder(|request| {
            Ok(match request.history.last() {
                Some(Item::ToolResult(_)) => ModelResponse::text("ok"),
                _ => ModelResponse::tool_calls([("c", "noop", json!({}))]),
            })
        })
        .without_recording();
        let store: Arc<dyn SessionStore> = Arc::new(PgStore::connect(url)?);
        runtimes.push(Runtime::builder().model(Arc::new(model)).tool(noop_tool()?).store(store).build()?);
    }
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, runtime) in runtimes.iter().enumerate() {
        for s in 0..sessions {
            let session = runtime.session(&fresh_key(&format!("load-{w}-{s}")));
            let done = done.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..turns {
                    let turn = session.send(format!("turn {i}")).await.map_err(|e| e.to_string())?;
                    turn.await.map_err(|e| e.to_string())?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), String>(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}
