//! The PostgreSQL session-log store (`PgLogStore`, run when a server is up: `scripts/postgres.sh start`, or
//! `NOETIC_POSTGRES_URL`), in a database of its own: the latency of one append of a tool call's entries, appends
//! per second with 1000 sessions appending at once (with group commit, and with one transaction per append for
//! comparison), and how late a 1 ms ticker on the same runtime runs meanwhile (whether anything blocks a worker;
//! beside it, the same ticker as an OS thread: what the machine itself adds, the server sharing its two cores).

use std::time::{Duration, Instant};

use noetic::agent::log::{Entry, Expect, LogStore, StepPath};
use noetic::model::{Item, ToolResult};
use noetic::turn::Input;
use noetic_postgres::testing::Throwaway;
use noetic_postgres::{PgLogOptions, PgLogStore};

use crate::{BenchResult, Stats, measure, report};

/// What a tool call appends: its outcome for the turn core, its result in the conversation, the next call's start.
fn tool_batch() -> Vec<Entry> {
    let step = StepPath::default().child("act", 0);
    let result = ToolResult::ok("call-1", "r".repeat(350));
    vec![
        Entry::Core { turn: 1, step: step.clone(), input: Input::ToolDone(result.clone()) },
        Entry::Appended { turn: 1, items: vec![Item::ToolResult(result)] },
        Entry::ToolStarted { turn: 1, step, call_id: "call-2".into(), tool: "search".into() },
    ]
}

/// µs per append of `batch`, `n` appends one after the other to a new session.
async fn append_us(store: &PgLogStore, batch: &[Entry], n: usize) -> BenchResult<f64> {
    let key = format!("bench-seq-{}", fastrand::u64(..));
    let start = Instant::now();
    let mut last = 0;
    for _ in 0..n {
        last = store.append(&key, Expect::At(last), batch).await?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// What one load run measured.
struct Load {
    appends_per_s: f64,
    appends_per_transaction: f64,
    ticker_p50_ms: f64,
    ticker_p99_ms: f64,
    /// The same ticker as an OS thread sleeping 1 ms at a time: what the machine itself adds.
    thread_p99_ms: f64,
}

/// `sessions` sessions appending `each` batches one after the other, all at once, while a 1 ms ticker runs.
async fn load(store: &PgLogStore, sessions: usize, each: usize) -> BenchResult<Load> {
    let batch = tool_batch();
    let before = store.stats();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let ticking = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(1));
        let mut late = Vec::new();
        loop {
            tokio::select! {
                due = ticker.tick() => late.push(due.elapsed().as_secs_f64() * 1e3),
                _ = &mut stopped => return late,
            }
        }
    });
    let (thread_stop, thread_stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let mut late = Vec::new();
        while thread_stopped.try_recv().is_err() {
            let due = Instant::now() + Duration::from_millis(1);
            std::thread::sleep(Duration::from_millis(1));
            late.push(due.elapsed().as_secs_f64() * 1e3);
        }
        late
    });
    let run = format!("{:x}", fastrand::u64(..));
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let (store, batch, key) = (store.clone(), batch.clone(), format!("bench-load-{run}-{s}"));
            tokio::spawn(async move {
                let mut last = 0;
                for _ in 0..each {
                    last = store.append(&key, Expect::At(last), &batch).await.map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = thread_stop.send(());
    let mut late = ticking.await?;
    let mut thread_late = thread.join().map_err(|_| "the control thread panicked")?;
    let after = store.stats();
    let appends = (sessions * each) as f64;
    Ok(Load {
        appends_per_s: appends / elapsed,
        appends_per_transaction: appends / (after.transactions - before.transactions).max(1) as f64,
        ticker_p50_ms: quantile(&mut late, 0.5),
        ticker_p99_ms: quantile(&mut late, 0.99),
        thread_p99_ms: quantile(&mut thread_late, 0.99),
    })
}

/// The ticker's lateness with nothing else running (the timer's own granularity), p99 in ms.
async fn idle_ticker_p99_ms() -> f64 {
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    let mut late = Vec::with_capacity(2000);
    for _ in 0..2000 {
        late.push(ticker.tick().await.elapsed().as_secs_f64() * 1e3);
    }
    quantile(&mut late, 0.99)
}

fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN)
}

/// Tool-calling turns per second of `sessions` sessions running at once on the real path, split among `workers`
/// runtimes (each with a pool of its own, as workers would have) on one database; and the p99 lateness of a 1 ms
/// ticker on the same tokio runtime meanwhile. No workers: one runtime with each session's log in memory.
async fn runtime_turns_per_s(url: &str, workers: usize, sessions: usize, turns: usize) -> BenchResult<(f64, f64)> {
    Ok(runtime_load(url, workers, sessions, turns, Turns::Real(Duration::ZERO)).await?.0)
}

