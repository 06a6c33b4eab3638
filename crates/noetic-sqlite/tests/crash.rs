//! Crash test: real processes killed with SIGKILL at random points, then restarted on the same SQLite file.
//!
//! Each trial runs a worker (this executable, in worker mode) that drives one session through a plan of tool
//! calls with a non-idempotent tool whose side effect is appended (and fsynced) to a file, and steers the
//! session twice while it works, logging each steering message once it is accepted. The parent kills the worker
//! after a random delay, again and again, then lets it finish, and checks:
//! * every tool call id in the conversation has exactly one result;
//! * the non-idempotent side effect happened at most once per call, and exactly once for each call whose result
//!   says it ran;
//! * every steering message accepted before a kill reaches the conversation exactly once;
//! * every call that ran has its steering decision in the stored ledger;
//! * the final answer is there and nothing is left queued or unfinished.
//!
//! The session is kept in the session log (`SqliteLogStore`); a kill point is named by the log's last entry.
//! `NOETIC_CRASH_TRIALS` sets the number of trials (default 5; the long mode uses 100). It also checks that a
//! second live process cannot take a session's lease while another holds it, and that a dead holder's lease is
//! free at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use noetic::agent::log::{LogStore, Projection, Taken};
use noetic::model::{Model, ModelRequest, ModelResponse};
use noetic::prelude::*;
use noetic_sqlite::{Durability, SqliteLogStore};
use serde_json::json;

/// Tool calls in the plan.
const PLAN: usize = 8;
const SESSION: &str = "crash";
const STEERS: [(usize, &str); 2] = [(2, "steer-A: prefer the cache"), (5, "steer-B: be brief")];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if std::env::var_os("NOETIC_CRASH_WORKER").is_some() {
        worker(&args[1], &args[2], &args[3]);
        return;
    }
    if std::env::var_os("NOETIC_CRASH_HOLDER").is_some() {
        holder(&args[1]);
        return;
    }
    if std::env::var_os("NOETIC_CRASH_TAKER").is_some() {
        taker(&args[1]);
        return;
    }
    a_second_live_process_cannot_take_a_held_session_and_a_dead_holder_holds_nothing();
    a_process_killed_between_taking_a_lease_for_a_turn_and_its_start_leaves_neither();
    killed_workers_leave_nothing_lost_doubled_or_run_twice();
}

/// What a session's log holds, folded (read on a runtime of its own: the parent is not async).
fn read_log(db: &Path) -> Option<(Projection, String)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = SqliteLogStore::open(db).await.unwrap();
        let records = store.read(SESSION, 0, usize::MAX).await.unwrap();
        let last =
            records.last().map(|r| serde_json::to_value(&r.entry).unwrap()["type"].as_str().unwrap().to_owned())?;
        let mut projection = Projection::default();
        records.iter().for_each(|r| projection.apply(r));
        Some((projection, last))
    })
}

// ---- the worker ------------------------------------------------------------------------------------------

/// Plans tool calls by what the conversation holds: the same request always gets the same answer, whichever
/// process asks.
struct Planner;

impl Model for Planner {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let asked = request.history.iter().filter(|i| matches!(i, Item::ToolCall(_))).count();
        let response = if asked >= PLAN {
            ModelResponse::text("done")
        } else {
            let ids = [format!("call-{asked}"), format!("call-{}", asked + 1)];
            ModelResponse::tool_calls(ids.iter().map(|id| (id.as_str(), "effect", json!({}))))
        };
        Box::pin(async move { Ok(response) })
    }
}

fn append_synced(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    // One write of the whole line: a kill can never leave half a line for the next process to continue.
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_all().unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| t.lines().map(str::to_owned).collect()).unwrap_or_default()
}

