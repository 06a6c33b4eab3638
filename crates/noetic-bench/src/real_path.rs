//! Figures of the path users run: `Runtime` → `Session` → turn task, one event subscriber draining the session's
//! events, and every model request encoded to the OpenAI wire format and every answer parsed from it, against an
//! in-process fake transport (no network). Payloads are realistic: a system prompt of about 3 KB, tool arguments
//! and results of a few hundred bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use noetic::agent::Runtime;
use noetic::model::{Model, ModelRequest, ModelResponse};
use noetic::prelude::*;
use noetic_openai::wire::{BodyOptions, HistoryCache, encode_body, parse_response_keeping};
use serde_json::{Value, json};

use crate::BenchResult;

/// Tool rounds per turn: a turn asks for the tool this many times, then answers.
pub const ROUNDS_PER_TURN: usize = 10;

/// Room in the fake transport's write buffer before its first request (a request of 10 calls is about 8 KB).
const WIRE_BUFFER: usize = 64 * 1024;

/// The fake transport: encodes each request as the OpenAI client would send it (shared chunks), writes the chunks
/// once into a reused buffer — the one copy a socket write makes — then answers with a body parsed by the OpenAI
/// client's own parser.
pub struct WireModel {
    calls: AtomicUsize,
    request_bytes: AtomicU64,
    wire: std::sync::Mutex<Vec<u8>>,
    tool_answer: String,
    final_answer: String,
    history_cache: HistoryCache,
    /// How long each answer takes to come (none by default: the runtime's own cost alone).
    latency: Duration,
}

impl WireModel {
    pub fn new() -> Self {
        let args =
            json!({"path": "src/lib.rs", "query": "where is the retry policy configured?", "context": "x".repeat(300)});
        let tool_answer = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "search", "arguments": args.to_string()}}]}}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280}
        })
        .to_string();
        let final_answer = json!({
            "id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "The retry policy lives in config.rs; I changed nothing."}}],
            "usage": {"prompt_tokens": 1300, "completion_tokens": 20, "total_tokens": 1320}
        })
        .to_string();
        WireModel {
            calls: AtomicUsize::new(0),
            request_bytes: AtomicU64::new(0),
            // A socket's write buffer is there before the first request: growing this one from nothing, session
            // after session, copied each body up to four more times (~1,400 instructions a call at 10 calls),
            // counted as the runtime's although no transport does it.
            wire: std::sync::Mutex::new(Vec::with_capacity(WIRE_BUFFER)),
            tool_answer,
            final_answer,
            history_cache: HistoryCache::default(),
            latency: Duration::ZERO,
        }
    }

    /// [`WireModel::new`] answering each request about `latency` after it was sent (from half to one and a half
    /// times it, at random: sessions that started together do not stay in step), as a real model's answer takes
    /// time (a load that leaves the runtime's CPU some rest).
    pub fn answering_after(latency: Duration) -> Self {
        WireModel { latency, ..WireModel::new() }
    }

    /// The body of an answer asking for the tool.
    #[allow(dead_code)] // read by `instr_probe parse`
    pub fn tool_answer(&self) -> &str {
        &self.tool_answer
    }

    /// Bytes of every request body encoded so far.
    pub fn request_bytes(&self) -> u64 {
        self.request_bytes.load(Ordering::Relaxed)
    }
}

impl Model for WireModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        // What OpenAiModel does: the constant parts and the history's messages come from the cache where an
        // earlier request encoded them.
        let body = encode_body(&request, false, &BodyOptions::default(), &self.history_cache);
        if let Ok(mut wire) = self.wire.lock() {
            wire.clear();
            for chunk in body.chunks() {
                wire.extend_from_slice(chunk);
            }
            std::hint::black_box(&*wire);
        }
        self.request_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        // Decided by the turn's own items (from the end back to its user message), so sessions sharing the model
        // each get their own turns of ROUNDS_PER_TURN calls.
        let results = request
            .history
            .as_slice()
            .iter()
            .rev()
            .take_while(|item| !matches!(item, Item::Message { role: noetic::model::Role::User, .. }))
            .filter(|item| matches!(item, Item::ToolResult(_)))
            .count();
        let answer = if results < ROUNDS_PER_TURN { &self.tool_answer } else { &self.final_answer };
        let response = parse_response_keeping(answer, &self.history_cache);
        if self.latency.is_zero() {
            return Box::pin(async move { response });
        }
        let latency = self.latency.mul_f64(0.5 + fastrand::f64());
        Box::pin(async move {
            tokio::time::sleep(latency).await;
            response
        })
    }
}

