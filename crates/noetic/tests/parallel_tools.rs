//! Tool calls that run together (#32 item 4): an `llm` step with `parallel_tools(n)` runs consecutive calls of
//! concurrent-safe tools at once, and a user can still steer between them. Every test runs on paused tokio time:
//! a tool "takes" its milliseconds of the paused clock, so durations are exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::agent::SKIPPED_RESULT;
use noetic::agent::log::{Entry, LogStore, MemoryLogStore};
use noetic::prelude::*;
use noetic::testing::{EventCollector, transcript};
use noetic::tool::{Approval, ApprovalRequest, FnApprover, FnToolBuilder};
use noetic::turn::{CANCELLED_RESULT, Input};
use serde_json::{Value, json};
use tokio::time::Instant;

/// What the tools did and when: `start c1 @0`, `end c1 @50` (milliseconds of paused time since the test began).
#[derive(Clone)]
struct Log {
    since: Instant,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Log {
    fn new() -> Self {
        Log { since: Instant::now(), lines: Arc::default() }
    }

    fn note(&self, what: &str) {
        let at = self.since.elapsed().as_millis();
        self.lines.lock().unwrap().push(format!("{what} @{at}"));
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// A tool whose calls each take the milliseconds given in their `ms` argument (50 without one).
fn timed(name: &str, concurrent: bool, log: &Log) -> Arc<dyn Tool> {
    Arc::new(timed_builder(name, concurrent, log).build().unwrap())
}

fn timed_builder(name: &str, concurrent: bool, log: &Log) -> FnToolBuilder {
    let log = log.clone();
    let builder = FnTool::builder(name, "Takes a while.").handler(move |args: Value, tcx| {
        let log = log.clone();
        async move {
            log.note(&format!("start {}", tcx.call_id));
            tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(50))).await;
            log.note(&format!("end {}", tcx.call_id));
            Ok(json!(format!("{} done", tcx.call_id)))
        }
    });
    if concurrent { builder.concurrent() } else { builder }
}

/// `n` calls `c1`..`cn` of the tool `read`, 50 ms each.
fn reads(n: usize) -> ModelResponse {
    let ids: Vec<String> = (1..=n).map(|i| format!("c{i}")).collect();
    ModelResponse::tool_calls(ids.iter().map(|id| (id.as_str(), "read", json!({}))))
}

fn agent(limit: u32, interrupt_running: bool) -> Step<String, String> {
    Step::llm("agent", "scripted").parallel_tools(limit).interrupt_running(interrupt_running).build().unwrap()
}

/// Runs one `llm` step limited to `limit` calls at once over `response` (then "done"); the paused time it took.
async fn run_step(llm: Step<String, String>, response: ModelResponse, tools: Vec<Arc<dyn Tool>>) -> Duration {
    let model = ScriptedModel::new([response, ModelResponse::text("done")]);
    let ctx = StepContext::builder().model(Arc::new(model)).tools(tools).build();
    let start = Instant::now();
    assert_eq!(llm.execute("go".to_owned(), &ctx).await.unwrap(), "done");
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn ten_concurrent_safe_calls_of_50_ms_take_50_ms_with_a_limit_of_10_and_500_ms_with_a_limit_of_1() {
    let log = Log::new();
    let tools = || vec![timed("read", true, &log)];
    let ms = |d: Duration| d.as_millis();
    assert_eq!(ms(run_step(agent(10, false), reads(10), tools()).await), 50);
    assert_eq!(ms(run_step(agent(16, false), reads(10), tools()).await), 50);
    assert_eq!(ms(run_step(agent(4, false), reads(10), tools()).await), 150, "groups of 4, 4 and 2");
    assert_eq!(ms(run_step(agent(1, false), reads(10), tools()).await), 500);
    let default = Step::llm("agent", "scripted").build().unwrap();
    assert_eq!(ms(run_step(default, reads(10), tools()).await), 500, "the default runs calls one after another");
}

#[tokio::test(start_paused = true)]
async fn calls_of_a_tool_not_declared_concurrent_run_one_after_another_whatever_the_limit() {
    let log = Log::new();
    assert_eq!(run_step(agent(10, false), reads(4), vec![timed("read", false, &log)]).await.as_millis(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_call_not_declared_concurrent_in_the_middle_splits_the_group() {
    let log = Log::new();
    let response = ModelResponse::tool_calls([
        ("c1", "read", json!({})),
        ("c2", "read", json!({})),
        ("c3", "write", json!({})),
        ("c4", "read", json!({})),
        ("c5", "read", json!({})),
    ]);
    let tools = vec![timed("read", true, &log), timed("write", false, &log)];
    assert_eq!(run_step(agent(4, false), response, tools).await.as_millis(), 150);
    let starts: Vec<String> = log.lines().into_iter().filter(|l| l.starts_with("start")).collect();
    assert_eq!(starts, ["start c1 @0", "start c2 @0", "start c3 @50", "start c4 @100", "start c5 @100"]);
}

#[tokio::test(start_paused = true)]
async fn results_are_appended_in_call_order_although_the_calls_finish_in_another_order() {
    let log = Log::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("c1", "read", json!({"ms": 30})),
            ("c2", "read", json!({"ms": 10})),
            ("c3", "read", json!({"ms": 20})),
        ]),
        ModelResponse::text("done"),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .agent(agent(4, false))
        .tool(timed("read", true, &log))
        .build()
        .unwrap();
    let session = runtime.session("s");
    let mut events = EventCollector::of(&session);
    assert_eq!(session.send("read").await.unwrap().await.unwrap(), "done");
    let ends: Vec<String> = log.lines().into_iter().filter(|l| l.starts_with("end")).collect();
    assert_eq!(ends, ["end c2 @10", "end c3 @20", "end c1 @30"]);
    let history = transcript(model.requests()[1].history.as_slice());
    assert_eq!(&history[4..], ["result c1 c1 done", "result c2 c2 done", "result c3 c3 done"]);
    // The events carry the call ids, in the order things happened.
    let calls: Vec<String> = events
        .kinds()
        .into_iter()
        .filter_map(|kind| match kind {
            EventKind::ToolCallStarted { call_id, .. } => Some(format!("started {call_id}")),
            EventKind::ToolCallCompleted { call_id, .. } => Some(format!("completed {call_id}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        ["started c1", "started c2", "started c3", "completed c2", "completed c3", "completed c1"],
        "{calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn gates_run_in_call_order_before_the_group_starts_and_a_denied_call_does_not_stop_the_others() {
    let log = Log::new();
    let gates = log.clone();
    let rule = SteeringRule::predicate("no-secrets", [Hook::BeforeToolCall], move |p| {
        let call = p.tool_call().unwrap();
        gates.note(&format!("gate {}", call.call_id));
        if call.args["path"] == "secret" {
            SteeringDecision::deny("not the secrets")
        } else {
            SteeringDecision::allow()
        }
    });
    let response = ModelResponse::tool_calls([
        ("c1", "read", json!({"path": "a"})),
        ("c2", "read", json!({"path": "secret"})),
        ("c3", "read", json!({"path": "b"})),
    ]);
    let model = ScriptedModel::new([response, ModelResponse::text("done")]);
    let layer = steering(SteeringConfig::new([rule])).unwrap();
    let ctx = StepContext::builder()
        .model(Arc::new(model.clone()))
        .tools([timed("read", true, &log)])
        .layers([layer as Arc<dyn noetic::layer::MemoryLayer>])
        .build();
    let start = Instant::now();
    assert_eq!(agent(4, false).execute("go".to_owned(), &ctx).await.unwrap(), "done");
    assert_eq!(start.elapsed().as_millis(), 50, "the allowed calls ran together");
    assert_eq!(
        log.lines(),
        ["gate c1 @0", "gate c2 @0", "gate c3 @0", "start c1 @0", "start c3 @0", "end c1 @50", "end c3 @50"]
    );
    assert_eq!(
        transcript(model.requests()[1].history.as_slice())[4..],
        ["result c1 c1 done", "result c2 (error) Steering denied: not the secrets", "result c3 c3 done"]
    );
}

#[tokio::test(start_paused = true)]
async fn approvals_are_asked_per_call_in_call_order_before_the_group_starts_and_a_rejection_does_not_stop_the_others() {
    let log = Log::new();
    let asked = log.clone();
    let approver = FnApprover(move |request: ApprovalRequest| {
        let asked = asked.clone();
        async move {
            asked.note(&format!("ask {}", request.call_id));
            tokio::time::sleep(Duration::from_millis(10)).await;
            if request.call_id == "c2" { Approval::Reject { reason: "not now".to_owned() } } else { Approval::Approve }
        }
    });
    let tool = Arc::new(timed_builder("fetch", true, &log).needs_approval(true).build().unwrap());
    let response =
        ModelResponse::tool_calls([("c1", "fetch", json!({})), ("c2", "fetch", json!({})), ("c3", "fetch", json!({}))]);
    let model = ScriptedModel::new([response, ModelResponse::text("done")]);
    let ctx = StepContext::builder()
        .model(Arc::new(model.clone()))
        .tools([tool as Arc<dyn Tool>])
        .approver(Arc::new(approver))
        .build();
    assert_eq!(agent(4, false).execute("go".to_owned(), &ctx).await.unwrap(), "done");
    assert_eq!(
        log.lines(),
        ["ask c1 @0", "ask c2 @10", "ask c3 @20", "start c1 @30", "start c3 @30", "end c1 @80", "end c3 @80"]
    );
    let results = transcript(model.requests()[1].history.as_slice())[4..].to_vec();
    assert_eq!(results[1], "result c2 (error) Error: the call of 'fetch' was rejected: not now");
    assert_eq!(results[2], "result c3 c3 done");
}

/// A session of an agent limited to `limit` calls at once whose model asks for ten 50 ms reads, then answers.
/// Its session log is `store`.
fn steered_session(limit: u32, interrupt_running: bool, log: &Log, store: &MemoryLogStore) -> (ScriptedModel, Runtime) {
    let model = ScriptedModel::new([reads(10), ModelResponse::text("ok, stopping")]);
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .agent(agent(limit, interrupt_running))
        .tool(timed("read", true, log))
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    (model, runtime)
}

/// The second request's history after the ten calls: the results, then the steering message.
fn after_calls(model: &ScriptedModel) -> Vec<String> {
    transcript(model.requests()[1].history.as_slice())[11..].to_vec()
}

#[tokio::test(start_paused = true)]
async fn a_message_steered_while_a_group_runs_skips_the_calls_not_started_and_is_injected_after_the_running_ones() {
    let log = Log::new();
    let (model, runtime) = steered_session(4, false, &log, &MemoryLogStore::new());
    let session = runtime.session("s");
    let turn = session.send("read ten files").await.unwrap();
    let steer = async {
        tokio::time::sleep_until(log.since + Duration::from_millis(25)).await;
        session.steer("stop reading").await.unwrap();
    };
    let (answer, ()) = tokio::join!(turn, steer);
    assert_eq!(answer.unwrap(), "ok, stopping");
    let ends: Vec<String> = log.lines().into_iter().filter(|l| l.starts_with("end")).collect();
    assert_eq!(ends, ["end c1 @50", "end c2 @50", "end c3 @50", "end c4 @50"], "only the running group ran");
    let mut expected: Vec<String> = (1..=4).map(|i| format!("result c{i} c{i} done")).collect();
    expected.extend((5..=10).map(|i| format!("result c{i} (error) {SKIPPED_RESULT}")));
    expected.push("User: stop reading".to_owned());
    assert_eq!(after_calls(&model), expected);
}

#[tokio::test(start_paused = true)]
async fn with_interrupt_running_a_message_steered_while_a_group_runs_cancels_the_running_calls_at_once() {
    let log = Log::new();
    let store = MemoryLogStore::new();
    let (model, runtime) = steered_session(4, true, &log, &store);
    let session = runtime.session("s");
    let mut events = EventCollector::of(&session);
    let turn = session.send("read ten files").await.unwrap();
    let steer = async {
        tokio::time::sleep_until(log.since + Duration::from_millis(25)).await;
        session.steer("stop reading").await.unwrap();
    };
    let (answer, ()) = tokio::join!(turn, steer);
    assert_eq!(answer.unwrap(), "ok, stopping");
    assert_eq!(log.since.elapsed().as_millis(), 25, "the turn did not wait for the running calls");
    assert!(log.lines().iter().all(|l| l.starts_with("start")), "no call finished: {:?}", log.lines());
    let mut expected: Vec<String> = (1..=4).map(|i| format!("result c{i} (error) {CANCELLED_RESULT}")).collect();
    expected.extend((5..=10).map(|i| format!("result c{i} (error) {SKIPPED_RESULT}")));
    expected.push("User: stop reading".to_owned());
    assert_eq!(after_calls(&model), expected);
    let cancelled = events
        .kinds()
        .into_iter()
        .filter(|k| matches!(k, EventKind::ToolCallCompleted { output, .. } if **output == *CANCELLED_RESULT))
        .count();
    assert_eq!(cancelled, 4, "each cancelled call is told as completed, with its id");
    let logged = store
        .read("s", 0, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(
            |r| matches!(&r.entry, Entry::Core { input: Input::ToolDone(t), .. } if &*t.content == CANCELLED_RESULT),
        )
        .count();
    assert_eq!(logged, 4, "each cancellation is the call's recorded outcome");
}

#[test]
fn a_limit_of_zero_calls_at_once_is_a_config_error() {
    let error = Step::<String, String>::llm("agent", "scripted").parallel_tools(0).build().unwrap_err();
    assert_eq!(error.code.as_str(), "INVALID_CONCURRENCY");
}
