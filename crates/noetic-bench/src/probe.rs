//! What the memory figures measure, shared by the suite and `rss_probe` (the small binary the suite runs them in,
//! so that the figures are the runtime's, not the pages of everything else the suite links).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use noetic::agent::Runtime;
use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use serde_json::{Value, json};

/// The benchmarks' result type.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A tool that does nothing.
pub fn noop_tool() -> BenchResult<Arc<dyn Tool>> {
    Ok(Arc::new(FnTool::builder("noop", "Does nothing.").handler(|_, _| async { Ok(Value::Null) }).build()?))
}

/// A model that asks for the no-op tool `rounds` times, then answers.
pub fn tool_calling_model(rounds: usize) -> ScriptedModel {
    let calls = Arc::new(AtomicUsize::new(0));
    ScriptedModel::responder(move |_| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        Ok(if n < rounds { ModelResponse::tool_calls([("c", "noop", json!({}))]) } else { ModelResponse::text("done") })
    })
    .without_recording()
}

/// One bare `llm` step of `rounds` model calls, each asking for the no-op tool: the suite's `tool_call_us`.
pub async fn bare_tool_calls(rounds: usize, layers: Vec<Arc<dyn MemoryLayer>>) -> BenchResult<()> {
    let llm = Step::llm("assistant", "m").max_rounds(rounds as u32 + 1).build()?;
    let ctx =
        StepContext::builder().model(Arc::new(tool_calling_model(rounds))).tools([noop_tool()?]).layers(layers).build();
    llm.execute("go".to_owned(), &ctx).await?;
    Ok(())
}

/// A no-op tool declared safe to run concurrently.
pub fn concurrent_noop_tool() -> BenchResult<Arc<dyn Tool>> {
    let tool = FnTool::builder("noop", "Does nothing.").concurrent().handler(|_, _| async { Ok(Value::Null) });
    Ok(Arc::new(tool.build()?))
}

/// One bare `llm` step of `rounds` model calls, each asking for `batch` calls of a concurrent-safe no-op tool,
/// run up to `limit` at once: the parallel-tools figures.
pub async fn bare_batches(rounds: usize, batch: usize, limit: u32) -> BenchResult<()> {
    let ids: Vec<String> = (0..batch).map(|i| format!("c{i}")).collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::responder(move |_| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        Ok(if n < rounds {
            ModelResponse::tool_calls(ids.iter().map(|id| (id.as_str(), "noop", json!({}))))
        } else {
            ModelResponse::text("done")
        })
    })
    .without_recording();
    let llm = Step::llm("assistant", "m").max_rounds(rounds as u32 + 1).parallel_tools(limit).build()?;
    let ctx = StepContext::builder().model(Arc::new(model)).tools([concurrent_noop_tool()?]).build();
    llm.execute("go".to_owned(), &ctx).await?;
    Ok(())
}

/// A runtime whose turns each ask for the no-op tool, then answer, through the steering layer of [`ten_rules`].
/// Its model keeps no state: it reads the request (after a tool result it answers), so sessions share nothing.
pub fn steered_runtime() -> BenchResult<Runtime> {
    Ok(Runtime::builder().model(Arc::new(ToolThenAnswer)).tool(noop_tool()?).layer(ten_rules()?).build()?)
}

/// Asks for the no-op tool, or answers once the last item is a tool result.
struct ToolThenAnswer;

impl Model for ToolThenAnswer {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let answered = matches!(request.history.last(), Some(Item::ToolResult(_)));
        Box::pin(async move {
            Ok(if answered { ModelResponse::text("ok") } else { ModelResponse::tool_calls([("c", "noop", json!({}))]) })
        })
    }
}

/// A steering layer of 10 predicate rules before each tool call, none of which matches the no-op tool.
pub fn ten_rules() -> BenchResult<Arc<dyn MemoryLayer>> {
    let rules = (0..10).map(|i| {
        let forbidden = format!("forbidden-{i}");
        SteeringRule::predicate(format!("rule-{i}"), [Hook::BeforeToolCall], move |p| match p.tool_call() {
            Some(c) if c.name == forbidden => SteeringDecision::deny("no"),
            _ => SteeringDecision::allow(),
        })
    });
    Ok(steering(SteeringConfig::new(rules))?)
}

/// `turns` turns of one session, each a tool call and an answer; the time of each.
pub async fn session_turns(turns: usize) -> BenchResult<Vec<Duration>> {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::responder(move |_| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        Ok(if n.is_multiple_of(2) {
            ModelResponse::tool_calls([("c", "noop", json!({}))])
        } else {
            ModelResponse::text("ok")
        })
    })
    .without_recording();
    let rt = Runtime::builder().model(Arc::new(model)).tool(noop_tool()?).build()?;
    let session = rt.session("bench");
    let mut durations = Vec::with_capacity(turns);
    for i in 0..turns {
        let start = Instant::now();
        session.send(format!("message {i}")).await?.await?;
        durations.push(start.elapsed());
    }
    Ok(durations)
}

/// From the end of a tool during which a steer arrived to the next model request.
pub async fn steer_latency_us() -> BenchResult<f64> {
    let origin = Instant::now();
    let tool_end = Arc::new(AtomicU64::new(0));
    let request_at = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (te, ra) = (tool_end.clone(), request_at.clone());
    let model = ScriptedModel::responder(move |_| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        if n == 1 {
            ra.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
        }
        Ok(if n == 0 { ModelResponse::tool_calls([("c", "steered", json!({}))]) } else { ModelResponse::text("ok") })
    })
    .without_recording();
    let slot: Arc<std::sync::Mutex<Option<Session>>> = Arc::default();
    let s = slot.clone();
    let tool = FnTool::builder("steered", "The user steers while this runs.")
        .handler(move |_, _| {
            let (s, te) = (s.clone(), te.clone());
            async move {
                let session = s.lock().map_err(|e| ToolError::new(e.to_string()))?.clone();
                if let Some(session) = session {
                    session.steer("change of plan").await.map_err(ToolError::new)?;
                }
                te.store(origin.elapsed().as_nanos() as u64, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .build()?;
    let rt = Runtime::builder().model(Arc::new(model)).tool(Arc::new(tool)).build()?;
    let session = rt.session("s");
    *slot.lock().map_err(|e| e.to_string())? = Some(session.clone());
    session.send("go").await?.await?;
    let nanos = request_at.load(Ordering::SeqCst).saturating_sub(tool_end.load(Ordering::SeqCst));
    Ok(nanos as f64 / 1000.0)
}

/// Resident memory now and at its peak, in MiB (Linux `/proc/self/status`).
pub fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Child process: peak RSS of a 1000-turn session (whole process), or with `added`, what the session added to
/// the process as it started (the binary's own pages, which grow with what the suite links, left out).
pub async fn rss_session(added: bool) -> BenchResult<()> {
    let start = rss_mib().0;
    session_turns(1000).await?;
    let peak = rss_mib().1;
    println!("{}", if added { peak - start } else { peak });
    Ok(())
}

/// Child process: memory taken by 10 000 idle sessions.
pub async fn rss_idle() -> BenchResult<()> {
    let rt = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).build()?;
    let before = rss_mib().0;
    let sessions: Vec<Session> = (0..10_000).map(|i| rt.session(&format!("user-{i}"))).collect();
    let after = rss_mib().0;
    println!("{}", after - before);
    drop(sessions);
    Ok(())
}
