//! The benchmark suite, one JSON line per figure (`{"name", "value", "unit", "min", "max", "cold", "target"}`):
//! the runtime's bare overhead with an instant scripted model, the providers' SSE framing and stream parsing (see
//! [`stream_path`]), and the path users run
//! (`real_*`, see [`real_path`]): runtime → session → turn, one event subscriber, OpenAI wire encoding and parsing.
//!
//! Run with `cargo run --profile profiling -p noetic-bench` (the release build with line tables, for profilers). Each timing figure's `value` is the median of several
//! repetitions after a first, cold run (reported as `cold`); `min` and `max` bound the repetitions. Memory figures
//! run in a child process of their own (`rss_probe rss-session` / `rss-idle`, a binary linking only the runtime) so
//! their peak is not polluted by the other benchmarks. `serve_load` (a binary of its own) loads `noetic-server`.

mod agui_path;
mod alloc_count;
mod ledger_path;
mod mcp_path;
mod otel_path;
mod pg_log_path;
// The memory figures' part of it runs in `rss_probe`.
#[allow(dead_code)]
mod probe;
mod real_path;
mod replay_path;
mod sqlite_log_path;
mod stream_path;
mod window_path;

use std::sync::Arc;
use std::time::{Duration, Instant};

use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use serde_json::json;

use probe::{BenchResult, bare_batches, bare_tool_calls, session_turns, ten_rules};

/// Counts allocations for the `real_allocations_*` figures (off, and nearly free, outside them).
#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

/// A figure: the median of the repetitions, their range, and the first (cold) run when there was one.
#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    min: f64,
    max: f64,
    cold: Option<f64>,
}

impl Stats {
    fn of(mut samples: Vec<f64>, cold: Option<f64>) -> Stats {
        samples.sort_by(|a, b| a.total_cmp(b));
        let at = |i: usize| samples.get(i).copied().unwrap_or(f64::NAN);
        Stats { median: at(samples.len() / 2), min: at(0), max: at(samples.len().saturating_sub(1)), cold }
    }

    /// A figure that is one exact number (a count, a ratio of counts).
    fn exact(value: f64) -> Stats {
        Stats { median: value, min: value, max: value, cold: None }
    }
}

fn report(name: &str, stats: Stats, unit: &str, target: &str) {
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    let mut line = json!({
        "name": name, "value": round(stats.median), "unit": unit,
        "min": round(stats.min), "max": round(stats.max), "target": target,
    });
    if let (Some(cold), Some(map)) = (stats.cold, line.as_object_mut()) {
        map.insert("cold".into(), json!(round(cold)));
    }
    println!("{line}");
}

/// Runs `f` once cold, then `reps` times; the statistics of what `f` reports.
async fn measure<F, Fut>(reps: usize, mut f: F) -> BenchResult<Stats>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = BenchResult<f64>>,
{
    let cold = f().await?;
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        samples.push(f().await?);
    }
    Ok(Stats::of(samples, Some(cold)))
}

async fn run_step_us() -> BenchResult<f64> {
    const N: u32 = 10_000;
    let step = Step::run("noop", |x: u64, _| async move { Ok(x + 1) }).build()?;
    let looped = Step::loop_("loop", [step]).until(until::max_steps(N)).max_iterations(N + 1).build()?;
    let ctx = StepContext::new();
    let start = Instant::now();
    looped.execute(0, &ctx).await?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(N))
}

async fn fork_path_us() -> BenchResult<f64> {
    const N: usize = 1000;
    let path = Step::run("p", |x: u64, _| async move { Ok(x) }).build()?;
    let fork = Step::fork("f", ForkMode::All).paths(vec![path; N]).merge(|v, _| Ok(v.len() as u64)).build()?;
    let ctx = StepContext::new();
    let start = Instant::now();
    fork.execute(1, &ctx).await?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / N as f64)
}

/// One turn of `ROUNDS` model calls each asking for one no-op tool, per tool call.
async fn tool_call_us(layers: Vec<Arc<dyn MemoryLayer>>) -> BenchResult<f64> {
    const ROUNDS: usize = 1000;
    let start = Instant::now();
    bare_tool_calls(ROUNDS, layers).await?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64)
}