/// The turns a load's sessions run.
#[derive(Clone, Copy, Debug)]
enum Turns {
    /// The real path's: ten calls of the search tool on the fake OpenAI transport, then an answer; the model
    /// answers each request this long after it was sent.
    Real(Duration),
    /// The turns of the old store's figure (`noetic-bench pg` before the session log, 531–594 turns/s): a scripted
    /// model asks for a no-op tool once, then answers.
    OneCall,
}

impl Turns {
    /// A runtime keeping its sessions in `log`, its model and tools running these turns.
    fn runtime(self, log: std::sync::Arc<dyn noetic::agent::log::LogStore>) -> BenchResult<noetic::agent::Runtime> {
        match self {
            Turns::Real(latency) => {
                let model = crate::real_path::WireModel::answering_after(latency);
                let kept = crate::real_path::Kept::Log(log);
                Ok(crate::real_path::wire_runtime_on(kept, crate::real_path::search_tool()?, model)?.0)
            }
            Turns::OneCall => {
                use noetic::model::{Item, ModelResponse};
                let model = noetic::testing::ScriptedModel::responder(|request| {
                    Ok(match request.history.last() {
                        Some(Item::ToolResult(_)) => ModelResponse::text("ok"),
                        _ => ModelResponse::tool_calls([("c", "noop", serde_json::json!({}))]),
                    })
                })
                .without_recording();
                let builder = noetic::agent::Runtime::builder().model(std::sync::Arc::new(model));
                Ok(builder.tool(crate::probe::noop_tool()?).log_store(log).build()?)
            }
        }
    }
}