/// A search tool answering a few hundred bytes.
pub fn search_tool() -> BenchResult<Arc<dyn Tool>> {
    search_tool_of(false)
}

/// [`search_tool`], declared idempotent or not (a session log then writes a call's outcome with the next call's
/// start, or hands it over before the next model request).
pub fn search_tool_of(idempotent: bool) -> BenchResult<Arc<dyn Tool>> {
    let result = Value::String(format!("src/config.rs:42: retry = RetryPolicy::new(3, ...)\n{}", "y".repeat(300)));
    Ok(Arc::new(
        FnTool::builder("search", "Searches the workspace for text.")
            .input_schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "query": {"type": "string"}, "context": {"type": "string"}},
                "required": ["query"]
            }))
            .handler(move |_, _| {
                let result = result.clone();
                async move { Ok(result) }
            })
            .idempotent(idempotent)
            .build()?,
    ))
}

fn instructions() -> String {
    let rule = "You are a careful coding agent. Read before you write; never touch files outside the workspace. ";
    rule.repeat(3000 / rule.len() + 1)
}

/// Where a benchmark runtime keeps its sessions.
#[derive(Clone)]
pub enum Kept {
    /// In memory only.
    Memory,
    /// In session logs (#30).
    Log(Arc<dyn noetic::agent::log::LogStore>),
}

/// A runtime on the fake transport, and its model; it keeps its sessions where `kept` says.
pub fn wire_runtime_with(kept: impl Into<Kept>) -> BenchResult<(Runtime, Arc<WireModel>)> {
    wire_runtime_of(kept, search_tool()?)
}

/// [`wire_runtime_with`] offering `search` as its tool.
pub fn wire_runtime_of(kept: impl Into<Kept>, search: Arc<dyn Tool>) -> BenchResult<(Runtime, Arc<WireModel>)> {
    wire_runtime_on(kept, search, WireModel::new())
}

/// [`wire_runtime_of`] on `model`.
pub fn wire_runtime_on(
    kept: impl Into<Kept>,
    search: Arc<dyn Tool>,
    model: WireModel,
) -> BenchResult<(Runtime, Arc<WireModel>)> {
    let model = Arc::new(model);
    let mut builder = Runtime::builder()
        .model(model.clone())
        .model_id("openai/gpt-4o-mini")
        .instructions(instructions())
        .tool(search);
    builder = match kept.into() {
        Kept::Memory => builder,
        Kept::Log(log) => builder.log_store(log),
    };
    Ok((builder.build()?, model))
}

/// Subscribes to the session's events and drains them in a task of its own, as a UI would.
pub fn drain_events(session: &Session) -> tokio::task::JoinHandle<usize> {
    let mut events = session.subscribe();
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            match events.recv().await {
                Ok(_) => seen += 1,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => seen += n as usize,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return seen,
            }
        }
    })
}

/// One session making `calls` tool calls (turns of [`ROUNDS_PER_TURN`] each): µs per tool call over the
/// session, and request bytes per model call.
pub async fn session_tool_calls(calls: usize, subscribed: bool) -> BenchResult<(f64, f64)> {
    session_tool_calls_with(calls, subscribed, Kept::Memory).await
}

/// [`session_tool_calls`] on a runtime writing through to `store` when given.
pub async fn session_tool_calls_with(calls: usize, subscribed: bool, kept: impl Into<Kept>) -> BenchResult<(f64, f64)> {
    session_tool_calls_of(calls, subscribed, kept, search_tool()?).await
}

/// [`session_tool_calls_with`] offering `search` as the tool.
pub async fn session_tool_calls_of(
    calls: usize,
    subscribed: bool,
    kept: impl Into<Kept>,
    search: Arc<dyn Tool>,
) -> BenchResult<(f64, f64)> {
    let (runtime, model) = wire_runtime_of(kept, search)?;
    // A session of its own: a store shared between runs (PostgreSQL) would otherwise grow one conversation.
    let session = runtime.open(&format!("bench-{:x}", fastrand::u64(..))).await?;
    let drain = subscribed.then(|| drain_events(&session));
    let turns = calls.div_ceil(ROUNDS_PER_TURN);
    let start = Instant::now();
    for i in 0..turns {
        session.send(format!("turn {i}: find where the retry policy is configured")).await?.await?;
    }
    let elapsed = start.elapsed();
    if let Some(drain) = drain {
        drain.abort();
    }
    let model_calls = turns * (ROUNDS_PER_TURN + 1);
    Ok((
        elapsed.as_secs_f64() * 1e6 / (turns * ROUNDS_PER_TURN) as f64,
        model.request_bytes() as f64 / model_calls as f64,
    ))
}

