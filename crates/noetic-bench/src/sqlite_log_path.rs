//! The session log on SQLite (`SqliteLogStore`, WAL, `synchronous=NORMAL`), at the store's level: the latency one
//! append of a tool call's entries adds, one after the other, and the appends per second of 1000 sessions
//! appending at once (group commit shares transactions among them). The runtime's per-tool-call figures come when
//! the runtime writes the log.

use std::path::PathBuf;
use std::time::Instant;

use noetic::agent::log::{Entry, Expect, LogStore, StepPath, StoreError};
use noetic::model::{Item, ToolResult};
use noetic::turn::Input;
use noetic_sqlite::SqliteLogStore;

use crate::{BenchResult, Stats, measure, report};

/// A fresh scratch file.
fn scratch(name: &str) -> BenchResult<PathBuf> {
    let dir = std::env::temp_dir().join(format!("noetic-bench-log-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join("noetic.db"))
}

/// What a tool call appends in one go: the finished call's outcome (a ~350-byte result) for the turn core, the
/// result joining the conversation, and the next call's start.
fn tool_call(n: usize) -> Vec<Entry> {
    let step = StepPath("agent#0".into());
    let result = ToolResult::ok(format!("call-{n}"), format!("src/config.rs:42: retry = 3\n{}", "y".repeat(320)));
    vec![
        Entry::Core { turn: 1, step: step.clone(), input: Input::ToolDone(result.clone()) },
        Entry::Appended { turn: 1, items: vec![Item::ToolResult(result)] },
        Entry::ToolStarted { turn: 1, step, call_id: format!("call-{}", n + 1), tool: "search".into() },
    ]
}

/// µs per append of [`tool_call`]'s three entries, `count` appends one after the other to one session.
async fn append_us(count: usize) -> BenchResult<f64> {
    let store = SqliteLogStore::open(scratch("append")?).await?;
    let batches: Vec<Vec<Entry>> = (0..count).map(tool_call).collect();
    let mut last = 0;
    let start = Instant::now();
    for batch in &batches {
        last = store.append("bench", Expect::At(last), batch).await?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / count as f64)
}

/// Appends per second of `sessions` sessions each appending [`tool_call`]'s entries `each` times in a loop, and
/// how many appends shared a transaction on average.
async fn appends_per_s(sessions: usize, each: usize) -> BenchResult<(f64, f64)> {
    let store = SqliteLogStore::open(scratch("sessions")?).await?;
    let batches: std::sync::Arc<Vec<Vec<Entry>>> = std::sync::Arc::new((0..each).map(tool_call).collect());
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let (store, batches) = (store.clone(), batches.clone());
            tokio::spawn(async move {
                let (key, mut last) = (format!("session-{s}"), 0);
                for batch in batches.iter() {
                    last = store.append(&key, Expect::At(last), batch).await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let appends = (sessions * each) as f64;
    Ok((appends / elapsed, appends / store.commits().max(1) as f64))
}

/// The session log's figures, on a runtime of two workers (as `noetic serve` has).
pub fn figures() -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        report("sqlite_log_append_us_tool_call_entries", measure(7, || append_us(2000)).await?, "us", "");
        let (mut rates, mut shared) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (rate, per_commit) = appends_per_s(1000, 20).await?;
            rates.push(rate);
            shared.push(per_commit);
        }
        report("sqlite_log_appends_per_s_1000_sessions", Stats::of(rates, None), "appends/s", "");
        report("sqlite_log_appends_per_commit_1000_sessions", Stats::of(shared, None), "appends", "");
        BenchResult::Ok(())
    })
}
