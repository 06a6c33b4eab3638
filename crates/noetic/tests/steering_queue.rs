//! The live steering queue (seed 3): messages typed while the agent works land between tool calls (where in a
//! batch a message arrives, and the round limit: `steering_queue_batches.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic::agent::{BatchPolicy, SKIPPED_RESULT, SessionError, SteerError, SteeringMode};
use noetic::prelude::*;
use noetic::testing::{Counter, EventCollector, Gate, transcript};
use serde_json::{Value, json};

fn three_calls() -> ModelResponse {
    ModelResponse::tool_calls([("c1", "first", json!({})), ("c2", "second", json!({})), ("c3", "third", json!({}))])
}

/// A runtime whose tool `first` is gated and whose tools `second` and `third` just count their runs.
struct Setup {
    model: ScriptedModel,
    runtime: Runtime,
    gate: Gate,
    counter: Counter,
}

impl Setup {
    /// Runs of the three tools together.
    fn runs(&self) -> usize {
        self.gate.runs() + self.counter.count()
    }
}

fn setup(
    responses: Vec<ModelResponse>,
    configure: impl FnOnce(noetic::agent::RuntimeBuilder) -> noetic::agent::RuntimeBuilder,
) -> Setup {
    let model = ScriptedModel::new(responses);
    let (gate, counter) = (Gate::new(), Counter::new());
    let builder = Runtime::builder().model(Arc::new(model.clone())).tools([
        gate.tool("first").unwrap(),
        counter.tool("second", json!("second done")).unwrap(),
        counter.tool("third", json!("third done")).unwrap(),
    ]);
    Setup { runtime: configure(builder).build().unwrap(), model, gate, counter }
}

#[tokio::test]
async fn a_message_steered_mid_batch_skips_the_rest_and_reaches_the_next_request() {
    let s = setup(vec![three_calls(), ModelResponse::text("ok, doing X instead")], |b| b);
    let session = s.runtime.session("s");
    let mut events = EventCollector::of(&session);
    let turn = session.send("do the three things").await.unwrap();
    s.gate.started().await;
    let id = session.steer("stop, do X instead").await.unwrap();
    s.gate.release();
    assert_eq!(turn.await.unwrap(), "ok, doing X instead");
    assert_eq!(s.runs(), 1, "only the running tool finished; the rest never started");
    let second = &s.model.requests()[1];
    assert_eq!(
        transcript(second.history.as_slice()),
        vec![
            "User: do the three things".to_owned(),
            "call c1 first({})".into(),
            "call c2 second({})".into(),
            "call c3 third({})".into(),
            "result c1 first done".into(),
            format!("result c2 (error) {SKIPPED_RESULT}"),
            format!("result c3 (error) {SKIPPED_RESULT}"),
            "User: stop, do X instead".into(),
        ]
    );
    let history = transcript(&session.history());
    assert_eq!(history.iter().filter(|l| l.contains("stop, do X instead")).count(), 1, "persisted exactly once");
    let mut kinds = Vec::new();
    for kind in events.kinds() {
        match &kind {
            EventKind::SteeringQueued { id: queued, .. } => {
                assert_eq!(queued, &id.to_string());
                kinds.push("queued".to_owned());
            }
            EventKind::ToolSkipped { call_id, .. } => kinds.push(format!("skipped {call_id}")),
            EventKind::SteeringInjected { count, .. } => kinds.push(format!("injected {count}")),
            _ => {}
        }
    }
    assert_eq!(kinds, vec!["queued", "skipped c2", "skipped c3", "injected 1"]);
}

#[tokio::test]
async fn finish_batch_runs_every_tool_then_injects() {
    let s = setup(vec![three_calls(), ModelResponse::text("done")], |b| b.batch_policy(BatchPolicy::FinishBatch));
    let session = s.runtime.session("s");
    let turn = session.send("go").await.unwrap();
    s.gate.started().await;
    session.steer("also tidy up").await.unwrap();
    s.gate.release();
    turn.await.unwrap();
    assert_eq!(s.runs(), 3);
    let last = transcript(s.model.requests()[1].history.as_slice());
    assert_eq!(
        &last[4..],
        &["result c1 first done", "result c2 second done", "result c3 third done", "User: also tidy up"]
    );
}