/// What [`session_tool_calls`] does besides its timed turns: a runtime on the fake transport, a session, one
/// subscriber, and dropping them (for instruction counts of the turns alone).
#[allow(dead_code)] // run by `instr_probe real-setup`
pub async fn session_setup() -> BenchResult<()> {
    let (runtime, _model) = wire_runtime_with(Kept::Memory)?;
    let session = runtime.session("bench");
    drain_events(&session).abort();
    Ok(())
}

/// µs per turn of a 100-turn session, with or without one subscriber.
pub async fn turn_us(subscribed: bool) -> BenchResult<f64> {
    let (per_call, _) = session_tool_calls(100 * ROUNDS_PER_TURN, subscribed).await?;
    Ok(per_call * ROUNDS_PER_TURN as f64)
}

/// Steer latency across OS threads: another thread steers while a tool runs (or while the model answers), then
/// lets it finish; the figure is from the moment it finishes to the model request that carries the message.
/// Returns the latencies in µs.
pub async fn cross_thread_steer_us(samples: usize, during_model_call: bool) -> BenchResult<Vec<f64>> {
    let origin = Instant::now();
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let released_at = Arc::new(AtomicU64::new(0));
        let seen_at = Arc::new(AtomicU64::new(0));
        let started = Arc::new(tokio::sync::Notify::new());
        let proceed = Arc::new(tokio::sync::Notify::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let model = {
            let (seen_at, started, proceed, calls) = (seen_at.clone(), started.clone(), proceed.clone(), calls.clone());
            let released_at = released_at.clone();
            HeldModel::new(move |request: &ModelRequest| {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if request.messages().any(|m| matches!(m, Item::Message { content, .. } if content == "change of plan"))
                    && seen_at.load(Ordering::SeqCst) == 0
                {
                    seen_at.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                }
                let hold = during_model_call && n == 0;
                let response = if !during_model_call && n == 0 {
                    ModelResponse::tool_calls([("c", "slow", json!({}))])
                } else {
                    ModelResponse::text("ok")
                };
                (hold.then(|| (started.clone(), proceed.clone(), released_at.clone(), origin)), response)
            })
        };
        let tool = {
            let (started, proceed, released_at) = (started.clone(), proceed.clone(), released_at.clone());
            FnTool::builder("slow", "Runs while the user steers.")
                .handler(move |_, _| {
                    let (started, proceed, released_at) = (started.clone(), proceed.clone(), released_at.clone());
                    async move {
                        started.notify_one();
                        proceed.notified().await;
                        released_at.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                        Ok(Value::Null)
                    }
                })
                .build()?
        };
        let runtime = Runtime::builder().model(Arc::new(model)).tool(Arc::new(tool)).build()?;
        let session = runtime.session("s");
        let turn = session.send("go").await?;
        started.notified().await;
        let steerer = {
            let (session, proceed) = (session.clone(), proceed.clone());
            let runtime = tokio::runtime::Handle::current();
            std::thread::spawn(move || {
                let queued = runtime.block_on(session.steer("change of plan"));
                proceed.notify_one();
                queued.map(|_| ())
            })
        };
        turn.await?;
        steerer.join().map_err(|_| "the steering thread panicked")??;
        let (seen, released) = (seen_at.load(Ordering::SeqCst), released_at.load(Ordering::SeqCst));
        if seen == 0 {
            return Err("the steered message never reached a model request".into());
        }
        out.push(seen.saturating_sub(released) as f64 / 1000.0);
    }
    Ok(out)
}

/// Signals that the call started, waits to proceed, then records when it was let go (ns since the origin).
type Hold = (Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>, Arc<AtomicU64>, Instant);

/// A model answering through a closure that may hold the call until released.
struct HeldModel<F> {
    answer: F,
}

impl<F> HeldModel<F> {
    fn new(answer: F) -> Self {
        HeldModel { answer }
    }
}

impl<F> Model for HeldModel<F>
where
    F: Fn(&ModelRequest) -> (Option<Hold>, ModelResponse) + Send + Sync + 'static,
{
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let (hold, response) = (self.answer)(&request);
        Box::pin(async move {
            if let Some((started, proceed, released_at, origin)) = hold {
                started.notify_one();
                proceed.notified().await;
                released_at.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
            }
            Ok(response)
        })
    }
}

/// Makes the runtime a throughput run drives (called once per run, on the thread that runs it).
pub type MakeRuntime = dyn Fn() -> BenchResult<Runtime> + Sync;

