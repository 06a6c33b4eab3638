//! The session log on SQLite (`SqliteLogStore`, WAL, `synchronous=NORMAL`), at the store's level: the latency one
//! append of a tool call's entries adds, one after the other, and the appends per second of 1000 sessions
//! appending at once (group commit shares transactions among them); and the runtime on the log: time added per tool
//! call on the real path (SQLite and in memory), appends per tool call, and opening a session of 10,000 entries.

use std::path::PathBuf;
use std::time::Instant;

use std::sync::Arc;

use noetic::agent::log::{Entry, Expect, LogStore, MemoryLogStore, StepPath, StoreError};
use noetic::model::{Item, ToolResult};
use noetic::turn::Input;
use noetic_sqlite::SqliteLogStore;

use crate::{BenchResult, Stats, measure, report};

/// A fresh scratch file, in a folder of its own: a store dropped a moment ago may still be closing its file, so
/// none is reused.
fn scratch(name: &str) -> BenchResult<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("noetic-bench-log-{name}-{}-{n}", std::process::id()));
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
        Entry::ToolStarted { turn: 1, step, call_id: format!("call-{}", n + 1).into(), tool: "search".into() },
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

/// µs per tool call of a session of `calls` calls on the real path, kept in `log`, its tool idempotent or not.
async fn runtime_tool_call_us(calls: usize, log: Arc<dyn LogStore>, idempotent: bool) -> BenchResult<f64> {
    let search = crate::real_path::search_tool_of(idempotent)?;
    Ok(crate::real_path::session_tool_calls_of(calls, false, crate::real_path::Kept::Log(log), search).await?.0)
}

/// A SQLite log holding one session of at least `entries` entries written by the runtime (so with its snapshots);
/// returns the file.
async fn long_session(entries: u64) -> BenchResult<PathBuf> {
    let path = scratch("long")?;
    let store = Arc::new(SqliteLogStore::open(&path).await?);
    let (runtime, _) = crate::real_path::wire_runtime_with(crate::real_path::Kept::Log(store.clone()))?;
    let session = runtime.open("long").await?;
    let mut turn = 0;
    while store.last("long").await? < entries {
        session.send(format!("turn {turn}: find where the retry policy is configured")).await?.await?;
        turn += 1;
    }
    Ok(path)
}

/// Milliseconds to open the session of `path` in a new runtime (file open, snapshot, the entries after it).
async fn open_ms(path: &PathBuf) -> BenchResult<f64> {
    let start = Instant::now();
    let store = Arc::new(SqliteLogStore::open(path).await?);
    let (runtime, _) = crate::real_path::wire_runtime_with(crate::real_path::Kept::Log(store))?;
    let session = runtime.open("long").await?;
    std::hint::black_box(session.history().len());
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// The runtime on the session log: per tool call, commits per tool call, opening a long session.
pub async fn runtime_figures() -> BenchResult<()> {
    let calls = 100;
    let plain = measure(5, || async { Ok(crate::real_path::session_tool_calls(calls, false).await?.0) }).await?;
    let memory = measure(5, || runtime_tool_call_us(calls, Arc::new(MemoryLogStore::new()), false)).await?;
    report("memory_log_added_per_tool_call_us", Stats::exact(memory.median - plain.median), "us", "");
    // A tool that is not idempotent has its outcome handed over before the next model request (held up to 1 ms for
    // the response's write, written while the model answers otherwise); an idempotent one's waits for the next
    // call's start.
    for (idempotent, kind) in [(false, ""), (true, "_idempotent")] {
        let sqlite = measure(5, || async {
            runtime_tool_call_us(calls, Arc::new(SqliteLogStore::open(scratch("calls")?).await?), idempotent).await
        })
        .await?;
        report(&format!("sqlite_log_real_tool_call{kind}_us_100_calls"), sqlite, "us", "");
        let added = Stats::exact(sqlite.median - plain.median);
        report(&format!("sqlite_log_added_per_tool_call{kind}_us"), added, "us", "<= 50");
        let store = Arc::new(SqliteLogStore::open(scratch("commits")?).await?);
        runtime_tool_call_us(calls, store.clone(), idempotent).await?;
        // A turn of N calls commits N + 1 times: each call's start (with the previous call's outcome), and the
        // turn's end (with the last outcome and the answer), which a turn without calls commits as well.
        let turns = calls.div_ceil(crate::real_path::ROUNDS_PER_TURN) as f64;
        let commits = store.commits() as f64;
        let per_turn = Stats::exact(commits / turns);
        report(&format!("sqlite_log_commits_per_turn_of_10_tool_calls{kind}"), per_turn, "commits", "");
        let per_call = Stats::exact((commits - turns) / calls as f64);
        report(&format!("sqlite_log_commits_per_tool_call{kind}_turn_end_aside"), per_call, "commits", "<= 1");
    }
    let path = long_session(10_000).await?;
    let mut samples = Vec::new();
    for _ in 0..7 {
        samples.push(open_ms(&path).await?);
    }
    report("sqlite_log_open_session_10k_entries_ms", Stats::of(samples, None), "ms", "<= 20");
    Ok(())
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
        let figures = runtime_figures().await;
        remove_scratch();
        figures
    })
}

/// Only the runtime's figures (`noetic-bench store-runtime`), for comparing builds quickly.
pub fn runtime_only() -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let figures = rt.block_on(runtime_figures());
    remove_scratch();
    figures
}

/// Removes this process's scratch folders.
fn remove_scratch() {
    let ours = "noetic-bench-log-";
    let pid = format!("-{}-", std::process::id());
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(ours) && name.contains(&pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