/// Per tool call of a bare step whose responses ask for `batch` concurrent-safe no-op calls, run up to `limit`
/// at once.
async fn batch_call_us(batch: usize, limit: u32) -> BenchResult<f64> {
    let rounds = 1000 / batch;
    let start = Instant::now();
    bare_batches(rounds, batch, limit).await?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / (rounds * batch) as f64)
}

/// What `parallel_tools(4)` costs per tool call against one call after another (#32: within 10 %): on the bare
/// path (one call per response, so nothing runs together) and with four concurrent-safe calls per response (they
/// run as one group). Each sample runs both and divides, so load on the machine cancels out.
async fn parallel_tools_figures() -> BenchResult<()> {
    for (batch, name) in [(1, "bare"), (4, "batch_of_4")] {
        let ratio =
            measure(31, || async { Ok(batch_call_us(batch, 4).await? / batch_call_us(batch, 1).await?) }).await?;
        report(&format!("parallel_tools_4_{name}_ratio"), ratio, "x", "<= 1.1");
    }
    report("tool_call_parallel_tools_4_batch_of_4_us", measure(15, || batch_call_us(4, 4)).await?, "us", "");
    report("tool_call_sequential_batch_of_4_us", measure(15, || batch_call_us(4, 1)).await?, "us", "");
    // Exact, and the same in any build: what a group adds per call that timing on a loaded machine blurs.
    for (limit, name) in [(4, "parallel_tools_4"), (1, "sequential")] {
        let (allocations, run) = alloc_count::allocations_during(bare_batches(250, 4, limit)).await;
        run?;
        report(
            &format!("allocations_per_tool_call_{name}_batch_of_4"),
            Stats::exact(allocations as f64 / 1000.0),
            "",
            "",
        );
    }
    Ok(())
}

/// Runs `turns` turns of one session (each: model asks for the no-op tool, then answers); returns each turn's
/// duration.
async fn turn_growth_ratio() -> BenchResult<f64> {
    let d = session_turns(1000).await?;
    let sum = |r: std::ops::Range<usize>| d[r].iter().map(Duration::as_secs_f64).sum::<f64>();
    Ok(sum(990..1000) / sum(10..20))
}

/// One 2 MiB event arriving in 16-byte chunks, through the providers' SSE framing (`noetic-http`), in ms.
async fn sse_framing_ms() -> BenchResult<f64> {
    const SIZE: usize = 2 * 1024 * 1024;
    let mut body = b"data: ".to_vec();
    body.resize(body.len() + SIZE, b'x');
    body.extend_from_slice(b"\n\n");
    // Owned chunks, as an HTTP body delivers them; splitting is set-up, not measured.
    let chunks: Vec<Vec<u8>> = body.chunks(16).map(<[u8]>::to_vec).collect();
    let start = Instant::now();
    let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    let events: Vec<_> =
        futures::StreamExt::collect(noetic_http::sse_events(bytes, noetic_http::DEFAULT_MAX_BODY_BYTES)).await;
    let elapsed = start.elapsed().as_secs_f64() * 1e3;
    match events.as_slice() {
        [Ok(event)] if event.data.len() == SIZE => Ok(elapsed),
        _ => Err(format!("the 2 MiB event was not framed as one event: {} results", events.len()).into()),
    }
}

fn child(arg: &str) -> BenchResult<f64> {
    // The memory figures run in `rss_probe` (built beside this binary), which links only the runtime: a user's
    // program does not carry the suite's SQLite, MCP and HTTP code either.
    let exe = std::env::current_exe()?;
    let probe = exe.with_file_name(format!("rss_probe{}", std::env::consts::EXE_SUFFIX));
    if !probe.exists() {
        build_probe(&exe)?;
    }
    let out = std::process::Command::new(probe).arg(arg).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.trim().parse::<f64>()?)
}

/// Builds `rss_probe` with the profile of this binary (`cargo run` builds only the suite's own binary): the
/// profile is the name of the directory the binary is in (`debug` is the `dev` profile's).
fn build_probe(exe: &std::path::Path) -> BenchResult<()> {
    let cargo = std::env::var_os("CARGO")
        .ok_or("rss_probe is missing: build it with cargo build --profile profiling -p noetic-bench")?;
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "-p", "noetic-bench", "--bin", "rss_probe"]);
    match exe.parent().and_then(|dir| dir.file_name()).and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
    }
    let status = cmd.status()?;
    if status.success() { Ok(()) } else { Err("building rss_probe failed".into()) }
}

