//! How often a turn writes to its session log (#30: at most one write per tool call): an idempotent tool's
//! outcome waits for the next call's start (or the step's end) instead of a write of its own before the next model
//! request, and a crash in between costs only running that call again; any other call's outcome goes with the next
//! call's start when the model answers within the writer's hold, and is written while the model works otherwise.
//! A turn's start is handed over the same way before its first model request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use noetic::agent::log::{Append, Entry, Expect, LogStore, MemoryLogStore, StoreError};
use noetic::model::{ModelRequest, ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{HookedLogStore, LeaseCall, ReadCall, RecordingLogStore, StoreHooks};
use noetic::turn::Input;
use serde_json::{Value, json};

const CALLS: usize = 4;

/// Calls `search` once a round, `CALLS` times one after the other, then answers.
fn respond(request: &ModelRequest) -> Result<ModelResponse, NoeticError> {
    let done = request.history.iter().filter(|item| matches!(item, Item::ToolResult(_))).count();
    Ok(if done < CALLS {
        ModelResponse::tool_calls([(format!("c{done}").as_str(), "search", json!({"q": done}))])
    } else {
        ModelResponse::text("found it")
    })
}

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>, idempotent: bool, runs: &Arc<AtomicUsize>) -> Runtime {
    runtime_of(Arc::new(model.clone()), store, idempotent, runs)
}

fn runtime_of(model: Arc<dyn Model>, store: Arc<dyn LogStore>, idempotent: bool, runs: &Arc<AtomicUsize>) -> Runtime {
    let runs = runs.clone();
    let search = FnTool::builder("search", "Searches.")
        .handler(move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::from("src/lib.rs:1")) }
        })
        .idempotent(idempotent)
        .build()
        .unwrap();
    Runtime::builder().model(model).tool(Arc::new(search)).log_store(store).build().unwrap()
}

fn tool_done(entry: &Entry) -> Option<&str> {
    match entry {
        Entry::Core { input: Input::ToolDone(result), .. } => Some(&result.call_id),
        _ => None,
    }
}

fn tool_started(entry: &Entry) -> Option<&str> {
    match entry {
        Entry::ToolStarted { call_id, .. } => Some(call_id),
        _ => None,
    }
}

fn responses(entries: &[Entry]) -> usize {
    entries.iter().filter(|e| matches!(e, Entry::Core { input: Input::Response(_), .. })).count()
}

#[tokio::test]
async fn an_idempotent_calls_outcome_is_written_with_the_next_calls_start() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let rt = runtime(&ScriptedModel::responder(respond), recording.clone(), true, &runs);
    let session = rt.open("s").await.unwrap();
    assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
    let appends = recording.appends();
    for k in 0..CALLS {
        let id = format!("c{k}");
        let outcome = appends.iter().position(|a| a.iter().any(|e| tool_done(e) == Some(&id))).unwrap();
        let written_with = &appends[outcome];
        if k + 1 < CALLS {
            let next = format!("c{}", k + 1);
            assert!(
                written_with.iter().any(|e| tool_started(e) == Some(&next)),
                "{id}'s outcome is written with {next}'s start, not on its own: {written_with:?}"
            );
        } else {
            assert!(
                written_with.iter().any(|e| matches!(e, Entry::StepFinished { .. })),
                "the last outcome is written with the step's end: {written_with:?}"
            );
        }
    }
    let first_start = appends.iter().position(|a| a.iter().any(|e| tool_started(e).is_some())).unwrap();
    let writes_from_the_first_call = appends.len() - first_start;
    assert!(
        writes_from_the_first_call <= CALLS + 1,
        "{CALLS} calls and the turn's end take at most one write each, not {writes_from_the_first_call}: {appends:?}"
    );
}