#[tokio::test]
async fn a_sessions_own_batch_policy_overrides_the_runtimes_and_leaves_other_sessions_alone() {
    let s = setup(vec![three_calls(), ModelResponse::text("done")], |b| b);
    let session = s.runtime.session("s");
    session.set_batch_policy(BatchPolicy::FinishBatch).await;
    assert_eq!(s.runtime.session("other").batch_policy(), BatchPolicy::SkipRemaining);
    let turn = session.send("go").await.unwrap();
    s.gate.started().await;
    session.steer("also tidy up").await.unwrap();
    s.gate.release();
    turn.await.unwrap();
    assert_eq!(s.runs(), 3, "the batch finished");
}

#[tokio::test]
async fn one_at_a_time_injects_one_message_per_checkpoint_in_fifo_order_and_all_takes_every_message() {
    for (mode, first_request_users) in [(SteeringMode::OneAtATime, 1), (SteeringMode::All, 2)] {
        let s = setup(
            vec![
                ModelResponse::tool_calls([("c1", "first", json!({}))]),
                ModelResponse::text("a1"),
                ModelResponse::text("a2"),
            ],
            |b| b.steering_mode(mode),
        );
        let session = s.runtime.session("s");
        let turn = session.send("go").await.unwrap();
        s.gate.started().await;
        session.steer("m1").await.unwrap();
        session.steer("m2").await.unwrap();
        s.gate.release();
        turn.await.unwrap();
        let requests = s.model.requests();
        let users = |i: usize| {
            transcript(requests[i].history.as_slice())
                .into_iter()
                .filter(|l| l.starts_with("User: m"))
                .collect::<Vec<_>>()
        };
        assert_eq!(users(1).len(), first_request_users, "{mode:?}");
        let history = transcript(&session.history());
        let injected: Vec<_> = history.iter().filter(|l| l.starts_with("User: m")).cloned().collect();
        assert_eq!(injected, vec!["User: m1", "User: m2"], "{mode:?}: FIFO, each exactly once");
        assert_eq!(session.queued(), 0);
    }
}

#[tokio::test]
async fn an_answer_without_tools_is_kept_when_steering_is_pending_and_the_model_is_asked_again() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("first answer"));
    model.push(ModelResponse::text("second answer, with the correction"));
    let rt = Runtime::builder().model(Arc::new(model.clone())).build().unwrap();
    let session = rt.session("s");
    let turn = session.send("question").await.unwrap();
    held.entered().await;
    session.steer("actually, in French").await.unwrap();
    held.release();
    assert_eq!(turn.await.unwrap(), "second answer, with the correction");
    assert_eq!(
        transcript(&session.history()),
        vec![
            "User: question",
            "Assistant: first answer",
            "User: actually, in French",
            "Assistant: second answer, with the correction"
        ],
        "no model output is thrown away"
    );
}

#[tokio::test]
async fn a_message_queued_while_idle_is_taken_at_turn_start() {
    let s = setup(vec![ModelResponse::text("hi")], |b| b);
    let session = s.runtime.session("s");
    session.steer("and be brief").await.unwrap();
    session.send("hello").await.unwrap().await.unwrap();
    assert_eq!(transcript(s.model.requests()[0].history.as_slice()), vec!["User: hello", "User: and be brief"]);
}

#[tokio::test]
async fn a_full_queue_refuses_the_message_says_so_and_keeps_the_others() {
    let s = setup(vec![], |b| b.steering_capacity(2));
    let session = s.runtime.session("s");
    let mut events = EventCollector::of(&session);
    session.steer("one").await.unwrap();
    session.steer("two").await.unwrap();
    assert_eq!(session.steer("three").await, Err(SteerError::QueueFull { session: "s".into(), capacity: 2 }));
    assert_eq!(session.queued(), 2);
    let rejected = events.kinds().iter().filter(|k| matches!(k, EventKind::SteeringRejected { .. })).count();
    assert_eq!(rejected, 1);
    assert_eq!(session.clear_queue().await, 2);
}

#[tokio::test]
async fn steering_never_crosses_sessions() {
    let s = setup(vec![ModelResponse::text("for b")], |b| b);
    s.runtime.session("a").steer("only for a").await.unwrap();
    s.runtime.session("b").send("hi").await.unwrap().await.unwrap();
    assert_eq!(transcript(s.model.requests()[0].history.as_slice()), vec!["User: hi"]);
    assert_eq!(s.runtime.session("a").queued(), 1);
}

