//! End-to-end tests against a real llama.cpp server running a real instruct model (SmolLM2-135M-Instruct), started
//! by `scripts/local-llm.sh setup && scripts/local-llm.sh start`.
//!
//! Without a server each test prints why it did not run (on stderr, past the test harness's capture) and passes,
//! so a plain `cargo test` works anywhere; `.ci/run` starts the server and sets `NOETIC_E2E_REQUIRED=1`, which
//! turns a missing server into a failure. `NOETIC_LOCAL_LLM_URL` overrides the base URL (default
//! `http://127.0.0.1:18080/v1`, or the port in `NOETIC_LOCAL_LLM_PORT`, as for the script).
//!
//! The model is tiny: these tests check plumbing (wire format, streaming, tool calls, constraints), never the
//! quality of an answer. Tool calls are forced with `tool_choice: required` (enforced by llama.cpp's grammar);
//! with `auto` this model does not call tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{collect, done};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use noetic::model::{Capabilities, FinishReason, History, StreamDelta, ToolSpec};
use noetic::prelude::*;
use noetic::steering::{judge_prompt, judge_request, read_verdict};
use noetic_openai::{OpenAiConfig, OpenAiModel};
use serde_json::{Value, json};

const MODEL_ID: &str = "smollm2-135m";

/// The real server's model, or `None` (after saying why) when no server answers and none is required.
async fn local_model() -> Option<OpenAiModel> {
    let base = common::local_server().await?;
    let config = OpenAiConfig::llama_cpp(base).timeout(Duration::from_secs(120));
    Some(OpenAiModel::new(config).unwrap())
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for a city.".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}).into(),
    }
}

fn greedy(max_tokens: u32) -> ModelParams {
    ModelParams { temperature: Some(0.0), max_tokens: Some(max_tokens), ..ModelParams::default() }
}

fn chat(text: &str, max_tokens: u32) -> ModelRequest {
    ModelRequest {
        model: MODEL_ID.into(),
        instructions: Some("You are a helpful assistant.".into()),
        history: History::new(vec![Item::user(text)]),
        params: greedy(max_tokens),
        ..ModelRequest::default()
    }
}

fn weather_request(choice: ToolChoice) -> ModelRequest {
    ModelRequest {
        tools: Arc::from(vec![weather_tool()]),
        tool_choice: Some(choice),
        ..chat("What is the weather in Paris?", 64)
    }
}

fn assert_weather_call(response: &ModelResponse) {
    assert_eq!(response.finish_reason, FinishReason::ToolCalls, "{response:?}");
    let calls: Vec<_> = response.tool_calls_iter().collect();
    assert_eq!(calls.len(), 1, "{response:?}");
    assert_eq!(&*calls[0].name, "get_weather");
    assert!(!calls[0].id.is_empty(), "the server gives every call an id");
    // Argument values are the model's business; their shape is the grammar's.
    let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
    assert!(args.is_object(), "arguments are a JSON object: {}", calls[0].arguments);
}

#[tokio::test]
async fn plain_chat_returns_text_usage_and_a_finish_reason() {
    let Some(model) = local_model().await else { return };
    let response = model.call(chat("Say hello in one short sentence.", 24)).await.unwrap();
    assert!(!response.text_output().trim().is_empty(), "{response:?}");
    assert!(matches!(response.finish_reason, FinishReason::Stop | FinishReason::Length), "{response:?}");
    assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0, "{:?}", response.usage);
    assert!(response.usage.output_tokens <= 24, "max_tokens is honoured: {:?}", response.usage);
    assert_eq!(response.tool_calls_iter().count(), 0);
}

#[tokio::test]
async fn streaming_runs_to_done_and_the_deltas_add_up_to_the_response() {
    let Some(model) = local_model().await else { return };
    let deltas = collect(&model, chat("Count from one to five in words.", 32)).await;
    let response = done(&deltas);
    let streamed: String = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 2, "text arrives in several pieces: {deltas:?}");
    assert_eq!(streamed, response.text_output());
    assert!(!streamed.trim().is_empty());
    assert!(response.usage.output_tokens > 0, "usage arrives in the last chunk: {:?}", response.usage);
}