fn worker(db: &str, effects: &str, accepted: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (effects, accepted) = (PathBuf::from(effects), PathBuf::from(accepted));
        let tool = {
            let effects = effects.clone();
            FnTool::builder("effect", "Appends its call id to a file: a side effect that must not happen twice.")
                .handler(move |_, tcx| {
                    let effects = effects.clone();
                    async move {
                        println!("effect {}", tcx.call_id);
                        append_synced(&effects, &tcx.call_id);
                        println!("effect done {}", tcx.call_id);
                        // Widen the window in which a kill lands between the effect and its journaled result.
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..8))).await;
                        Ok(json!("effect done"))
                    }
                })
                .build()
                .unwrap()
        };
        // Every tool call is reviewed, so every call leaves a ledger entry.
        let audit = SteeringRule::predicate("audit", [Hook::BeforeToolCall], |_| SteeringDecision::allow());
        let layer = steering(SteeringConfig::new(vec![audit])).unwrap();
        let runtime = Runtime::builder()
            .model(Arc::new(Planner))
            .tool(Arc::new(tool))
            .layer(layer)
            .log_store(Arc::new(SqliteLogStore::open(db).await.unwrap()))
            .build()
            .unwrap();
        let session = runtime.open(SESSION).await.unwrap();
        // Steering while the agent works: each message once the model has asked for its trigger count of calls.
        let steerer = {
            let (session, accepted) = (session.clone(), accepted.clone());
            tokio::spawn(async move {
                loop {
                    // Triggered by the calls the model asked for: they always reach the plan's end, whichever
                    // calls were skipped or interrupted on the way.
                    let done = session.history().iter().filter(|i| matches!(i, Item::ToolCall(_))).count();
                    let logged = lines(&accepted);
                    for (after, text) in STEERS {
                        if done < after || logged.iter().any(|l| l == text) {
                            continue;
                        }
                        // Accepted before a kill that came before it was logged: it is in the session already
                        // (queued, or shown); sending it again would be the sender's duplicate, not the runtime's.
                        let known = session.queued_messages().iter().any(|m| m.text == text)
                            || session.history().contains(&Item::user(text));
                        if known || session.steer(text).await.is_ok() {
                            append_synced(&accepted, text);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        // Bounded: a worker that cannot finish fails instead of spinning (and hanging the test).
        for round in 0.. {
            assert!(round < 20_000, "the worker made no progress: {:?}", session.history().last());
            let history = session.history();
            let finished = history.last() == Some(&Item::assistant("done"));
            let all_steered = lines(&accepted).len() == STEERS.len();
            if finished && session.queued() == 0 && all_steered && session.unfinished_turn().is_none() {
                break;
            }
            let turn = if session.unfinished_turn().is_some() {
                session.resume().await.unwrap()
            } else if session.queued() > 0 {
                session.continue_session().await.unwrap()
            } else if history.is_empty() {
                Some(session.send("go").await.unwrap())
            } else if !finished {
                Some(session.send("continue").await.unwrap())
            } else {
                // Finished, waiting for the last steering message to be accepted.
                tokio::time::sleep(Duration::from_millis(1)).await;
                None
            };
            if let Some(turn) = turn {
                println!("turn");
                let _ = turn.await;
                println!("turn done");
            }
        }
        steerer.abort();
    });
}

/// Takes the session's lease and holds it until killed (it waits on its stdin, which the parent never closes
/// first).
fn holder(db: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _store = rt.block_on(async {
        let store = SqliteLogStore::open(db).await.unwrap();
        let taken = store.leases().unwrap().acquire(SESSION, "holder", Duration::from_secs(600)).await.unwrap();
        assert_eq!(taken, None);
        store
    });
    println!("holding");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Takes the session's lease for a turn and is killed before the turn's start: the lease's transaction is still
/// open (kept for the start, which never comes).
fn taker(db: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _store = rt.block_on(async {
        let store = SqliteLogStore::open_lingering(db, Durability::Process, Duration::from_secs(600)).await.unwrap();
        let taken = store.take_lease(SESSION, "taker", Duration::from_secs(600)).await.unwrap();
        assert_eq!(taken, Some(Taken::Held { last: 0 }));
        store
    });
    println!("taken");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

// ---- the parent ------------------------------------------------------------------------------------------

fn this_exe() -> PathBuf {
    std::env::current_exe().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-crash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn a_second_live_process_cannot_take_a_held_session_and_a_dead_holder_holds_nothing() {
    let dir = scratch("owner");
    let db = dir.join("noetic.db");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(SqliteLogStore::open(&db)).unwrap();
    let mut holder = Command::new(this_exe())
        .arg(&db)
        .env("NOETIC_CRASH_HOLDER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "holding");
    let leases = store.leases().unwrap();
    let term = Duration::from_secs(60);
    let refused = rt.block_on(leases.acquire(SESSION, "second", term)).unwrap();
    assert_eq!(refused.as_deref(), Some("holder"), "a live holder keeps the session");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(rt.block_on(leases.acquire(SESSION, "second", term)).unwrap(), None, "a dead holder holds nothing");
    println!("ok: a second live process is refused naming the holder; a dead holder's session is free at once");
}

fn a_process_killed_between_taking_a_lease_for_a_turn_and_its_start_leaves_neither() {
    let dir = scratch("taker");
    let db = dir.join("noetic.db");
    let mut taker = Command::new(this_exe())
        .arg(&db)
        .env("NOETIC_CRASH_TAKER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(taker.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "taken");
    taker.kill().unwrap();
    taker.wait().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = SqliteLogStore::open(&db).await.unwrap();
        assert_eq!(store.leases().unwrap().holder(SESSION).await.unwrap(), None, "the lease was never committed");
        assert_eq!(store.last(SESSION).await.unwrap(), 0);
        let taken = store.take_lease(SESSION, "next", Duration::from_secs(60)).await.unwrap();
        assert_eq!(taken, Some(Taken::Held { last: 0 }), "the session is free at once");
    });
    println!("ok: a process killed between taking a lease for a turn and the turn's start leaves neither");
}

fn killed_workers_leave_nothing_lost_doubled_or_run_twice() {
    let trials: usize = std::env::var("NOETIC_CRASH_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(5);
    let mut kills = 0;
    let mut kill_points: BTreeMap<String, usize> = BTreeMap::new();
    for trial in 0..trials {
        let dir = scratch(&format!("log-trial-{trial}"));
        let (db, effects, accepted) = (dir.join("noetic.db"), dir.join("effects.log"), dir.join("accepted.log"));
        let mut runs = 0;
        loop {
            runs += 1;
            let mut child = Command::new(this_exe())
                .args([&db, &effects, &accepted])
                .env("NOETIC_CRASH_WORKER", "1")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            // Kill on the first runs after a random number of the worker's progress lines (it goes on working
            // while the kill is on its way, so the kill lands anywhere around that point); then let it finish.
            let mut progress = std::io::BufReader::new(child.stdout.take().unwrap());
            if runs <= 6 {
                let wanted = fastrand::usize(0..10);
                let mut seen = 0;
                let mut line = String::new();
                while seen < wanted && std::io::BufRead::read_line(&mut progress, &mut line).unwrap_or(0) > 0 {
                    seen += 1;
                    line.clear();
                }
                if child.try_wait().unwrap().is_none() {
                    child.kill().unwrap();
                    child.wait().unwrap();
                    kills += 1;
                    *kill_points.entry(kill_point(&db)).or_default() += 1;
                    continue;
                }
            }
            std::io::copy(&mut progress, &mut std::io::sink()).unwrap();
            let status = child.wait().unwrap();
            assert!(status.success(), "trial {trial}: the worker failed on run {runs}: {status}");
            break;
        }
        check(trial, &db, &effects, &accepted);
    }
    println!("ok: {trials} trials, {kills} kills; kill points (the log's last entry at the kill): {kill_points:?}");
}

/// Where the killed worker's turn was, by the log it left.
fn kill_point(db: &Path) -> String {
    if !db.exists() {
        return "before the store existed".to_owned();
    }
    match read_log(db) {
        None => "before the first append".to_owned(),
        Some((projection, _)) if projection.open_turn.is_none() => "between turns".to_owned(),
        Some((_, last)) => format!("after {last}"),
    }
}

/// What a finished trial left: the conversation, whether anything is left (unfinished or queued), the ledger.
fn left(db: &Path) -> (Vec<Item>, bool, Vec<String>) {
    let (projection, _) = read_log(db).unwrap();
    let ledger = projection.ledger.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    let rest = projection.open_turn.is_some() || !projection.queue.is_empty();
    (projection.conversation, rest, ledger)
}

fn check(trial: usize, db: &Path, effects: &Path, accepted: &Path) {
    let (history, rest, ledger) = left(db);
    assert_eq!(history.last(), Some(&Item::assistant("done")), "trial {trial}: the turn finished");
    assert!(!rest, "trial {trial}: nothing left");
    let mut results: HashMap<std::sync::Arc<str>, Vec<String>> = HashMap::new();
    let mut calls = Vec::new();
    for item in &history {
        match item {
            Item::ToolCall(c) => calls.push(c.id.clone()),
            Item::ToolResult(r) => results.entry(r.call_id.clone()).or_default().push(r.content.to_string()),
            _ => {}
        }
    }
    for id in &calls {
        let got = results.get(id).map_or(0, Vec::len);
        assert_eq!(got, 1, "trial {trial}: call {id} has {got} results");
    }
    let happened = lines(effects);
    for id in &calls {
        let times = happened.iter().filter(|l| l.as_str() == &**id).count();
        assert!(times <= 1, "trial {trial}: the side effect of {id} happened {times} times");
        if results[id][0] == "effect done" {
            assert_eq!(times, 1, "trial {trial}: {id} says it ran, the effect happened {times} times");
        }
    }
    // Decisions are committed with the results of the calls they allowed: none of those is missing.
    let reviewed = ledger.iter().filter(|e| e.contains("\"tool_name\":\"effect\"")).count();
    let ran = calls.iter().filter(|id| results[*id][0] == "effect done").count();
    assert!(reviewed >= ran, "trial {trial}: {ran} calls ran but only {reviewed} decisions were kept");
    for (_, text) in STEERS {
        let shown = history.iter().filter(|i| **i == Item::user(text)).count();
        assert!(shown <= 1, "trial {trial}: '{text}' reached the model {shown} times");
        if lines(accepted).iter().any(|l| l == text) {
            assert_eq!(shown, 1, "trial {trial}: the accepted '{text}' reached the model {shown} times");
        }
    }
}