#[tokio::test]
async fn a_crash_before_an_idempotent_calls_outcome_was_written_runs_that_call_again_and_nothing_else() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let reference = ScriptedModel::responder(respond);
    let rt = runtime(&reference, recording.clone(), true, &runs);
    let session = rt.open("s").await.unwrap();
    session.send("find it").await.unwrap().await.unwrap();
    let appends = recording.appends();
    let total_requests = reference.calls();
    let mut again = 0;
    for cut in 1..appends.len() {
        let prefix: Vec<Entry> = appends[..cut].iter().flatten().cloned().collect();
        let store = MemoryLogStore::new();
        store.append("s", Expect::At(0), &prefix).await.unwrap();
        let model = ScriptedModel::responder(respond);
        let runs = Arc::new(AtomicUsize::new(0));
        let next = runtime(&model, Arc::new(store), true, &runs);
        let session = next.open("s").await.unwrap();
        let Some(turn) = session.resume().await.unwrap() else { continue };
        assert_eq!(turn.await.unwrap(), "found it", "cut {cut}");
        let started = prefix.iter().filter_map(tool_started).count();
        let finished = prefix.iter().filter_map(tool_done).count();
        let ran = runs.load(Ordering::SeqCst);
        // What started and has no outcome in the log runs again (idempotent), then the calls still to come.
        assert_eq!(ran, CALLS - finished, "cut {cut}: {started} started, {finished} with an outcome, {ran} ran");
        again += usize::from(started > finished);
        assert_eq!(model.calls(), total_requests - responses(&prefix), "cut {cut}: the model is asked again");
        let results = session.history().iter().filter(|i| matches!(i, Item::ToolResult(_))).count();
        assert_eq!(results, CALLS, "cut {cut}: every call has exactly one result");
    }
    assert!(again >= CALLS - 1, "cuts fell between a call's start and its written outcome ({again})");
}

/// Answers the first request with one `search` call and never answers the second (the process dies during it).
struct HangsOnTheSecondRequest(AtomicUsize);

impl Model for HangsOnTheSecondRequest {
    fn call(&self, _request: ModelRequest) -> futures::future::BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        match self.0.fetch_add(1, Ordering::SeqCst) {
            0 => Box::pin(async { Ok(ModelResponse::tool_calls([("c0", "search", json!({"q": 0}))])) }),
            _ => Box::pin(std::future::pending()),
        }
    }
}

/// The log after a process died while the model worked on the request after one `search` call.
async fn cut_during_the_second_request(idempotent: bool) -> Vec<Entry> {
    let store = MemoryLogStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(HangsOnTheSecondRequest(AtomicUsize::new(0)));
    let tool = FnTool::builder("search", "Searches.")
        .handler(move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok(Value::from("src/lib.rs:1")) }
        })
        .idempotent(idempotent)
        .build()
        .unwrap();
    let rt = Runtime::builder().model(model.clone()).tool(Arc::new(tool)).log_store(Arc::new(store.clone())).build();
    let session = rt.unwrap().open("s").await.unwrap();
    let turn = session.send("find it").await.unwrap();
    noetic::testing::until("the second request", || model.0.load(Ordering::SeqCst) == 2).await.unwrap();
    // Whatever the writer was handed before the request lands now; then the process is gone.
    let _ = noetic::testing::until("nothing more is written", || false).await;
    let entries = store.read("s", 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect();
    drop(turn);
    entries
}

#[tokio::test]
async fn a_finished_call_that_is_not_idempotent_is_written_while_the_model_works_on_the_next_request() {
    let entries = cut_during_the_second_request(false).await;
    assert!(
        entries.iter().any(|e| tool_done(e) == Some("c0")),
        "the outcome of a call that must not run twice is in the log while the model answers: {entries:?}"
    );
    let idempotent = cut_during_the_second_request(true).await;
    assert!(idempotent.iter().any(|e| tool_started(e) == Some("c0")));
    assert!(
        !idempotent.iter().any(|e| tool_done(e) == Some("c0")),
        "an idempotent call's outcome waits for the next write: {idempotent:?}"
    );
}

/// A store with leases that keeps which calls a session makes of it, by name.
type Calls = HookedLogStore<Noted>;

#[derive(Default)]
struct Noted(std::sync::Mutex<Vec<&'static str>>);

impl Noted {
    fn note(&self, call: &'static str) {
        self.0.lock().unwrap().push(call);
    }
}

impl StoreHooks for Noted {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        self.note(if append.release.is_some() { "append_and_release" } else { "append" });
        Box::pin(std::future::ready(Ok(())))
    }

    fn read<'a>(&'a self, call: ReadCall, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        match call {
            ReadCall::Entries => self.note("read"),
            ReadCall::Last => self.note("last"),
            ReadCall::Snapshot => {}
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn lease(&self, call: LeaseCall) {
        match call {
            LeaseCall::Acquire => self.note("acquire"),
            LeaseCall::Release => self.note("release"),
            LeaseCall::Holder => {}
        }
    }
}

/// The calls noted since the last look.
fn take(store: &Calls) -> Vec<&'static str> {
    std::mem::take(&mut *store.hooks.0.lock().unwrap())
}

