//! The offline long conversation (#32 item 5): the real SmolLM2-135M on llama.cpp (a 4,096-token window per slot),
//! a scripted conversation of 200 turns, each with a tool call, keeps working through several compactions, and no
//! request ever exceeds the window the server reports.
//!
//! Skips (saying why) without a local server; `NOETIC_E2E_REQUIRED=1` makes a missing server a failure (see
//! `tests/common`). It takes minutes on one CPU thread: `.ci/run` runs it with the other local-model tests.
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
    let (window, tokens) = llama_cpp_window(&base, Duration::from_secs(30)).await.unwrap();
    let n_ctx = window.tokens;
    assert!(n_ctx <= 8_192, "SmolLM2's small window as the server reports it: {n_ctx}");
    let config = OpenAiConfig::llama_cpp(base)
        .model_override(MODEL_ID)
        .timeout(Duration::from_secs(300))
        .context_window(window)
        .token_counter(Arc::new(tokens));
    let seen = Arc::new(Seen::default());
    let model = Recording { inner: Arc::new(OpenAiModel::new(config).unwrap()), seen: seen.clone() };
    // One possible argument: the server's grammar makes the model write `{"topic": "build"}`, a call of a few tokens.
    let calls = Arc::new(AtomicUsize::new(0));
    let note: Arc<dyn noetic::tool::Tool> = {
        let calls = calls.clone();
        Arc::new(
            noetic::tool::FnTool::builder("read_note", "Reads the note about the failing build.")
                .input_schema(json!({
                    "type": "object",
                    "properties": {"topic": {"type": "string", "enum": ["build"]}},
                    "required": ["topic"],
                    "additionalProperties": false
                }))
                .handler(move |_, _| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok(json!(
                            "The note says: the build failed because parse_args returns an error when the --config \
                             flag is missing; the fix is to fall back to noetic.toml in the working directory, then \
                             run the tests."
                        ))
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
        .params(ModelParams { temperature: Some(0.0), max_tokens: Some(40), ..ModelParams::default() })
        .max_rounds(2)
        .build()
        .unwrap();
    let rt = Runtime::builder().model(Arc::new(model)).agent(agent).tool(note).build().unwrap();
    let session = rt.session("long");
    let mut compactions = 0;
    let mut events = session.subscribe();
    for k in 1..=TURNS {
        let turn = session.send(format!("Turn {k}: read the note and tell me what failed.")).await.unwrap();
        if let Err(e) = turn.await {
            panic!("turn {k} failed: {e}");
        }
        while let Ok(event) = events.try_recv() {
            if matches!(event.kind, EventKind::ContextCompacted { .. }) {
                compactions += 1;
            }
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