/// [`runtime_turns_per_s`] of `these` turns, with what the workers' stores wrote (summed).
async fn runtime_load(
    url: &str,
    workers: usize,
    sessions: usize,
    turns: usize,
    these: Turns,
) -> BenchResult<((f64, f64), noetic_postgres::PgLogStats)> {
    let mut runtimes = Vec::with_capacity(workers.max(1));
    let mut stores = Vec::with_capacity(workers);
    for w in 0..workers {
        let store = std::sync::Arc::new(PgLogStore::connect(url).await?);
        stores.push(store.clone());
        runtimes.push((w, these.runtime(store)?));
    }
    if workers == 0 {
        runtimes.push((0, these.runtime(std::sync::Arc::new(noetic::agent::log::MemoryLogStore::new()))?));
    }
    let workers = runtimes.len();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let ticking = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(1));
        let mut late = Vec::new();
        loop {
            tokio::select! {
                due = ticker.tick() => late.push(due.elapsed().as_secs_f64() * 1e3),
                _ = &mut stopped => return late,
            }
        }
    });
    let run = format!("{:x}", fastrand::u64(..));
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let runtime = runtimes[s % workers].1.clone();
            let key = format!("bench-rt-{run}-{s}");
            // Sessions whose model takes time arrive over that time, as users do, not all in one instant.
            let arrival = match these {
                Turns::Real(latency) => latency.mul_f64(fastrand::f64()),
                Turns::OneCall => Duration::ZERO,
            };
            tokio::spawn(async move {
                if !arrival.is_zero() {
                    tokio::time::sleep(arrival).await;
                }
                let session = runtime.open(&key).await.map_err(|e| e.to_string())?;
                for t in 0..turns {
                    let turn =
                        session.send(format!("turn {t}: find the retry policy")).await.map_err(|e| e.to_string())?;
                    turn.await.map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = stop.send(());
    let mut late = ticking.await?;
    let mut written = noetic_postgres::PgLogStats::default();
    for store in &stores {
        let stats = store.stats();
        written.transactions += stats.transactions;
        written.appends += stats.appends;
    }
    Ok((((sessions * turns) as f64 / elapsed, quantile(&mut late, 0.99)), written))
}

/// The runtime on the log: per tool call, and turns/s of 1000 sessions on 1, 2 and 4 workers, with the ticker's
/// lateness; beside them the same load with each session's log in memory (what the CPU alone does to the ticker).
async fn runtime_figures(url: &str) -> BenchResult<()> {
    let plain = measure(5, || async { Ok(crate::real_path::session_tool_calls(100, false).await?.0) }).await?;
    // A tool that is not idempotent has its outcome handed over before the next model request (written with the
    // response when the model answers within the writer's hold); an idempotent one's waits for the next call's
    // start. Both, alternating, and how many transactions a tool call of either kind takes.
    let (mut logged, mut idempotent, mut transactions) = (Vec::new(), Vec::new(), [0.0; 2]);
    for run in 0..6 {
        for (i, kind) in [false, true].into_iter().enumerate() {
            let store = std::sync::Arc::new(PgLogStore::connect(url).await?);
            let search = crate::real_path::search_tool_of(kind)?;
            let kept = crate::real_path::Kept::Log(store.clone());
            let us = crate::real_path::session_tool_calls_of(100, false, kept, search).await?.0;
            transactions[i] = store.stats().transactions as f64 / 100.0;
            // The first run of each warms the database and the pool up.
            if run > 0 {
                if kind { idempotent.push(us) } else { logged.push(us) }
            }
        }
    }
    let (logged, idempotent) = (Stats::of(logged, None), Stats::of(idempotent, None));
    report("pg_log_real_tool_call_us_100_calls", logged, "us", "");
    report("pg_log_added_per_tool_call_us", Stats::exact(logged.median - plain.median), "us", "<= 300");
    report("pg_log_real_tool_call_us_100_calls_idempotent", idempotent, "us", "");
    report("pg_log_added_per_tool_call_us_idempotent", Stats::exact(idempotent.median - plain.median), "us", "<= 300");
    // 100 calls in turns of 10; a turn's end (with its last outcome and the answer) is a transaction of its own, as
    // a turn without calls has: the calls' own are the rest.
    let turns = 100usize.div_ceil(crate::real_path::ROUNDS_PER_TURN) as f64;
    for (all, kind) in transactions.into_iter().zip(["", "_idempotent"]) {
        let per_turn = Stats::exact(all * 100.0 / turns);
        report(&format!("pg_log_transactions_per_turn_of_10_tool_calls{kind}"), per_turn, "transactions", "");
        let per_call = Stats::exact((all * 100.0 - turns) / 100.0);
        report(&format!("pg_log_transactions_per_tool_call{kind}_turn_end_aside"), per_call, "transactions", "<= 1");
    }
    for workers in [0, 1, 2, 4] {
        let (mut rates, mut lateness) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (rate, p99) = runtime_turns_per_s(url, workers, 1000, 2).await?;
            rates.push(rate);
            lateness.push(p99);
        }
        let which = if workers == 0 { "memory_log".to_owned() } else { format!("{workers}_workers") };
        report(&format!("pg_log_runtime_turns_per_s_1000_sessions_{which}"), Stats::of(rates, None), "turns/s", "");
        let name = format!("pg_log_runtime_ticker_lateness_p99_ms_1000_sessions_{which}");
        report(&name, Stats::of(lateness, None), "ms", if workers == 0 { "" } else { "< 2" });
    }
    // The turns of the old store's figure (one call, then an answer) on 1000 sessions and one worker: that figure's
    // load (`noetic-bench pg` before the session log) was 8 sessions per worker.
    let mut rates = Vec::new();
    for _ in 0..3 {
        rates.push(runtime_load(url, 1, 1000, 2, Turns::OneCall).await?.0.0);
    }
    report("pg_log_runtime_turns_per_s_1000_sessions_1_worker_one_call_turns", Stats::of(rates, None), "turns/s", "");
    // 1000 sessions whose model takes time to answer (from half to one and a half times 100 or 300 ms; a real one
    // takes longer), arriving over that time: their turns commit as above (~16,000 and ~5,500 appends/s), the CPU
    // not saturated, so a worker blocked by store I/O would show here instead of hiding behind a full run queue.
    // Beside each, the same sessions with their logs in memory: what the machine and the runtime alone give.
    for model_ms in [100, 300] {
        for workers in [1, 0] {
            let mut lateness = Vec::new();
            for _ in 0..3 {
                let these = Turns::Real(Duration::from_millis(model_ms));
                lateness.push(runtime_load(url, workers, 1000, 2, these).await?.0.1);
            }
            let (which, target) = if workers == 0 { ("memory_log", "") } else { ("1_worker", "< 2") };
            let name = format!("pg_log_runtime_ticker_lateness_p99_ms_1000_sessions_{which}_model_{model_ms}ms");
            report(&name, Stats::of(lateness, None), "ms", target);
        }
    }
    // #36 item 5: 1000 sessions on each worker (2 and 4 workers: 2000 and 4000 sessions on the one database).
    for workers in [2, 4] {
        let mut rates = Vec::new();
        for _ in 0..3 {
            rates.push(runtime_turns_per_s(url, workers, 1000 * workers, 2).await?.0);
        }
        let name = format!("pg_log_runtime_turns_per_s_1000_sessions_per_worker_{workers}_workers");
        report(&name, Stats::of(rates, None), "turns/s", "");
    }
    Ok(())
}

/// Only the runtime's figures (`noetic-bench pg-runtime`), for comparing builds quickly.
pub fn runtime_only() -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let url = noetic_postgres::testing::server_url();
    rt.block_on(async {
        let db = Throwaway::new(&url, "bench_log").await?;
        runtime_figures(&db.url).await?;
        db.remove().await?;
        BenchResult::Ok(())
    })
}