#[tokio::test]
async fn a_turn_on_a_shared_log_gives_its_lease_up_with_its_end_and_reads_nothing_it_has() {
    let store = Arc::new(Calls::default());
    let runs = Arc::default();
    let rt = runtime(&ScriptedModel::responder(respond), store.clone(), true, &runs);
    let session = rt.open("s").await.unwrap();
    for turn in 0..2 {
        take(&store);
        assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
        let calls = take(&store);
        assert_eq!(calls.iter().filter(|c| **c == "acquire").count(), 1, "turn {turn}: {calls:?}");
        assert!(!calls.contains(&"read"), "turn {turn}: nothing new in the log, nothing read: {calls:?}");
        assert!(!calls.contains(&"release"), "turn {turn}: the lease goes with the end, not on its own: {calls:?}");
        assert_eq!(calls.last(), Some(&"append_and_release"), "turn {turn}: {calls:?}");
        assert_eq!(store.inner.leases().unwrap().holder("s").await.unwrap(), None, "turn {turn}: given up");
    }
}

/// Answers as its scripted model does after a while (of paused time: once every other task is idle). After a
/// millisecond, the session's writer has written what the turn handed it before the request, as it does while a
/// real model works: only what the turn kept back for its next write shares that write.
struct After(std::time::Duration, ScriptedModel);