#[tokio::test]
async fn a_message_taken_but_not_injected_when_the_turn_is_aborted_returns_to_the_head_of_the_queue() {
    let s = setup(vec![three_calls(), ModelResponse::text("never")], |b| b);
    let session = s.runtime.session("s");
    let turn = session.send("go").await.unwrap();
    s.gate.started().await;
    session.steer("first steer").await.unwrap();
    session.steer("second steer").await.unwrap();
    // The running tool ignores cancellation and finishes; the checkpoint after it takes "first steer", then the
    // turn stops at the cancellation check before the next model request.
    session.cancel("user pressed stop");
    s.gate.release();
    assert!(turn.await.unwrap_err().is_cancelled());
    let queued = s.runtime.session("s").queued_messages();
    assert_eq!(queued.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), vec!["first steer", "second steer"]);
    assert!(transcript(&session.history()).iter().all(|l| !l.contains("steer")), "never shown to the model");
    assert_eq!(s.model.calls(), 1);
}

#[tokio::test]
async fn continue_session_runs_nothing_when_the_queue_is_empty() {
    let s = setup(vec![], |b| b);
    assert!(s.runtime.session("s").continue_session().await.unwrap().is_none());
    assert_eq!(s.model.calls(), 0);
}

#[tokio::test]
async fn continue_session_passes_messages_separately_and_skips_the_initial_poll() {
    let s = setup(vec![ModelResponse::text("r1"), ModelResponse::text("r2")], |b| b);
    let session = s.runtime.session("s");
    session.steer("m1").await.unwrap();
    session.steer("m2").await.unwrap();
    let turn = session.continue_session().await.unwrap().unwrap();
    assert_eq!(turn.await.unwrap(), "r2");
    let requests = s.model.requests();
    assert_eq!(
        transcript(requests[0].history.as_slice()),
        vec!["User: m1"],
        "one-at-a-time, no second take at turn start"
    );
    assert_eq!(transcript(requests[1].history.as_slice()), vec!["User: m1", "Assistant: r1", "User: m2"]);
}

#[tokio::test]
async fn continue_session_refuses_while_a_turn_runs_and_leaves_the_queue_alone() {
    let s = setup(vec![three_calls(), ModelResponse::text("x")], |b| b.batch_policy(BatchPolicy::FinishBatch));
    let session = s.runtime.session("s");
    let turn = session.send("go").await.unwrap();
    s.gate.started().await;
    session.steer("m").await.unwrap();
    assert_eq!(session.continue_session().await.err(), Some(SessionError::Busy { session: "s".into() }));
    assert_eq!(session.queued(), 1);
    s.gate.release();
    turn.await.unwrap();
}

#[tokio::test]
async fn pending_steering_buys_rounds_past_the_limit_but_only_up_to_the_capacity() {
    let model = ScriptedModel::responder(|_| Ok(ModelResponse::tool_calls([("c", "first", json!({}))])));
    let runs = Arc::new(AtomicUsize::new(0));
    let queue_holder: Arc<std::sync::Mutex<Option<Session>>> = Arc::default();
    let holder = queue_holder.clone();
    let steering_tool = Arc::new(
        FnTool::builder("first", "Steers itself.")
            .handler(move |_, _| {
                runs.fetch_add(1, Ordering::SeqCst);
                let session = holder.lock().unwrap().clone();
                async move {
                    if let Some(s) = session {
                        s.steer("keep going").await.unwrap();
                    }
                    Ok(Value::Null)
                }
            })
            .build()
            .unwrap(),
    );
    let agent = Step::llm("assistant", "m").max_rounds(2).build().unwrap();
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(steering_tool)
        .agent(agent)
        .steering_capacity(3)
        .build()
        .unwrap();
    let session = rt.session("s");
    *queue_holder.lock().unwrap() = Some(session.clone());
    let err = session.send("go").await.unwrap().await.unwrap_err();
    assert!(matches!(err, NoeticError::RoundLimitExceeded { max_rounds: 2, .. }), "{err:?}");
    assert_eq!(model.calls(), 5, "2 rounds plus at most 3 (the capacity) bought by steering");
}

