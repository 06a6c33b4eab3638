//! A crash in the middle of a group of calls that run together (#32 item 4): the session log records each call's
//! start and outcome, so a turn cut at any append resumes with no call run twice, the outcomes recorded before the
//! cut kept, and each call started without a recorded outcome given the interrupted result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::agent::log::{Entry, LogStore};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::RecordingLogStore;
use noetic::turn::{Action, INTERRUPTED_RESULT, Input, TurnCore};
use serde_json::{Value, json};

type Runs = Arc<Mutex<HashMap<String, usize>>>;

/// Three reads that run together and finish in another order (c2, c3, c1), then a write that runs alone.
fn calls() -> ModelResponse {
    ModelResponse::tool_calls([
        ("c1", "read", json!({"ms": 30})),
        ("c2", "read", json!({"ms": 10})),
        ("c3", "read", json!({"ms": 20})),
        ("c4", "write", json!({"ms": 10})),
    ])
}

fn respond(request: &noetic::model::ModelRequest) -> Result<ModelResponse, NoeticError> {
    let answered = request.history.iter().any(|item| matches!(item, Item::ToolResult(_)));
    Ok(if answered { ModelResponse::text("done") } else { calls() })
}

/// Tools that count their runs by call id; `read` may run together with other reads when `concurrent`.
fn tools(runs: &Runs, concurrent: bool) -> Vec<Arc<dyn Tool>> {
    [("read", concurrent), ("write", false)]
        .into_iter()
        .map(|(name, concurrent)| {
            let runs = runs.clone();
            let builder = FnTool::builder(name, "Takes a while.").handler(move |args: Value, tcx| {
                *runs.lock().unwrap().entry(tcx.call_id.to_string()).or_default() += 1;
                async move {
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(10))).await;
                    Ok(json!(format!("{} done", tcx.call_id)))
                }
            });
            let builder = if concurrent { builder.concurrent() } else { builder };
            Arc::new(builder.build().unwrap()) as Arc<dyn Tool>
        })
        .collect()
}

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>, runs: &Runs) -> Runtime {
    runtime_of(model, store, runs, (4, true))
}

/// A runtime whose agent runs up to `limit` calls at once, its `read` tool declared concurrent or not.
fn runtime_of(
    model: &ScriptedModel,
    store: Arc<dyn LogStore>,
    runs: &Runs,
    (limit, concurrent): (u32, bool),
) -> Runtime {
    let agent = Step::llm("agent", "scripted").parallel_tools(limit).build().unwrap();
    let tools = tools(runs, concurrent);
    Runtime::builder().model(Arc::new(model.clone())).agent(agent).tools(tools).log_store(store).build().unwrap()
}

/// Each append's entries by type (a core input by its kind), so two runs' logs compare without their ids and times.
async fn shape(limit: u32, concurrent: bool) -> Vec<Vec<String>> {
    let recording = Arc::new(RecordingLogStore::default());
    let rt = runtime_of(&ScriptedModel::responder(respond), recording.clone(), &Runs::default(), (limit, concurrent));
    let session = rt.open("s").await.unwrap();
    assert_eq!(session.send("go").await.unwrap().await.unwrap(), "done");
    let name = |entry: &Entry| {
        let value = serde_json::to_value(entry).unwrap();
        let input = value.get("input").and_then(|i| i.get("input")).and_then(Value::as_str).unwrap_or_default();
        format!("{} {input}", value["type"].as_str().unwrap())
    };
    recording.appends().iter().map(|append| append.iter().map(name).collect()).collect()
}

#[tokio::test(start_paused = true)]
async fn with_a_limit_of_one_a_concurrent_safe_tool_is_logged_exactly_as_any_other() {
    let sequential = shape(1, false).await;
    assert_eq!(shape(1, true).await, sequential);
    assert_ne!(shape(4, true).await, sequential, "above 1 the log shows the group");
}

fn tool_result(item: &Item) -> Option<&ToolResult> {
    match item {
        Item::ToolResult(result) => Some(result),
        _ => None,
    }
}

fn started(entries: &[Entry], id: &str) -> usize {
    entries.iter().filter(|e| matches!(e, Entry::ToolStarted { call_id, .. } if **call_id == *id)).count()
}

fn outcomes(entries: &[Entry]) -> Vec<ToolResult> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Core { input: Input::ToolDone(result), .. } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

/// Each step's inputs in `entries`, fed to a new core of the same step, bring it to its end.
fn replays_to_the_end(entries: &[Entry]) -> bool {
    let mut core = TurnCore::new("agent", 32, true).with_parallel_tools(4);
    for entry in entries {
        if let Entry::Core { input, .. } = entry {
            core.advance(input.clone());
            if let Action::Fail(e) = core.action() {
                panic!("the log's inputs fail the turn: {e}");
            }
        }
    }
    core.is_done()
}

#[tokio::test(start_paused = true)]
async fn a_turn_cut_at_any_append_in_the_middle_of_a_group_resumes_with_no_call_run_twice() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Runs::default();
    let rt = runtime(&ScriptedModel::responder(respond), recording.clone(), &runs);
    let session = rt.open("s").await.unwrap();
    assert_eq!(session.send("go").await.unwrap().await.unwrap(), "done");
    let appends = recording.appends();
    let mut mid_group = 0;
    for cut in 1..appends.len() {
        let prefix: Vec<Entry> = appends[..cut].iter().flatten().cloned().collect();
        let store = recording.cut(cut).await.unwrap();
        let runs = Runs::default();
        let next = runtime(&ScriptedModel::responder(respond), Arc::new(store.clone()), &runs);
        let session = next.open("s").await.unwrap();
        let Some(turn) = session.resume().await.unwrap() else { continue };
        assert_eq!(turn.await.unwrap(), "done", "cut {cut}");
        let recorded = outcomes(&prefix);
        let group_started = ["c1", "c2", "c3"].iter().all(|id| started(&prefix, id) == 1);
        if group_started && (1..3).contains(&recorded.len()) {
            mid_group += 1;
        }
        let history = session.history();
        let runs = runs.lock().unwrap().clone();
        for id in ["c1", "c2", "c3", "c4"] {
            let before = started(&prefix, id);
            let after = runs.get(id).copied().unwrap_or(0);
            assert_eq!(
                before + after,
                1,
                "cut {cut}: {id} started {before} time(s) before the cut and ran {after} after"
            );
            let results: Vec<&ToolResult> =
                history.iter().filter_map(tool_result).filter(|r| *r.call_id == *id).collect();
            assert_eq!(results.len(), 1, "cut {cut}: {id} has exactly one result");
            match recorded.iter().find(|r| *r.call_id == *id) {
                Some(kept) => assert_eq!(results[0], kept, "cut {cut}: {id} keeps its recorded result"),
                None if before == 1 => {
                    assert_eq!(results[0].content, INTERRUPTED_RESULT.into(), "cut {cut}: {id} started, no outcome")
                }
                None => assert_eq!(results[0].content, format!("{id} done").into(), "cut {cut}"),
            }
        }
        let ids: Vec<&str> = history.iter().filter_map(tool_result).map(|r| &*r.call_id).collect();
        assert_eq!(ids, ["c1", "c2", "c3", "c4"], "cut {cut}: results in call order");
        let log: Vec<Entry> = store.read("s", 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect();
        assert!(replays_to_the_end(&log), "cut {cut}: the final log replays to the turn's end");
    }
    assert!(mid_group >= 2, "cuts fell after one and after two outcomes of the group: {mid_group}");
}