/// Microseconds to copy `bytes` bytes into a fresh buffer (median of many copies).
fn copy_us(bytes: usize) -> f64 {
    let source = vec![7u8; bytes.max(1)];
    let mut samples = Vec::with_capacity(51);
    for _ in 0..51 {
        let start = std::time::Instant::now();
        let copy = std::hint::black_box(&source).clone();
        std::hint::black_box(&copy);
        samples.push(start.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The figures of the path users run (see [`real_path`]).
fn real_path_figures(rt: &tokio::runtime::Runtime) -> BenchResult<()> {
    rt.block_on(async {
        for calls in [10, 100, 1000] {
            let reps = if calls == 1000 { 3 } else { 9 };
            // Request bytes are the same every run: the session is deterministic.
            let (_, bytes) = real_path::session_tool_calls(calls, true).await?;
            let per_call = measure(reps, || async { Ok(real_path::session_tool_calls(calls, true).await?.0) }).await?;
            report(
                &format!("real_tool_call_us_{calls}_calls"),
                per_call,
                "us",
                if calls == 1000 { "<= 60" } else { "" },
            );
            report(&format!("real_request_bytes_per_call_{calls}_calls"), Stats::exact(bytes), "bytes", "");
            // Set-up included, as in the time: a new runtime per session.
            let (allocations, run) = alloc_count::allocations_during(real_path::session_tool_calls(calls, true)).await;
            run?;
            let allocations = Stats::exact(allocations as f64 / calls as f64);
            report(&format!("real_allocations_per_tool_call_{calls}_calls"), allocations, "allocations", "");
            // The physical floor: copying one request's bytes once (the body must hold them all).
            let floor = copy_us(bytes as usize);
            report(&format!("real_body_copy_floor_us_{calls}_calls"), Stats::exact(floor), "us", "");
            report(
                &format!("real_tool_call_us_{calls}_calls_above_copy_floor"),
                Stats::exact(per_call.median - floor),
                "us",
                "",
            );
        }
        let unwatched = measure(5, || real_path::turn_us(false)).await?;
        let watched = measure(5, || real_path::turn_us(true)).await?;
        report("real_turn_us_unwatched", unwatched, "us", "");
        report("real_turn_us_one_subscriber", watched, "us", "");
        let added = (watched.median / unwatched.median - 1.0) * 100.0;
        report("real_subscriber_overhead_pct", Stats::exact(added), "%", "<= 15");
        for (name, during_model_call) in [("tool", false), ("model_call", true)] {
            let samples = real_path::cross_thread_steer_us(200, during_model_call).await?;
            let p = |q| real_path::quantile(&samples, q);
            report(&format!("steer_cross_thread_during_{name}_p50_us"), Stats::exact(p(0.5)), "us", "");
            report(&format!("steer_cross_thread_during_{name}_p99_us"), Stats::exact(p(0.99)), "us", "<= 20");
        }
        BenchResult::Ok(())
    })?;
    let answering: &real_path::MakeRuntime = &real_path::answering_runtime;
    let steered: &real_path::MakeRuntime = &probe::steered_runtime;
    for (sessions, kind, make) in [(1_000, "", answering), (10_000, "", answering), (10_000, "steered_", steered)] {
        let figure = |what: &str| format!("{what}_{sessions}_{kind}sessions");
        // Alternated, so a slow spell of the machine weighs on every count alike.
        let (mut one, mut two, mut busy, mut isolated) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            one.push(real_path::throughput(sessions, 1, make)?);
            let run = real_path::throughput_detail(sessions, 2, make)?;
            two.push(run.turns_per_s);
            busy.push(run.busy * 100.0);
            isolated.push(real_path::throughput_isolated(sessions, make)?);
        }
        let (one, two, isolated) = (Stats::of(one, None), Stats::of(two, None), Stats::of(isolated, None));
        report(&format!("{}_1_thread", figure("turns_per_s")), one, "turns/s", "");
        report(&format!("{}_2_threads", figure("turns_per_s")), two, "turns/s", "");
        // Below 100 % the workers waited for work; at 100 % a ratio under 2 is the cost of each turn rising.
        report(&format!("{}_2_threads_pct", figure("workers_busy")), Stats::of(busy, None), "%", "");
        // Two runtimes sharing nothing, one thread each: what this machine gives two threads at all.
        report(&format!("{}_2_isolated_runtimes", figure("turns_per_s")), isolated, "turns/s", "");
        report(&figure("scaling_ceiling_2_threads"), Stats::exact(isolated.median / one.median), "ratio", "");
        let target = if sessions == 10_000 { ">= 1.8" } else { "" };
        report(&figure("scaling_2_threads"), Stats::exact(two.median / one.median), "ratio", target);
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // One group only: `noetic-bench core` (the step, fork, tool-call and steering figures and the real path per
    // tool call, for comparing two builds quickly), `noetic-bench parallel` (parallel_tools(4) against one call after
    // another), `noetic-bench mcp`, `noetic-bench store` (SQLite; `store-runtime` only its runtime figures),
    // `noetic-bench pg` (PostgreSQL), `noetic-bench pg-log` (the PostgreSQL session log; `pg-runtime` only its
    // runtime figures, `pg-load [WORKERS] [SESSIONS] [RUNS] [MODEL_MS | one-call] [TURNS]` one of their loads,
    // printing each run), `noetic-bench streams` (the providers' SSE framing and stream parsing), `noetic-bench
    // agui` (the AG-UI event stream against our own SSE), `noetic-bench window` (counting tokens, fitting requests
    // into the window), `noetic-bench replay` (recorded decisions decided again with new rules), `noetic-bench
    // ledger` (the ledger's hash chain per decision).
    match std::env::args().nth(1).as_deref() {
        Some("mcp") => return mcp_figures(&rt),
        Some("agui") => return agui_figures(&rt),
        Some("streams") => return stream_figures(&rt),
        Some("store") => return sqlite_log_path::figures(),
        Some("store-runtime") => return sqlite_log_path::runtime_only(),
        Some("pg" | "pg-log") => return pg_log_path::figures(),
        Some("pg-runtime") => return pg_log_path::runtime_only(),
        Some("pg-load") => return pg_log_path::load_only(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("core") => return core_figures(&rt),
        Some("parallel") => return rt.block_on(parallel_tools_figures()),
        Some("window") => return rt.block_on(window_path::figures(report)),
        Some("replay") => return rt.block_on(replay_path::figures(report)),
        Some("ledger") => return ledger_path::figures(report),
        _ => {}
    }
    rt.block_on(async {
        report("run_step_us", measure(7, run_step_us).await?, "us", "<= 0.5");
        report("fork_path_us", measure(7, fork_path_us).await?, "us", "<= 2");
        report("tool_call_us", measure(15, || tool_call_us(Vec::new())).await?, "us", "<= 5");
        BenchResult::Ok(())
    })?;
    // The same turn with every span exported (batched, to a receiver that discards). The exporter is made
    // outside the async runtime (its blocking HTTP client may not be made inside one) and after the figures
    // above, so they run with no exporter threads at all.
    let otel = otel_path::provider()?;
    rt.block_on(async {
        let _installed = tracing::subscriber::set_default(otel_path::subscriber(&otel));
        report("otel_export_tool_call_us", measure(15, || tool_call_us(Vec::new())).await?, "us", "");
        BenchResult::Ok(())
    })?;
    otel.shutdown()?;
    rt.block_on(async {
        // Interleaved pairs, so machine noise hits both sides of each difference alike.
        let overhead = measure(31, || async {
            let steered = tool_call_us(vec![ten_rules()?]).await?;
            let plain = tool_call_us(Vec::new()).await?;
            Ok(steered - plain)
        })
        .await?;
        report("steering_rules_overhead_us", overhead, "us", "<= 1");
        replay_path::figures(report).await?;
        parallel_tools_figures().await?;
        report("turn_growth_ratio", measure(3, turn_growth_ratio).await?, "ratio", "<= 1.2");
        report("steer_latency_us", measure(15, probe::steer_latency_us).await?, "us", "<= 50");
        BenchResult::Ok(())
    })?;
    stream_figures(&rt)?;
    agui_figures(&rt)?;
    let children = |arg: &str| (0..3).map(|_| child(arg)).collect::<BenchResult<Vec<_>>>();
    report("peak_rss_mb", Stats::of(children("rss-session")?, None), "MiB", "<= 10");
    report("session_rss_added_mb", Stats::of(children("rss-session-added")?, None), "MiB", "");
    report("idle_sessions_mb", Stats::of(children("rss-idle")?, None), "MiB", "<= 50");
    real_path_figures(&rt)?;
    sqlite_log_path::figures()?;
    rt.block_on(window_path::figures(report))?;
    ledger_path::figures(report)?;
    pg_log_path::figures()?;
    mcp_figures(&rt)?;
    Ok(())
}

/// The runtime's core figures alone: a step, a fork path, a bare tool call, the 10 rules' overhead, and the real
/// path per tool call at 10, 100 and 1000 calls — what a change to the step or steering code can move.
fn core_figures(rt: &tokio::runtime::Runtime) -> BenchResult<()> {
    rt.block_on(async {
        report("run_step_us", measure(7, run_step_us).await?, "us", "<= 0.5");
        report("fork_path_us", measure(7, fork_path_us).await?, "us", "<= 2");
        report("tool_call_us", measure(15, || tool_call_us(Vec::new())).await?, "us", "<= 5");
        let overhead = measure(31, || async {
            let steered = tool_call_us(vec![ten_rules()?]).await?;
            let plain = tool_call_us(Vec::new()).await?;
            Ok(steered - plain)
        })
        .await?;
        report("steering_rules_overhead_us", overhead, "us", "<= 1");
        parallel_tools_figures().await?;
        for calls in [10, 100, 1000] {
            let reps = if calls == 1000 { 3 } else { 9 };
            let per_call = measure(reps, || async { Ok(real_path::session_tool_calls(calls, true).await?.0) }).await?;
            report(&format!("real_tool_call_us_{calls}_calls"), per_call, "us", "");
        }
        BenchResult::Ok(())
    })
}

/// The AG-UI event stream's cost per session event against our own SSE (see [`agui_path`]).
fn agui_figures(rt: &tokio::runtime::Runtime) -> BenchResult<()> {
    rt.block_on(async {
        let f = agui_path::per_event(25, 31).await?;
        let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let overhead = fastest(&f.agui_us_per_event) - fastest(&f.ours_us_per_event);
        report("agui_stream_overhead_per_event_us", Stats::exact(overhead), "us", "");
        report("ours_sse_per_event_us", Stats::of(f.ours_us_per_event, None), "us", "");
        report("agui_sse_per_event_us", Stats::of(f.agui_us_per_event, None), "us", "");
        report("agui_events_per_session_event", Stats::exact(f.agui_events_per_session_event), "ratio", "");
        BenchResult::Ok(())
    })
}

/// The providers' SSE framing, and their stream parsing with 64k tool calls (see [`stream_path`]).
fn stream_figures(rt: &tokio::runtime::Runtime) -> BenchResult<()> {
    rt.block_on(async {
        report("sse_framing_2mb_16b_chunks_ms", measure(7, sse_framing_ms).await?, "ms", "<= 50");
        let calls = 64 * 1024;
        let openai = measure(5, || stream_path::openai_tool_calls_ms(calls)).await?;
        report("openai_stream_64k_tool_calls_ms", openai, "ms", "<= 1000");
        let anthropic = measure(5, || stream_path::anthropic_tool_calls_ms(calls)).await?;
        report("anthropic_stream_64k_tool_calls_ms", anthropic, "ms", "<= 1000");
        BenchResult::Ok(())
    })
}

/// The cost of one MCP tool call over stdio (see [`mcp_path`]); a server that is not there is said on stderr.
fn mcp_figures(rt: &tokio::runtime::Runtime) -> BenchResult<()> {
    rt.block_on(async {
        match mcp_path::fixture() {
            Some(bin) => {
                let server = mcp_path::start(&bin).await?;
                let args = json!({"text": "hello"});
                let stats = measure(7, || mcp_path::call_us(&server, "bench__echo", &args, 200)).await?;
                report("mcp_stdio_tool_call_us_fixture", stats, "us", "");
            }
            None => {
                eprintln!("mcp_stdio_tool_call_us_fixture skipped: build it with cargo build --profile profiling -p noetic-mcp")
            }
        }
        match mcp_path::everything() {
            Some(bin) => {
                let server = mcp_path::start(&bin).await?;
                let args = json!({"message": "hello"});
                let stats = measure(7, || mcp_path::call_us(&server, "bench__echo", &args, 200)).await?;
                report("mcp_stdio_tool_call_us_everything_echo", stats, "us", "");
            }
            None => eprintln!("mcp_stdio_tool_call_us_everything_echo skipped: run scripts/mcp-servers.sh setup"),
        }
        BenchResult::Ok(())
    })
}
