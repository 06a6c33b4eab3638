//! The cost of durable sessions on SQLite (WAL, `synchronous=NORMAL`): time added per tool call on the real
//! path, opening a session with 1000 turns of history, and the file size per 1000 turns.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use noetic::agent::{JournalWrite, SessionStore, StoreCommit};
use noetic::model::{Item, ToolCall, ToolResult};
use noetic_sqlite::SqliteStore;

use crate::BenchResult;
use crate::real_path;

/// A fresh scratch file.
fn scratch(name: &str) -> BenchResult<PathBuf> {
    let dir = std::env::temp_dir().join(format!("noetic-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join("noetic.db"))
}

/// µs per tool call of a session of `calls` calls on the real path, with the SQLite store.
pub async fn tool_call_us(calls: usize) -> BenchResult<f64> {
    let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(scratch("calls")?)?);
    Ok(real_path::session_tool_calls_with(calls, false, Some(store)).await?.0)
}

/// One turn's items: the user's message, a tool call with a few hundred bytes of result, the answer.
fn turn_items(n: usize) -> Vec<Item> {
    let id = format!("call-{n}");
    vec![
        Item::user(format!("turn {n}: find where the retry policy is configured")),
        Item::ToolCall(ToolCall { id: id.clone(), name: "search".into(), arguments: r#"{"query":"retry"}"#.into() }),
        Item::ToolResult(ToolResult::ok(
            id,
            format!("src/config.rs:42: retry = RetryPolicy::new(3, ...)\n{}", "y".repeat(300)),
        )),
        Item::assistant("The retry policy lives in config.rs; I changed nothing."),
    ]
}

/// A store holding one session of `turns` turns; returns its path.
fn session_of(turns: usize) -> BenchResult<PathBuf> {
    let path = scratch("open")?;
    let store = SqliteStore::open(&path)?;
    let mut held = 0;
    for n in 0..turns {
        let items = turn_items(n);
        store.commit(
            "big",
            StoreCommit { first: held, items: &items, injected: &[], journal: JournalWrite::Keep, ledger: &[] },
        )?;
        held += items.len();
    }
    Ok(path)
}

/// Milliseconds to open a session with `turns` turns of history in a runtime (file open, ownership, the whole
/// conversation read and restored), median of `reps`; and the file's bytes per 1000 turns.
pub fn open_ms_and_bytes(turns: usize, reps: usize) -> BenchResult<(Vec<f64>, f64)> {
    let path = session_of(turns)?;
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path)?);
        let (runtime, _) = real_path::wire_runtime_with(Some(store))?;
        let session = runtime.try_session("big")?;
        std::hint::black_box(session.history().len());
        samples.push(start.elapsed().as_secs_f64() * 1e3);
    }
    // Fold the WAL into the file before weighing it.
    noetic_sqlite::testing::execute(&path, "PRAGMA wal_checkpoint(TRUNCATE);")?;
    let bytes = std::fs::metadata(&path)?.len() as f64;
    Ok((samples, bytes * 1000.0 / turns as f64))
}
