//! The offline long conversation (#32 item 5): the real SmolLM2-135M on llama.cpp (a 4,096-token window per slot,
//! of which the runtime is told [`WINDOW`]), a scripted conversation of 200 turns, each with a tool call, keeps
//! working through several compactions, and no request ever exceeds that window as the server counts its prompt.
//!
//! Skips (saying why) without a local server; `NOETIC_E2E_REQUIRED=1` makes a missing server a failure (see
//! `tests/common`). It takes about 9 minutes with the server on two CPU threads (as `.ci/run` starts it), with the
//! other local-model tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use noetic::model::{ContextWindow, Model, ToolChoice};
use noetic::prelude::*;
use noetic::window::TokenCounter;
use noetic_openai::{OpenAiConfig, OpenAiModel, llama_cpp_window};
use serde_json::json;

const MODEL_ID: &str = "smollm2-135m";
const TURNS: usize = 200;
/// The window the runtime keeps to: a quarter of the server's slot, so that two hundred turns on one CPU thread take
/// minutes (every answer token attends to the whole prompt; at 4,096 tokens a turn took 7 s, 25 min in all).
const WINDOW: u32 = 2048;
/// A reply's cap: a short sentence, or the tool call (about 15 tokens).
const ANSWER_TOKENS: u32 = 24;

/// What each call asked and what the server said it read.
#[derive(Default)]
struct Seen {
    /// Per call: the prompt tokens the server reported, the answer's cap, whether it was a summary request.
    calls: Mutex<Vec<(u64, u32, bool)>>,
    refused: AtomicUsize,
}

/// The real model, recording every call.
struct Recording {
    inner: Arc<dyn Model>,
    seen: Arc<Seen>,
}

impl Model for Recording {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let summary = request.instructions.as_deref().is_some_and(|i| i.starts_with("You compact a conversation"));
        let cap = request.params.max_tokens.unwrap_or(0);
        let (call, seen) = (self.inner.call(request), self.seen.clone());
        Box::pin(async move {
            let answer = call.await;
            match &answer {
                Ok(response) => lock(&seen.calls).push((response.usage.input_tokens, cap, summary)),
                Err(NoeticError::ContextLengthExceeded { .. }) => {
                    seen.refused.fetch_add(1, Ordering::SeqCst);
                }
                Err(_) => {}
            }
            answer
        })
    }

    fn context_window(&self, model: &str) -> Option<ContextWindow> {
        self.inner.context_window(model)
    }

    fn token_counter(&self, model: &str) -> Option<Arc<dyn TokenCounter>> {
        self.inner.token_counter(model)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_with_the_local_model_keeps_within_its_window_through_several_compactions() {
    let Some(base) = common::local_server().await else { return };
    let (served, tokens) = llama_cpp_window(&base, Duration::from_secs(30)).await.unwrap();
    assert!(served.tokens <= 8_192, "SmolLM2's small window as the server reports it: {}", served.tokens);
    assert!(served.tokens >= WINDOW, "the server's window ({}) holds the test's", served.tokens);
    let window = ContextWindow::new(WINDOW).output_reserve(WINDOW / 16);
    let n_ctx = window.tokens;
    let config = OpenAiConfig::llama_cpp(base)
        .model_override(MODEL_ID)
        .timeout(Duration::from_secs(300))
        .context_window(window)
        .token_counter(Arc::new(tokens));
    let seen = Arc::new(Seen::default());
    let model = Recording { inner: Arc::new(OpenAiModel::new(config).unwrap()), seen: seen.clone() };
    // No arguments: the server's grammar makes the model write `{}`, the shortest call there is (its tokens are
    // decoded one at a time, and the answer's cap holds them too).
    let calls = Arc::new(AtomicUsize::new(0));
    let note: Arc<dyn noetic::tool::Tool> = {
        let calls = calls.clone();
        Arc::new(
            noetic::tool::FnTool::builder("note", "Reads the note about the failing build.")
                .input_schema(json!({"type": "object", "properties": {}, "additionalProperties": false}))
                .handler(move |_, _| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok(json!("parse_args fails without --config; fall back to noetic.toml, then run the tests."))
                    }
                })
                .build()
                .unwrap(),
        )
    };
    // Every turn calls the tool (forced in its first round) and then answers briefly without tools.
    let agent = Step::llm("act", MODEL_ID)
        .instructions("You are a terse assistant. Read the note when asked, then answer in one short sentence.")
        .first_round_tool_choice(ToolChoice::Required)
        .tool_choice(ToolChoice::None)
        .params(ModelParams { temperature: Some(0.0), max_tokens: Some(ANSWER_TOKENS), ..ModelParams::default() })
        .max_rounds(2)
        .build()
        .unwrap();
    let rt = Runtime::builder().model(Arc::new(model)).agent(agent).tool(note).build().unwrap();
    let session = rt.session("long");
    let mut compactions = 0;
    let mut events = session.subscribe();
    let started = std::time::Instant::now();
    for k in 1..=TURNS {
        let turn = session.send(format!("Turn {k}: read the note and tell me what failed.")).await.unwrap();
        if let Err(e) = turn.await {
            panic!("turn {k} failed: {e}");
        }
        // Checked each turn: a conversation that stopped calling the tool fails at once instead of minutes later.
        assert_eq!(calls.load(Ordering::SeqCst), k, "turn {k} called the tool once");
        while let Ok(event) = events.try_recv() {
            if matches!(event.kind, EventKind::ContextCompacted { .. }) {
                compactions += 1;
            }
        }
        if k % 20 == 0 {
            eprintln!("turn {k}: {compactions} compactions, {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), TURNS, "a tool call per turn");
    assert!(compactions >= 3, "several compactions: {compactions}");
    assert_eq!(seen.refused.load(Ordering::SeqCst), 0, "the server never refused a request as too long");
    let calls = lock(&seen.calls).clone();
    let summaries = calls.iter().filter(|(_, _, summary)| *summary).count();
    assert_eq!(summaries, compactions, "each compaction asked the model for one summary");
    for (i, (prompt, cap, _)) in calls.iter().enumerate() {
        assert!(
            prompt + u64::from(*cap) <= u64::from(n_ctx),
            "call {i}: {prompt} prompt tokens and {cap} for the answer exceed the {n_ctx}-token window"
        );
    }
    assert_eq!(session.history().len(), TURNS * 4, "the conversation keeps every item: question, call, result, answer");
}