/// One load alone (`noetic-bench pg-load [WORKERS] [SESSIONS] [RUNS] [MODEL_MS | one-call] [TURNS]`, 1 worker,
/// 1000 sessions, 5 runs, real-path turns with a model answering at once and 2 turns a session by default; 0
/// workers: the logs in memory; `one-call`: the old store's turns), for comparing builds and profiling: turns/s
/// and the ticker's p99 per run.
pub fn load_only(args: &[String]) -> BenchResult<()> {
    let number = |i: usize, default: usize| -> BenchResult<usize> {
        match args.get(i) {
            Some(arg) => Ok(arg.parse().map_err(|_| format!("'{arg}' is not a number"))?),
            None => Ok(default),
        }
    };
    let (workers, sessions, runs, turns) = (number(0, 1)?, number(1, 1000)?, number(2, 5)?, number(4, 2)?);
    let these = match args.get(3).map(String::as_str) {
        Some("one-call") => Turns::OneCall,
        _ => Turns::Real(Duration::from_millis(number(3, 0)? as u64)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let url = noetic_postgres::testing::server_url();
    rt.block_on(async {
        let db = Throwaway::new(&url, "bench_load").await?;
        for _ in 0..runs {
            let ((rate, p99), written) = runtime_load(&db.url, workers, sessions, turns, these).await?;
            let turns = (sessions * turns) as f64;
            println!(
                "turns/s {rate:.0} ticker_p99_ms {p99:.2} appends/turn {:.2} transactions/turn {:.3}",
                written.appends as f64 / turns,
                written.transactions as f64 / turns
            );
        }
        db.remove().await?;
        BenchResult::Ok(())
    })
}

/// The figures; without a server, said on stderr.
pub fn figures() -> BenchResult<()> {
    // As `noetic serve` runs: a multi-thread runtime.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let url = noetic_postgres::testing::server_url();
    if let Err(e) = rt.block_on(noetic_postgres::testing::client(&url)) {
        eprintln!(
            "pg_log_* figures skipped: no PostgreSQL at {url} ({e}; scripts/postgres.sh start, or set NOETIC_POSTGRES_URL)"
        );
        return Ok(());
    }
    rt.block_on(async {
        let db = Throwaway::new(&url, "bench_log").await?;
        let store = PgLogStore::connect(&db.url).await?;
        let batch = tool_batch();
        let sequential = measure(5, || append_us(&store, &batch, 500)).await?;
        report("pg_log_append_tool_batch_us", sequential, "us", "<= 300");
        let (mut rate, mut per_tx, mut p50, mut p99, mut thread) = (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..3 {
            let run = load(&store, 1000, 20).await?;
            rate.push(run.appends_per_s);
            per_tx.push(run.appends_per_transaction);
            p50.push(run.ticker_p50_ms);
            p99.push(run.ticker_p99_ms);
            thread.push(run.thread_p99_ms);
        }
        report("pg_log_appends_per_s_1000_sessions", Stats::of(rate, None), "appends/s", "");
        report("pg_log_appends_per_transaction_1000_sessions", Stats::of(per_tx, None), "appends", "");
        report("pg_log_ticker_lateness_p50_ms_1000_sessions", Stats::of(p50, None), "ms", "");
        report("pg_log_ticker_lateness_p99_ms_1000_sessions", Stats::of(p99, None), "ms", "< 2");
        report("pg_log_thread_sleep_lateness_p99_ms_1000_sessions", Stats::of(thread, None), "ms", "");
        report("pg_log_ticker_lateness_p99_ms_idle", Stats::exact(idle_ticker_p99_ms().await), "ms", "");
        // The same load with one transaction per append: what group commit gives.
        let single =
            PgLogStore::connect_with(&db.url, PgLogOptions { max_batch: 1, ..PgLogOptions::default() }).await?;
        let run = load(&single, 1000, 5).await?;
        report(
            "pg_log_appends_per_s_1000_sessions_one_per_transaction",
            Stats::exact(run.appends_per_s),
            "appends/s",
            "",
        );
        drop((store, single));
        runtime_figures(&db.url).await?;
        db.remove().await?;
        BenchResult::Ok(())
    })
}