/// A runtime whose model answers at once with text: each turn is one model call.
pub fn answering_runtime() -> BenchResult<Runtime> {
    // A model with no lock of its own (the scripted model counts calls behind one), so the figure shows the
    // runtime's scaling, not the model's.
    Ok(Runtime::builder().model(Arc::new(Answers)).build()?)
}

/// Turns per second of `sessions` sessions × 10 turns each, on a multi-thread runtime with `threads` workers.
pub fn throughput(sessions: usize, threads: usize, make: &MakeRuntime) -> BenchResult<f64> {
    Ok(throughput_detail(sessions, threads, make)?.turns_per_s)
}

/// One run of [`throughput`], with how busy the workers were.
pub struct Throughput {
    pub turns_per_s: f64,
    /// The workers' busy time over their wall-clock time (1.0: every worker busy all along).
    pub busy: f64,
    /// How many times a worker ran out of work and parked.
    #[allow(dead_code)] // read by `scaling_probe` only
    pub parks: u64,
}

/// [`throughput`] with the workers' busy fraction and park count (tokio's runtime metrics).
pub fn throughput_detail(sessions: usize, threads: usize, make: &MakeRuntime) -> BenchResult<Throughput> {
    let (elapsed, busy, parks) = run_sessions(sessions, threads, make, None)?;
    Ok(Throughput {
        turns_per_s: (sessions * 10) as f64 / elapsed.as_secs_f64(),
        busy: busy.as_secs_f64() / (elapsed.as_secs_f64() * threads as f64),
        parks,
    })
}

/// Turns per second of two runtimes that share nothing — each with its own tokio runtime of one worker, its own
/// `Runtime` and half the sessions — started at once on two threads: what this machine gives two threads that
/// never touch the same memory, the ceiling of any 2-thread scaling measured here.
pub fn throughput_isolated(sessions: usize, make: &MakeRuntime) -> BenchResult<f64> {
    let gate = std::sync::Barrier::new(2);
    let slowest = std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| run_sessions(sessions / 2, 1, make, Some(&gate)).map_err(|e| e.to_string())))
            .collect();
        let mut slowest = Duration::ZERO;
        for half in halves {
            let (elapsed, _, _) = half.join().map_err(|_| "an isolated run panicked")??;
            slowest = slowest.max(elapsed);
        }
        Ok::<_, String>(slowest)
    })?;
    Ok((sessions / 2 * 2 * 10) as f64 / slowest.as_secs_f64())
}

/// Runs `sessions` sessions × 10 turns on a new multi-thread runtime with `threads` workers, after passing `gate`
/// if given: the time they took, the workers' busy time and their park count.
fn run_sessions(
    sessions: usize,
    threads: usize,
    make: &MakeRuntime,
    gate: Option<&std::sync::Barrier>,
) -> BenchResult<(Duration, Duration, u64)> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
    let runtime = make()?;
    let kept = runtime.clone();
    let metrics = rt.metrics();
    let busy = |m: &tokio::runtime::RuntimeMetrics| -> (Duration, u64) {
        (0..threads)
            .fold((Duration::ZERO, 0), |(b, p), w| (b + m.worker_total_busy_duration(w), p + m.worker_park_count(w)))
    };
    let (busy_before, parks_before) = busy(&metrics);
    if let Some(gate) = gate {
        gate.wait();
    }
    // Everything runs on the workers (sessions are opened there too): the thread that waits here wakes once, at
    // the end, so it neither lends the 1-worker case a second core nor takes one from the 2-worker case.
    let start = Instant::now();
    let driver = rt.spawn(async move {
        let tasks: Vec<_> = (0..sessions)
            .map(|i| {
                let runtime = runtime.clone();
                tokio::spawn(async move {
                    let session = runtime.session(&format!("user-{i}"));
                    for t in 0..10 {
                        let turn = session.send(format!("message {t}")).await.map_err(|e| e.to_string())?;
                        turn.await.map_err(|e| e.to_string())?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        Ok::<(), String>(())
    });
    rt.block_on(driver).map_err(|e| e.to_string())??;
    let elapsed = start.elapsed();
    let (busy_after, parks_after) = busy(&metrics);
    // Freeing the sessions is not part of the turns.
    drop(kept);
    Ok((elapsed, busy_after - busy_before, parks_after - parks_before))
}

/// Answers every request with the same text, sharing nothing between calls.
pub struct Answers;

impl Model for Answers {
    fn call(&self, _request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        Box::pin(async { Ok(ModelResponse::text("ok")) })
    }
}

/// The quantile `q` (0..=1) of `samples`.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}
