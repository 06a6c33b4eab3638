//! A crash at every point a session log can be cut (#30): between any two appends of a turn of a two-step agent
//! (plan, then act with two tool calls) that starts with a steering message, another runtime opens what was
//! written and resumes. Whatever the point: every call ends with exactly one result, no call runs twice, the model
//! is asked only for what the log does not hold, the answer is the same, and each step's inputs in the final log
//! replay through a new turn core to its end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use noetic::agent::SteeringMode;
use noetic::agent::log::{Entry, Expect, LogStore, MemoryLogStore};
use noetic::model::{ModelRequest, ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::RecordingLogStore;
use noetic::turn::{Action, Input, TurnCore};
use serde_json::{Value, json};

/// Plan, then act: the act step calls `read` and `write` in one batch, then answers.
fn agent() -> Step<String, String> {
    let plan = Step::llm("plan", "scripted").instructions("Plan the work.").build().unwrap();
    let act = Step::llm("act", "scripted").instructions("Do what the plan says.").build().unwrap();
    Step::loop_("agent", [plan, act]).until(until::max_steps(1)).build().unwrap()
}

/// The model of every run: the plan step plans; the act step calls both tools until their results are in.
fn respond(request: &ModelRequest) -> Result<ModelResponse, NoeticError> {
    if request.instructions.as_deref() == Some("Plan the work.") {
        return Ok(ModelResponse::text("the plan"));
    }
    let answered = request.history.iter().any(|item| matches!(item, Item::ToolResult(_)));
    Ok(if answered {
        ModelResponse::text("done")
    } else {
        ModelResponse::tool_calls([("c1", "read", json!({})), ("c2", "write", json!({}))])
    })
}

/// Tools that count their runs by name.
fn tools(runs: &Arc<Mutex<HashMap<String, usize>>>) -> Vec<Arc<dyn Tool>> {
    ["read", "write"]
        .into_iter()
        .map(|name| {
            let runs = runs.clone();
            Arc::new(
                FnTool::builder(name, "A tool.")
                    .handler(move |_, tcx| {
                        *runs.lock().unwrap().entry(tcx.tool.to_string()).or_default() += 1;
                        async { Ok(Value::from("ok")) }
                    })
                    .build()
                    .unwrap(),
            ) as Arc<dyn Tool>
        })
        .collect()
}

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>, runs: &Arc<Mutex<HashMap<String, usize>>>) -> Runtime {
    Runtime::builder()
        .model(Arc::new(model.clone()))
        .agent(agent())
        .tools(tools(runs))
        .steering_mode(SteeringMode::All)
        .log_store(store)
        .build()
        .unwrap()
}

fn responses(entries: &[Entry]) -> usize {
    entries.iter().filter(|e| matches!(e, Entry::Core { input: Input::Response(_), .. })).count()
}

fn started(entries: &[Entry], tool: &str) -> usize {
    entries.iter().filter(|e| matches!(e, Entry::ToolStarted { tool: t, .. } if **t == *tool)).count()
}

/// Each call of `items` has exactly one result, after it.
fn well_formed(items: &[Item]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for item in items {
        match item {
            Item::ToolCall(c) => open.push(&c.id),
            Item::ToolResult(r) => match open.iter().position(|id| **id == *r.call_id) {
                Some(at) => {
                    open.remove(at);
                }
                None => return false,
            },
            _ => {}
        }
    }
    open.is_empty()
}

/// Feeds each step's inputs in `entries` to a new core; true when every one ends finished.
fn replays_to_the_end(entries: &[Entry]) -> Result<(), String> {
    let mut cores: HashMap<String, TurnCore> = HashMap::new();
    for entry in entries {
        if let Entry::Core { step, input, .. } = entry {
            let id = step.0.split('#').next().unwrap().to_owned();
            let core = cores.entry(step.0.to_string()).or_insert_with(|| TurnCore::new(id, 10, true));
            core.advance(input.clone());
            if let Action::Fail(e) = core.action() {
                return Err(format!("{}: {e}", step.0));
            }
        }
    }
    match cores.values().all(TurnCore::is_done) {
        true => Ok(()),
        false => Err("a step's inputs stop before its end".to_owned()),
    }
}

#[tokio::test]
async fn a_turn_cut_at_any_append_resumes_without_doing_anything_twice() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let reference = ScriptedModel::responder(respond);
    let rt = runtime(&reference, recording.clone(), &runs);
    let session = rt.open("s").await.unwrap();
    session.steer("be quick").await.unwrap();
    let answer = session.continue_session().await.unwrap().unwrap().await.unwrap();
    assert_eq!(answer, "done");
    let appends = recording.appends();
    let total_requests = reference.calls();
    assert!(appends.len() >= 5, "the turn was written in several appends: {}", appends.len());

    let mut resumed = 0;
    for cut in 1..appends.len() {
        let prefix: Vec<Entry> = appends[..cut].iter().flatten().cloned().collect();
        let store = MemoryLogStore::new();
        store.append("s", Expect::At(0), &prefix).await.unwrap();
        let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let model = ScriptedModel::responder(respond);
        let next = runtime(&model, Arc::new(store.clone()), &runs);
        let session = next.open("s").await.unwrap();
        let Some(turn) = session.resume().await.unwrap() else {
            // Cut before the turn started: the message waits for the next turn.
            assert!(
                !prefix.iter().any(|e| matches!(e, Entry::TurnStarted { .. })),
                "cut {cut}: a started turn was not resumed"
            );
            assert_eq!(session.queued(), 1, "cut {cut}");
            continue;
        };
        resumed += 1;
        assert_eq!(turn.number(), 1, "cut {cut}");
        assert_eq!(turn.await.unwrap(), "done", "cut {cut}");
        let final_log: Vec<Entry> =
            store.read("s", 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect();
        assert!(well_formed(&session.history()), "cut {cut}: {:?}", session.history());
        let runs = runs.lock().unwrap().clone();
        for tool in ["read", "write"] {
            let before = started(&prefix, tool);
            let now = runs.get(tool).copied().unwrap_or(0);
            assert_eq!(
                before + now,
                1,
                "cut {cut}: {tool} started {before} time(s) before the cut and ran {now} after"
            );
        }
        assert_eq!(
            model.calls(),
            total_requests - responses(&prefix),
            "cut {cut}: the model is asked exactly for the responses the log does not hold"
        );
        replays_to_the_end(&final_log).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(session.queued(), 0, "cut {cut}: the steering message was shown");
        let shown = session.history().iter().filter(|i| **i == Item::user("be quick")).count();
        assert_eq!(shown, 1, "cut {cut}: the steering message is in the conversation exactly once");
    }
    assert_eq!(resumed, appends.len() - 2, "every cut after the turn's start resumed it");
}