#[tokio::test]
async fn required_tool_choice_yields_a_tool_call_in_call_and_stream() {
    let Some(model) = local_model().await else { return };
    let response = model.call(weather_request(ToolChoice::Required)).await.unwrap();
    assert_weather_call(&response);

    let deltas = collect(&model, weather_request(ToolChoice::Required)).await;
    let streamed = done(&deltas);
    assert_weather_call(&streamed);
    let pieces = deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCall { .. })).count();
    assert!(pieces > 1, "the call's arguments stream in pieces: {deltas:?}");
    match &deltas[0] {
        StreamDelta::ToolCall { index: 0, id: Some(_), name: Some(name), .. } => assert_eq!(name, "get_weather"),
        other => panic!("the first piece carries the call's id and name: {other:?}"),
    }
}

#[tokio::test]
async fn a_named_tool_choice_calls_that_tool() {
    let Some(model) = local_model().await else { return };
    let mut request = weather_request(ToolChoice::Named("get_time".into()));
    request.tools = Arc::from(vec![
        weather_tool(),
        ToolSpec {
            name: "get_time".into(),
            description: "Get the local time in a time zone.".into(),
            parameters: json!({"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
                .into(),
        },
    ]);
    let response = model.call(request).await.unwrap();
    let names: Vec<_> = response.tool_calls_iter().map(|c| &*c.name).collect();
    assert_eq!(names, ["get_time"], "{response:?}");
}

#[tokio::test]
async fn a_tool_result_round_trip_is_accepted_and_answered_in_text() {
    let Some(model) = local_model().await else { return };
    let first = model.call(weather_request(ToolChoice::Required)).await.unwrap();
    assert_weather_call(&first);
    let call = first.tool_calls_iter().next().unwrap().clone();
    let mut history = vec![Item::user("What is the weather in Paris?")];
    history.extend(first.items.iter().cloned());
    history.push(Item::ToolResult(ToolResult::ok(call.id.clone(), r#"{"sky":"sunny","temp_c":21}"#)));
    // A developer note after the tool result: sent as a system message in place, which this template accepts.
    history.push(Item::developer("Answer in one sentence."));
    let request = ModelRequest {
        history: History::new(history),
        tool_choice: Some(ToolChoice::None),
        ..weather_request(ToolChoice::None)
    };
    let answer = model.call(request).await.unwrap();
    assert_eq!(answer.tool_calls_iter().count(), 0, "tool_choice none: {answer:?}");
    assert!(!answer.text_output().trim().is_empty(), "{answer:?}");
}

/// Forces a tool call in the first round and forbids one afterwards (the tiny model never calls tools on its own,
/// and would call them forever when forced), and keeps every request.
struct FirstRoundCallsATool {
    inner: OpenAiModel,
    requests: Mutex<Vec<ModelRequest>>,
}

impl FirstRoundCallsATool {
    fn adjust(&self, mut request: ModelRequest) -> ModelRequest {
        let answered = request.messages().any(|i| matches!(i, Item::ToolResult(_)));
        request.tool_choice = Some(if answered { ToolChoice::None } else { ToolChoice::Required });
        self.requests.lock().unwrap().push(request.clone());
        request
    }
}

impl Model for FirstRoundCallsATool {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let request = self.adjust(request);
        self.inner.call(request)
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let request = self.adjust(request);
        self.inner.stream(request)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[tokio::test]
async fn an_agent_turn_denies_a_tool_and_the_real_model_receives_the_denial() {
    let Some(inner) = local_model().await else { return };
    let model = Arc::new(FirstRoundCallsATool { inner, requests: Mutex::new(Vec::new()) });
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let delete = FnTool::builder("delete_file", "Delete a file by path.")
        .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
        .handler(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("deleted")) }
        })
        .build()
        .unwrap();
    let rule = SteeringRule::predicate("no-deletes", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "delete_file" => SteeringDecision::deny("Deleting files is not allowed here."),
        _ => SteeringDecision::allow(),
    });
    let runtime = Runtime::builder()
        .model(model.clone())
        // The answer is bounded: unbounded, this model may talk until its context is full.
        .agent(
            Step::llm("assistant", MODEL_ID)
                .instructions("You manage files with tools.")
                .params(greedy(48))
                .build()
                .unwrap(),
        )
        .tool(Arc::new(delete))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let answer = runtime.session("e2e").send("Delete the file notes.txt").await.unwrap().await.unwrap();

    assert_eq!(runs.load(Ordering::SeqCst), 0, "the denied tool never ran");
    assert!(!answer.trim().is_empty(), "the model answered after the denial");
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "one round with the tool call, one answering it");
    let denial = requests[1]
        .messages()
        .find_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .expect("the second request carries the tool result");
    assert!(denial.is_error);
    assert_eq!(&*denial.content, "Steering denied: Deleting files is not allowed here.");
    let call_ids: Vec<_> = requests[1]
        .messages()
        .filter_map(|i| match i {
            Item::ToolCall(c) => Some(c.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(call_ids, [denial.call_id], "the result answers the server's own call id");
}

#[tokio::test]
async fn a_grammar_constrained_judge_call_returns_a_verdict_that_parses() {
    let Some(model) = local_model().await else { return };
    let prompt =
        judge_prompt("Never delete files outside /workspace/.", "Tool: delete_file\nArgs: {\"path\":\"/etc/passwd\"}");
    let request = judge_request(&model, MODEL_ID, prompt);
    assert!(request.grammar.is_some(), "llama.cpp takes a grammar, so the judge asks for one");
    for _ in 0..3 {
        let response = model.call(request.clone()).await.unwrap();
        let reply = response.text_output();
        // The verdict is the grammar's doing; whether it is the right one is the (tiny) model's, and not judged.
        assert!(read_verdict(reply).is_some(), "unparseable verdict {reply:?}");
        assert!(!reply.contains('\n'), "the grammar keeps the verdict on one line: {reply:?}");
    }
}

#[tokio::test]
async fn a_schema_constrained_judge_call_returns_a_verdict_that_parses() {
    let Some(model) = local_model().await else { return };
    let schema_only = OpenAiModel::new(
        OpenAiConfig::new()
            .base_url(model.endpoint().trim_end_matches("/chat/completions"))
            .capabilities(Capabilities { grammar: false, json_schema: true }),
    )
    .unwrap();
    let prompt = judge_prompt("Never delete files.", "Tool: delete_file\nArgs: {\"path\":\"notes.txt\"}");
    let request = judge_request(&schema_only, MODEL_ID, prompt);
    assert!(request.grammar.is_none() && request.output_schema.is_some());
    let response = schema_only.call(request).await.unwrap();
    let reply = response.text_output();
    assert!(read_verdict(reply).is_some(), "unparseable verdict {reply:?}");
}

#[tokio::test]
async fn an_llm_rule_judged_by_the_real_model_records_a_parsed_verdict() {
    let Some(model) = local_model().await else { return };
    let rule = SteeringRule::llm(
        "judged",
        [Hook::BeforeToolCall],
        LlmEval::sync("Deny deleting files outside /workspace/.").model(MODEL_ID),
    );
    // The point is the verdict, not the time: the one-thread server may be busy with the file's other tests, so
    // the hook's 5 s limit (which would record a timeout, not a verdict) is lifted here.
    let mut config = SteeringConfig::new([rule]);
    config.before_tool_call_timeout = std::time::Duration::from_secs(120);
    let layer = steering(config).unwrap();
    let ctx = StepContext::builder().model(Arc::new(model)).build();
    let args = json!({"path": "/etc/passwd"});
    let params = noetic::layer::ToolCallParams { call_id: "c1", name: "delete_file", args: &args };
    layer.before_tool_call(&ctx.hooks(), params).await.unwrap();
    let ledger = layer.state_for(&ctx).unwrap().ledger;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger[0].failures.is_empty(), "the constrained verdict parsed: {ledger:?}");
    assert!(ctx.usage().input_tokens > 0, "the judge's usage is counted");
}
