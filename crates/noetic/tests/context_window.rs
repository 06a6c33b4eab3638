//! The context window (#32 items 1-3): requests are counted and fitted into the model's window, the layers' budgets
//! are shared by the allocation rule, and a history that does not fit is compacted in what is sent — never in the
//! log, never the current turn, never a call split from its result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures::future::BoxFuture;
use noetic::agent::RuntimeBuilder;
use noetic::agent::log::{Entry, LogStore, MemoryLogStore};
use noetic::model::{Item, ModelRequest, ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::Counter;
use noetic::window::{Compaction, ContextWindow, Estimate, request_tokens};
use noetic::{ConfigCode, NoeticError};
use serde_json::json;

/// What the summariser's requests start with (the compaction's own instructions).
fn is_summary(request: &ModelRequest) -> bool {
    request.instructions.as_deref().is_some_and(|i| i.starts_with("You compact a conversation"))
}

/// A model for long conversations: each user message gets one `read` call, each result an answer; a summary
/// request gets "SUMMARY".
fn conversational(request: &ModelRequest) -> Result<ModelResponse, NoeticError> {
    if is_summary(request) {
        return Ok(ModelResponse::text("SUMMARY"));
    }
    let n = request.history.len();
    Ok(match request.history.last() {
        Some(Item::ToolResult(_)) => ModelResponse::text(format!("answer after {n} items")),
        _ => ModelResponse::tool_calls([(format!("c{n}").as_str(), "read", json!({"path": "notes.txt"}))]),
    })
}

fn runtime(
    model: &ScriptedModel,
    store: &MemoryLogStore,
    build: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> Runtime {
    let read = Counter::new().tool("read", json!("x".repeat(400))).unwrap();
    let builder =
        Runtime::builder().model(Arc::new(model.clone())).model_id("m").tool(read).log_store(Arc::new(store.clone()));
    build(builder).build().unwrap()
}

fn question(k: usize) -> String {
    format!("question {k}: {}", "please look at the notes again ".repeat(6))
}

fn user_texts(request: &ModelRequest) -> Vec<String> {
    request
        .history
        .iter()
        .filter_map(|i| match i {
            Item::Message { role: noetic::model::Role::User, content } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

async fn entries(store: &MemoryLogStore, key: &str) -> Vec<Entry> {
    store.read(key, 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect()
}

#[tokio::test]
async fn a_context_length_error_compacts_once_and_the_agent_continues_with_the_log_keeping_everything() {
    const LIMIT: u32 = 1_200;
    // No window known: only the provider's refusal says the request is too long.
    let model = ScriptedModel::responder(|request| {
        if !is_summary(request) && request_tokens(&Estimate, request) > LIMIT {
            return Err(NoeticError::ContextLengthExceeded {
                step_id: String::new(),
                message: "maximum context length exceeded".into(),
                requested: None,
                limit: None,
            });
        }
        conversational(request)
    });
    let store = MemoryLogStore::new();
    let rt = runtime(&model, &store, |b| b);
    let session = rt.session("s");
    let mut turns = 0;
    while !model.requests().iter().any(is_summary) {
        turns += 1;
        assert!(turns < 20, "the conversation outgrows the limit within 20 turns");
        session.send(question(turns)).await.unwrap().await.unwrap();
    }
    // The turn that hit the limit finished; two more turns run without another refusal.
    for k in 1..=2 {
        session.send(question(turns + k)).await.unwrap().await.unwrap();
    }
    let requests = model.requests();
    let summaries = requests.iter().filter(|r| is_summary(r)).count();
    assert_eq!(summaries, 1, "one compaction");
    let refused = requests.iter().filter(|r| !is_summary(r) && request_tokens(&Estimate, r) > LIMIT).count();
    assert_eq!(refused, 1, "one refusal, then one retry that fits");
    let at = requests.iter().position(is_summary).unwrap();
    let retry = &requests[at + 1];
    let users = user_texts(retry);
    assert!(users[0].contains("compacted") && users[0].contains("SUMMARY"), "{users:?}");
    assert_eq!(users.last().unwrap(), &question(turns), "the current turn is sent whole");
    // Nothing left the conversation or the log: every turn's question and answer is there.
    let history = session.history();
    for k in 1..=turns + 2 {
        assert!(history.iter().any(|i| i.text() == Some(question(k).as_str())), "question {k} kept");
    }
    let log = entries(&store, "s").await;
    assert_eq!(log.iter().filter(|e| matches!(e, Entry::Compacted { .. })).count(), 1);
    let appended: usize = log.iter().map(|e| if let Entry::Appended { items, .. } = e { items.len() } else { 0 }).sum();
    assert_eq!(appended, history.len(), "the log holds every item");
}

#[tokio::test]
async fn a_request_refused_again_after_its_compaction_fails_the_turn_instead_of_looping() {
    let model = ScriptedModel::responder(|request| {
        if is_summary(request) {
            return Ok(ModelResponse::text("SUMMARY"));
        }
        Err(NoeticError::ContextLengthExceeded {
            step_id: String::new(),
            message: "too long".into(),
            requested: Some(9_000),
            limit: Some(8_000),
        })
    });
    let rt = runtime(&model, &MemoryLogStore::new(), |b| b);
    let error = rt.session("s").send("hello").await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("does not fit the model's context window"), "{error}");
    assert_eq!(model.calls(), 2, "the request and one retry");
}

#[tokio::test]
async fn requests_never_exceed_the_window_through_a_long_conversation_of_several_compactions() {
    let window = ContextWindow::new(1_500).output_reserve(300);
    let model = ScriptedModel::responder(conversational).with_context_window(window);
    let store = MemoryLogStore::new();
    let rt = runtime(&model, &store, |b| b);
    let session = rt.session("s");
    let mut events = session.subscribe();
    for k in 1..=30 {
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    let requests = model.requests();
    for (i, request) in requests.iter().enumerate() {
        let tokens = request_tokens(&Estimate, request);
        assert!(tokens <= 1_200, "request {i} takes {tokens} tokens, over the 1,200 the window has for it");
    }
    let summaries = requests.iter().filter(|r| is_summary(r)).count();
    assert!(summaries >= 3, "several compactions: {summaries}");
    assert!(summaries <= 10, "a compaction leaves room for the next turns: {summaries} in 30 turns");
    // Every request of a turn carries the turn's question: the current turn is never compacted.
    for request in requests.iter().filter(|r| !is_summary(r)) {
        let users = user_texts(request);
        assert!(users.last().unwrap().starts_with("question "), "{users:?}");
    }
    let mut compacted = 0;
    let mut started = 0;
    while let Ok(event) = events.try_recv() {
        match &event.kind {
            EventKind::ContextCompacted { folded, tokens_before, tokens_after, summarized, .. } => {
                compacted += 1;
                assert!(*folded > 0 && tokens_after < tokens_before && *summarized);
            }
            EventKind::ModelCallStarted { context_tokens, context_window, .. } => {
                started += 1;
                assert_eq!(*context_window, Some(1_500));
                assert!(context_tokens.is_some_and(|t| t <= 1_200), "{context_tokens:?}");
            }
            _ => {}
        }
    }
    assert_eq!(compacted, summaries);
    assert_eq!(started, requests.len() - summaries);
}

#[tokio::test]
async fn trimming_keeps_the_last_turns_and_never_splits_a_call_from_its_result() {
    let window = ContextWindow::new(1_500).output_reserve(300);
    let model = ScriptedModel::responder(conversational).with_context_window(window);
    let read = Counter::new().tool("read", json!("x".repeat(400))).unwrap();
    let agent = Step::llm("act", "m").compaction(Compaction::KeepLastTurns(2)).build().unwrap();
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(read).agent(agent).build().unwrap();
    let session = rt.session("s");
    for k in 1..=12 {
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    let requests = model.requests();
    assert!(!requests.iter().any(is_summary), "trimming asks for no summary");
    let trimmed: Vec<&ModelRequest> = requests
        .iter()
        .filter(|r| r.history.iter().next().and_then(Item::text).is_some_and(|t| t.contains("left out")))
        .collect();
    assert_eq!(trimmed.len(), requests.len() - 6, "every request from the fourth turn on is trimmed");
    for request in &trimmed {
        assert!(request_tokens(&Estimate, request) <= 1_200);
        let items: Vec<&Item> = request.history.iter().skip(1).collect();
        assert!(matches!(items[0], Item::Message { role: noetic::model::Role::User, .. }), "a cut at a turn's start");
        for item in &items {
            if let Item::ToolResult(r) = item {
                assert!(
                    items.iter().any(|i| matches!(i, Item::ToolCall(c) if c.id == r.call_id)),
                    "the result of {} is sent with its call",
                    r.call_id
                );
            }
        }
        let users = user_texts(request);
        assert_eq!(users.iter().filter(|u| u.contains("left out")).count(), 1);
        assert!(users.len() <= 4, "the note, the last two turns and the current one: {users:?}");
    }
}

/// A layer that asks for a guaranteed share of the window.
struct Reserved(&'static str, u32);

impl MemoryLayer for Reserved {
    fn id(&self) -> &str {
        self.0
    }

    fn budget(&self) -> noetic::layer::Budget {
        noetic::layer::Budget { min: self.1, max: self.1 * 2 }
    }

    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }
}

impl Recall for Reserved {
    fn recall<'a>(&'a self, _ctx: &'a HookContext<'a>, budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        // Fills what it is offered.
        Box::pin(async move { Ok(vec![Item::developer("y".repeat((budget as usize - 4) * 4))]) })
    }
}

#[test]
fn layer_minimums_that_do_not_fit_the_window_are_a_build_error_naming_the_layers() {
    let model = ScriptedModel::new([]).with_context_window(ContextWindow::new(1_000).output_reserve(200));
    let built = Runtime::builder()
        .model(Arc::new(model))
        .layer(Arc::new(Reserved("notes", 500)))
        .layer(Arc::new(Reserved("rag", 400)))
        .build();
    let error = built.err().unwrap();
    assert_eq!(error.code, ConfigCode::LayerMinimumsExceedWindow);
    assert!(error.message.contains("'notes' (min 500), 'rag' (min 400)"), "{}", error.message);
}

#[tokio::test]
async fn layers_get_their_share_and_the_history_the_rest() {
    let window = ContextWindow::new(2_000).output_reserve(400);
    let model = ScriptedModel::responder(conversational).with_context_window(window);
    let store = MemoryLogStore::new();
    let rt = runtime(&model, &store, |b| b.layer(Arc::new(Reserved("notes", 300))));
    let session = rt.session("s");
    for k in 1..=10 {
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    for request in model.requests().iter().filter(|r| !is_summary(r)) {
        let recalled = noetic::window::items_tokens(&Estimate, &request.context);
        assert!((300..=600).contains(&recalled), "the layer gets at least its min, at most its max: {recalled}");
        assert!(request_tokens(&Estimate, request) <= 1_600);
    }
}

#[tokio::test]
async fn a_compaction_is_kept_when_the_session_is_opened_again_from_its_log() {
    let window = ContextWindow::new(1_500).output_reserve(300);
    let model = ScriptedModel::responder(conversational).with_context_window(window);
    let store = MemoryLogStore::new();
    let session = runtime(&model, &store, |b| b).session("s");
    let mut k = 0;
    while !model.requests().iter().any(is_summary) {
        k += 1;
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    let again = ScriptedModel::responder(conversational).with_context_window(window);
    let reopened = runtime(&again, &store, |b| b).open("s").await.unwrap();
    reopened.send(question(k + 1)).await.unwrap().await.unwrap();
    let first = &again.requests()[0];
    assert!(!is_summary(first), "no new summary is asked for");
    assert!(user_texts(first)[0].contains("SUMMARY"), "the compacted history is sent: {:?}", user_texts(first));
}

#[tokio::test]
async fn compacting_by_hand_folds_everything_before_the_last_turn_and_the_log_records_it() {
    // A model whose window is not known: compacting by hand works all the same.
    let model = ScriptedModel::responder(conversational);
    let store = MemoryLogStore::new();
    let rt = runtime(&model, &store, |b| b);
    let session = rt.session("s");
    assert_eq!(session.compact("m").await.unwrap(), None, "an empty conversation has nothing to fold");
    for k in 1..=3 {
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    let compacted = session.compact("m").await.unwrap().unwrap();
    assert_eq!((compacted.folded, compacted.upto, compacted.summarized), (8, 8, true), "turns 1 and 2");
    assert!(compacted.tokens_after < compacted.tokens_before);
    session.send(question(4)).await.unwrap().await.unwrap();
    let last = model.requests().last().cloned().unwrap();
    assert_eq!(user_texts(&last).len(), 3, "the summary, turn 3 and turn 4: {:?}", user_texts(&last));
    assert!(user_texts(&last)[0].contains("SUMMARY"));
    assert_eq!(session.history().len(), 16, "the conversation keeps every item");
    let log = entries(&store, "s").await;
    assert!(
        log.iter().any(|e| matches!(e, Entry::Compacted { turn: None, upto: 8, summary: Some(s) } if s == "SUMMARY"))
    );
}

#[tokio::test]
async fn a_steering_message_injected_into_the_current_turn_is_never_compacted_away() {
    let steered = format!("STEERED: stop reading notes. {}", "Never mind the notes at all. ".repeat(120));
    let model = {
        let steered = steered.clone();
        ScriptedModel::responder(move |request| match request.history.last() {
            Some(Item::Message { content, .. }) if *content == steered => Ok(ModelResponse::text("stopping")),
            _ => conversational(request),
        })
        .with_context_window(ContextWindow::new(1_500).output_reserve(300))
    };
    let (read, gate) = noetic::testing::gated_tool("read").unwrap();
    let rt = Runtime::builder().model(Arc::new(model.clone())).model_id("m").tool(read).build().unwrap();
    let session = rt.session("s");
    for k in 1..=4 {
        let turn = session.send(question(k)).await.unwrap();
        gate.release();
        turn.await.unwrap();
    }
    let turn = session.send(question(5)).await.unwrap();
    gate.started().await;
    session.steer(steered.clone()).await.unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "stopping");
    let requests = model.requests();
    let after = requests.iter().find(|r| user_texts(r).contains(&steered)).unwrap();
    let users = user_texts(after);
    assert!(users[0].contains("compacted"), "the request that took the message in had to compact: {users:?}");
    assert_eq!(users[1..], [question(5), steered], "the current turn and the injected message are sent whole");
    assert!(request_tokens(&Estimate, after) <= 1_200);
}

/// Counts the times it is asked for the tokens of `watched`.
struct Watching {
    watched: &'static str,
    seen: std::sync::atomic::AtomicUsize,
}

impl noetic::window::TokenCounter for Watching {
    fn count(&self, text: &str) -> u32 {
        if text == self.watched {
            self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Estimate.count(text)
    }
}

/// A model with a known window and a tokenizer of its own, answering as `conversational` does.
struct Counted(Arc<Watching>);

impl noetic::model::Model for Counted {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let answer = conversational(&request);
        Box::pin(async move { answer })
    }
    fn context_window(&self, _model: &str) -> Option<ContextWindow> {
        Some(ContextWindow::new(100_000))
    }
    fn token_counter(&self, _model: &str) -> Option<Arc<dyn noetic::window::TokenCounter>> {
        Some(self.0.clone())
    }
}

#[tokio::test]
async fn a_step_counts_its_instructions_once_per_token_counter_not_on_every_request() {
    const INSTRUCTIONS: &str = "You are a careful agent; read the notes before you answer.";
    let counter = Arc::new(Watching { watched: INSTRUCTIONS, seen: Default::default() });
    let read = Counter::new().tool("read", json!("x")).unwrap();
    let model = Arc::new(Counted(counter.clone()));
    let runtime = Runtime::builder().model(model).model_id("m").instructions(INSTRUCTIONS).tool(read).build().unwrap();
    let session = runtime.session("s");
    for k in 0..3 {
        session.send(question(k)).await.unwrap().await.unwrap();
    }
    // Six requests (a tool call and an answer per turn), one count of the instructions (the runtime's builder
    // counts them once more to check the window's room).
    let seen = counter.seen.load(std::sync::atomic::Ordering::SeqCst);
    assert!(seen <= 2, "the instructions were counted {seen} times for 6 requests");
}