#[tokio::test]
async fn changing_one_sessions_steering_mode_or_capacity_leaves_every_other_session_alone() {
    let s = setup((0..4).map(|i| ModelResponse::text(format!("a{i}"))).collect(), |b| b.steering_capacity(3));
    let changed = s.runtime.session("changed");
    let other = s.runtime.session("other");
    assert_eq!(changed.steering_mode(), SteeringMode::OneAtATime);
    changed.set_steering_mode(SteeringMode::All).await;
    changed.set_steering_capacity(2).await;
    assert_eq!(changed.steering_mode(), SteeringMode::All);
    assert_eq!(other.steering_mode(), SteeringMode::OneAtATime, "the runtime's default, untouched");
    assert_eq!(s.runtime.session("new").steering_mode(), SteeringMode::OneAtATime);
    assert_eq!((changed.steering_capacity(), other.steering_capacity()), (2, 3));

    for session in [&changed, &other] {
        session.steer("m1").await.unwrap();
        session.steer("m2").await.unwrap();
    }
    assert!(matches!(changed.steer("m3").await, Err(SteerError::QueueFull { capacity: 2, .. })));
    other.steer("m3").await.unwrap();

    // Each session's checkpoints take messages by its own mode: all at once, or one per model request.
    changed.continue_session().await.unwrap().unwrap().await.unwrap();
    assert_eq!(s.model.calls(), 1, "all: both messages in one request");
    other.continue_session().await.unwrap().unwrap().await.unwrap();
    assert_eq!(s.model.calls(), 4, "one-at-a-time: three messages, three requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushers_and_poppers_lose_and_duplicate_nothing() {
    let queue = Arc::new(noetic::agent::SteeringQueue::new(1_000_000, SteeringMode::OneAtATime));
    let mut pushers = Vec::new();
    for p in 0..8 {
        let q = queue.clone();
        pushers.push(tokio::spawn(async move {
            for i in 0..500 {
                q.push("s", format!("{p}-{i}")).unwrap();
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let mut poppers = Vec::new();
    for k in 0..4 {
        let q = queue.clone();
        poppers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for round in 0..4000 {
                if k % 2 == 0 && round % 7 == 0 {
                    q.set_mode(if round % 2 == 0 { SteeringMode::All } else { SteeringMode::OneAtATime });
                }
                got.extend(q.dequeue("s").into_iter().map(|m| m.text));
                tokio::task::yield_now().await;
            }
            got
        }));
    }
    for p in pushers {
        p.await.unwrap();
    }
    let mut all: Vec<String> = Vec::new();
    for p in poppers {
        all.extend(p.await.unwrap());
    }
    queue.set_mode(SteeringMode::All);
    all.extend(queue.dequeue("s").into_iter().map(|m| m.text));
    all.sort();
    let mut expected: Vec<String> = (0..8).flat_map(|p| (0..500).map(move |i| format!("{p}-{i}"))).collect();
    expected.sort();
    assert_eq!(all, expected, "every message exactly once");
}

#[tokio::test]
async fn concurrent_continue_calls_run_one_turn_and_deliver_each_message_once() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("r"));
    let rt = Runtime::builder().model(Arc::new(model.clone())).steering_mode(SteeringMode::All).build().unwrap();
    let session = rt.session("s");
    session.steer("m1").await.unwrap();
    session.steer("m2").await.unwrap();
    let (a, b) = (session.clone(), session.clone());
    let (ra, rb) = tokio::join!(async move { a.continue_session().await }, async move { b.continue_session().await });
    let turns: Vec<Turn> = [ra, rb].into_iter().filter_map(|r| r.ok().flatten()).collect();
    assert_eq!(turns.len(), 1, "exactly one of the two calls started a turn");
    held.entered().await;
    held.release();
    for t in turns {
        t.await.unwrap();
    }
    let users: Vec<_> = session.history().into_iter().filter(|i| i.role() == Some(Role::User)).collect();
    assert_eq!(users, vec![Item::user("m1"), Item::user("m2")]);
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn tool_events_name_the_llm_step_they_belong_to_and_a_skipped_call_its_tool() {
    let s = setup(vec![three_calls(), ModelResponse::text("ok")], |b| b);
    let session = s.runtime.session("s");
    let mut events = EventCollector::of(&session);
    let turn = session.send("do the three things").await.unwrap();
    s.gate.started().await;
    session.steer("stop").await.unwrap();
    s.gate.release();
    turn.await.unwrap();
    let tool_events: Vec<Value> = events
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("tool_")))
        .collect();
    let named: Vec<(&str, &str, &str)> = tool_events
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["step_id"].as_str().unwrap_or("-"), e["call_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        named,
        [
            ("tool_call_started", "assistant", "c1"),
            ("tool_call_completed", "assistant", "c1"),
            ("tool_skipped", "assistant", "c2"),
            ("tool_skipped", "assistant", "c3"),
        ]
    );
    let skipped: Vec<&str> = tool_events.iter().filter_map(|e| e["tool"].as_str()).skip(2).collect();
    assert_eq!(skipped, ["second", "third"], "a skipped call names its tool");
}