impl Model for After {
    fn call(&self, request: ModelRequest) -> futures::future::BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let (answer, after) = (self.1.call(request), self.0);
        Box::pin(async move {
            tokio::time::sleep(after).await;
            answer.await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_turn_writes_its_start_one_append_per_call_and_its_end_with_its_steps_end() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let model = Arc::new(After(std::time::Duration::from_millis(1), ScriptedModel::responder(respond)));
    let rt = runtime_of(model, recording.clone(), true, &runs);
    let session = rt.open("s").await.unwrap();
    assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
    let appends = recording.appends();
    // The turn's start (written on its own while the model works); the step's start and its first response ride
    // with the first call's start; the last outcome, the answer and the step's end with the turn's end.
    assert_eq!(appends.len(), CALLS + 2, "{appends:#?}");
    let start = &appends[0];
    assert!(start.iter().any(|e| matches!(e, Entry::TurnStarted { .. })), "{start:?}");
    assert!(!start.iter().any(|e| matches!(e, Entry::Core { .. })), "{start:?}");
    let first_call = &appends[1];
    assert!(first_call.iter().any(|e| matches!(e, Entry::Core { input: Input::Start, .. })), "{first_call:?}");
    assert!(first_call.iter().any(|e| tool_started(e) == Some("c0")), "{first_call:?}");
    let end = appends.last().unwrap();
    assert!(end.iter().any(|e| matches!(e, Entry::StepFinished { .. })), "{end:?}");
    assert!(matches!(end.last(), Some(Entry::TurnEnded { .. })), "{end:?}");
}

#[tokio::test]
async fn a_crash_at_any_write_of_a_turn_runs_no_call_that_is_not_idempotent_twice_nor_asks_a_logged_response_again() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let reference = ScriptedModel::responder(respond);
    let rt = runtime(&reference, recording.clone(), false, &runs);
    let session = rt.open("s").await.unwrap();
    session.send("find it").await.unwrap().await.unwrap();
    let appends = recording.appends();
    let total_requests = reference.calls();
    for cut in 1..appends.len() {
        let prefix: Vec<Entry> = appends[..cut].iter().flatten().cloned().collect();
        let store = MemoryLogStore::new();
        store.append("s", Expect::At(0), &prefix).await.unwrap();
        let model = ScriptedModel::responder(respond);
        let runs = Arc::new(AtomicUsize::new(0));
        let next = runtime(&model, Arc::new(store), false, &runs);
        let session = next.open("s").await.unwrap();
        let Some(turn) = session.resume().await.unwrap() else { continue };
        assert_eq!(turn.await.unwrap(), "found it", "cut {cut}");
        // A call that started is never run again: its outcome is in the log, or it gets the interrupted result.
        let started = prefix.iter().filter_map(tool_started).count();
        assert_eq!(runs.load(Ordering::SeqCst), CALLS - started, "cut {cut}");
        assert_eq!(model.calls(), total_requests - responses(&prefix), "cut {cut}: the model is asked again");
        let results = session.history().iter().filter(|i| matches!(i, Item::ToolResult(_))).count();
        assert_eq!(results, CALLS, "cut {cut}: every call has exactly one result");
    }
}

/// Answers as its scripted model does once the runtime ran everything else that was ready (the session's writer
/// among them), as a model on a fast local connection does: no time passes.
struct Prompt(ScriptedModel);

impl Model for Prompt {
    fn call(&self, request: ModelRequest) -> futures::future::BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let answer = self.0.call(request);
        Box::pin(async move {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            answer.await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_is_not_idempotent_shares_one_write_with_the_next_calls_start_when_the_model_answers_at_once() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let rt = runtime_of(Arc::new(Prompt(ScriptedModel::responder(respond))), recording.clone(), false, &runs);
    let session = rt.open("s").await.unwrap();
    let start = tokio::time::Instant::now();
    assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
    assert_eq!(tokio::time::Instant::now(), start, "nothing waited out the writer's hold");
    let appends = recording.appends();
    for k in 0..CALLS - 1 {
        let (id, next) = (format!("c{k}"), format!("c{}", k + 1));
        let outcome = appends.iter().find(|a| a.iter().any(|e| tool_done(e) == Some(&id))).unwrap();
        assert!(outcome.iter().any(|e| tool_started(e) == Some(&next)), "{id} with {next}'s start: {outcome:?}");
    }
    // The turn's start needs no write of its own either: it goes with the first call's start.
    let first = &appends[0];
    assert!(first.iter().any(|e| matches!(e, Entry::TurnStarted { .. })), "{first:?}");
    assert!(first.iter().any(|e| tool_started(e) == Some("c0")), "{first:?}");
    assert_eq!(appends.len(), CALLS + 1, "a write per call, the turn's end: {appends:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_that_is_not_idempotent_is_written_on_its_own_while_a_slow_model_answers() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let rt = runtime_of(
        Arc::new(After(std::time::Duration::from_millis(50), ScriptedModel::responder(respond))),
        recording.clone(),
        false,
        &runs,
    );
    let session = rt.open("s").await.unwrap();
    assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
    let appends = recording.appends();
    for k in 0..CALLS - 1 {
        let id = format!("c{k}");
        let outcome = appends.iter().find(|a| a.iter().any(|e| tool_done(e) == Some(&id))).unwrap();
        assert!(
            !outcome.iter().any(|e| tool_started(e).is_some()),
            "{id}'s outcome is written on its own: {outcome:?}"
        );
    }
}

/// Calls `search` once, then fails the next request (after yielding, as [`Prompt`] does).
struct FailsTheSecondRequest(AtomicUsize);

impl Model for FailsTheSecondRequest {
    fn call(&self, _request: ModelRequest) -> futures::future::BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::task::yield_now().await;
            match n {
                0 => Ok(ModelResponse::tool_calls([("c0", "search", json!({"q": 0}))])),
                _ => Err(NoeticError::other("the provider is down")),
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_turn_whose_model_fails_after_a_call_waits_for_its_writes_without_waiting_out_the_writers_hold() {
    let recording = Arc::new(RecordingLogStore::default());
    let runs = Arc::default();
    let rt = runtime_of(Arc::new(FailsTheSecondRequest(AtomicUsize::new(0))), recording.clone(), false, &runs);
    let session = rt.open("s").await.unwrap();
    let start = tokio::time::Instant::now();
    let failed = session.send("find it").await.unwrap().await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(tokio::time::Instant::now(), start, "nothing waited out the writer's hold");
    let entries: Vec<Entry> = recording.appends().into_iter().flatten().collect();
    assert!(entries.iter().any(|e| tool_done(e) == Some("c0")), "{entries:?}");
    assert!(matches!(entries.last(), Some(Entry::TurnEnded { .. })), "{entries:?}");
}
