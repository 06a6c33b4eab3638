//! `llm` steps: structured output, the tools and parameters each request carries, the history, cancellation, model
//! errors and event emission (the tool loop, approvals and limits: `llm_step.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod llm_common;

use std::sync::Arc;
use std::time::Duration;

use llm_common::*;
use noetic::model::{History, ModelRequest, ModelResponse, ScriptedModel, StepMeta, Usage};
use noetic::prelude::*;
use noetic::step::Emit;
use noetic::testing::EventCollector;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------------------------------
// Structured output

#[derive(Debug, Deserialize, PartialEq)]
struct Weather {
    city: String,
    celsius: i64,
}

fn weather_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
        "required": ["city", "celsius"]
    })
}

fn weather_step() -> Step<String, Weather> {
    Step::llm("forecast", MODEL).output::<Weather>(weather_schema()).build().unwrap()
}

#[tokio::test]
async fn structured_output_is_deserialised_and_the_schema_reaches_the_request() {
    let model = ScriptedModel::new([ModelResponse::text(r#"{"city": "Paris", "celsius": 21}"#)]);
    let ctx = context(&model, []);
    let out = weather_step().execute("weather?".to_string(), &ctx).await.unwrap();
    assert_eq!(out, Weather { city: "Paris".into(), celsius: 21 });
    assert_eq!(model.requests()[0].output_schema, Some(weather_schema()));
}

#[tokio::test]
async fn structured_output_that_is_not_json_is_a_parse_error_carrying_the_raw_text() {
    let raw = "It is sunny in Paris, 21 degrees.";
    let model = ScriptedModel::new([ModelResponse::text(raw)]);
    let err = weather_step().execute("weather?".to_string(), &context(&model, [])).await.unwrap_err();
    match err {
        NoeticError::ModelParseError { step_id, raw: got, .. } => {
            assert_eq!(step_id, "forecast");
            assert_eq!(got, raw);
        }
        other => panic!("expected ModelParseError, got {other:?}"),
    }
}

#[tokio::test]
async fn structured_output_violating_the_schema_is_a_parse_error_carrying_the_raw_text() {
    let raw = r#"{"city": "Paris", "celsius": "warm"}"#;
    let model = ScriptedModel::new([ModelResponse::text(raw)]);
    let err = weather_step().execute("weather?".to_string(), &context(&model, [])).await.unwrap_err();
    match err {
        NoeticError::ModelParseError { raw: got, message, .. } => {
            assert_eq!(got, raw);
            assert!(message.contains("celsius"), "the violation names the field: {message}");
        }
        other => panic!("expected ModelParseError, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tool subset

fn tool_names(request: &ModelRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn an_empty_tool_list_sends_no_tools_even_when_the_context_has_some() {
    let log = Log::default();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "alpha", json!({}))]), ModelResponse::text("done")]);
    let ctx = context(&model, [recording_tool("alpha", &log), recording_tool("beta", &log)]);
    let step: Step<String, String> = Step::llm("assistant", MODEL).tools(Vec::new()).build().unwrap();
    assert_eq!(step.execute("hi".to_string(), &ctx).await.unwrap(), "done");
    let requests = model.requests();
    assert!(requests[0].tools.is_empty(), "{:?}", requests[0].tools);
    assert!(entries(&log).is_empty(), "a tool outside the step's subset must not run");
    let results = tool_results(&requests[1].history);
    assert!(results[0].is_error && results[0].content.contains("unknown tool"), "{results:?}");
}

#[tokio::test]
async fn a_tool_list_sends_only_those_tools() {
    let log = Log::default();
    let alpha = recording_tool("alpha", &log);
    let model = ScriptedModel::new([ModelResponse::text("done")]);
    let ctx = context(&model, [alpha.clone(), recording_tool("beta", &log)]);
    let step: Step<String, String> = Step::llm("assistant", MODEL).tools([alpha]).build().unwrap();
    step.execute("hi".to_string(), &ctx).await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(tool_names(request), ["alpha"]);
    assert_eq!(request.tools[0].description, "Records that it ran.");
    assert_eq!(*request.tools[0].parameters, json!({"type": "object"}));
}

#[tokio::test]
async fn without_a_tool_list_all_context_tools_are_sent() {
    let log = Log::default();
    let model = ScriptedModel::new([ModelResponse::text("done")]);
    let ctx = context(&model, [recording_tool("alpha", &log), add_tool(&log)]);
    assistant().execute("hi".to_string(), &ctx).await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(tool_names(request), ["alpha", "add"]);
    assert_eq!(request.tools[1].parameters["required"], json!(["a", "b"]));
}

// ---------------------------------------------------------------------------------------------------------------
// Parameters

#[tokio::test]
async fn params_tool_choice_and_instructions_reach_every_model_request_unchanged() {
    let log = Log::default();
    let params = ModelParams {
        temperature: Some(0.25),
        top_p: Some(0.9),
        max_tokens: Some(321),
        stop_sequences: vec!["END".into(), "\n\nUser:".into()],
    };
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "add", json!({"a": 1, "b": 1}))]),
        ModelResponse::text("2"),
    ]);
    let ctx = context(&model, [add_tool(&log)]);
    let step: Step<String, String> = Step::llm("assistant", MODEL)
        .instructions("Answer with a number.")
        .params(params.clone())
        .tool_choice(ToolChoice::Named("add".into()))
        .build()
        .unwrap();
    assert_eq!(step.execute("1+1?".to_string(), &ctx).await.unwrap(), "2");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.model, MODEL.into());
        assert_eq!(request.params, params);
        assert_eq!(request.tool_choice, Some(ToolChoice::Named("add".into())));
        assert_eq!(request.instructions.as_deref(), Some("Answer with a number."));
        assert_eq!(request.output_schema, None);
    }
}

#[tokio::test]
async fn a_first_round_tool_choice_applies_to_the_first_request_of_each_run_and_later_rounds_use_the_steps() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "add", json!({"a": 1, "b": 1}))]),
        ModelResponse::tool_calls([("c2", "add", json!({"a": 2, "b": 2}))]),
        ModelResponse::text("done"),
        ModelResponse::tool_calls([("c3", "add", json!({"a": 3, "b": 3}))]),
        ModelResponse::text("again"),
    ]);
    let ctx = context(&model, [add_tool(&log)]);
    let step: Step<String, String> =
        Step::llm("assistant", MODEL).first_round_tool_choice(ToolChoice::Required).build().unwrap();
    assert_eq!(step.execute("first".to_string(), &ctx).await.unwrap(), "done");
    assert_eq!(step.execute("second".to_string(), &ctx).await.unwrap(), "again");
    let choices: Vec<Option<ToolChoice>> = model.requests().into_iter().map(|r| r.tool_choice).collect();
    assert_eq!(choices, [Some(ToolChoice::Required), None, None, Some(ToolChoice::Required), None]);
    let with_both: Step<String, String> = Step::llm("assistant", MODEL)
        .tool_choice(ToolChoice::None)
        .first_round_tool_choice(ToolChoice::Named("add".into()))
        .build()
        .unwrap();
    let Step::Llm(llm) = &with_both else { unreachable!("an llm step") };
    assert_eq!(llm.first_round_tool_choice(), Some(&ToolChoice::Named("add".into())));
    assert_eq!(llm.tool_choice(), Some(&ToolChoice::None));
}

#[tokio::test]
async fn defaults_send_no_params_tool_choice_or_instructions() {
    let model = ScriptedModel::new([ModelResponse::text("hi")]);
    assistant().execute("hello".to_string(), &context(&model, [])).await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(request.params, ModelParams::default());
    assert_eq!(request.tool_choice, None);
    assert_eq!(request.instructions, None);
}

// ---------------------------------------------------------------------------------------------------------------
// History

fn earlier_conversation() -> Vec<Item> {
    vec![Item::system("be nice"), Item::user("earlier question"), Item::assistant("earlier answer")]
}

#[tokio::test]
async fn a_non_empty_input_is_appended_as_a_user_message_after_the_context_history() {
    let model = ScriptedModel::new([ModelResponse::text("answer")]);
    let ctx = StepContext::builder().model(Arc::new(model.clone())).items(earlier_conversation()).build();
    assistant().execute("follow-up".to_string(), &ctx).await.unwrap();
    let mut expected = earlier_conversation();
    expected.push(Item::user("follow-up"));
    assert_eq!(model.requests()[0].history.as_slice(), expected.as_slice());
    expected.push(Item::assistant("answer"));
    assert_eq!(ctx.items(), expected);
}

#[tokio::test]
async fn an_empty_input_appends_no_user_message() {
    let model = ScriptedModel::new([ModelResponse::text("a"), ModelResponse::text("b")]);
    let ctx = StepContext::builder().model(Arc::new(model.clone())).items(earlier_conversation()).build();
    assistant().execute(String::new(), &ctx).await.unwrap();
    let unit: Step<(), String> = Step::llm("unit", MODEL).build().unwrap();
    unit.execute((), &ctx).await.unwrap();
    let requests = model.requests();
    assert_eq!(requests[0].history.as_slice(), earlier_conversation().as_slice());
    let mut second = earlier_conversation();
    second.push(Item::assistant("a"));
    assert_eq!(requests[1].history.as_slice(), second.as_slice());
    assert!(ctx.items().iter().all(|i| i.text() != Some("")), "no empty message was added");
}

// ---------------------------------------------------------------------------------------------------------------
// Cancellation

/// A tool that signals `started`, waits for cancellation, records, and then either returns (`returns`) or hangs.
fn cancellation_watcher(started: &Arc<Notify>, log: &Log, returns: bool) -> Arc<dyn Tool> {
    let (started, log) = (started.clone(), log.clone());
    Arc::new(
        FnTool::builder("watch", "Waits for cancellation.")
            .handler(move |_args, tcx: ToolContext| {
                let (started, log) = (started.clone(), log.clone());
                async move {
                    started.notify_one();
                    tcx.ctx.cancelled().await;
                    log.lock().unwrap().push("watch saw cancellation".into());
                    if returns {
                        Err::<Value, _>(ToolError::new("stopped: the run was cancelled"))
                    } else {
                        std::future::pending().await
                    }
                }
            })
            .build()
            .unwrap(),
    )
}

fn watch_then_more() -> ScriptedModel {
    ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "watch", json!({})), ("c2", "after", json!({}))]),
        ModelResponse::text("this answer must not be produced"),
    ])
}

#[tokio::test]
async fn cancellation_reaches_a_running_tool_and_every_call_still_gets_a_result() {
    let (started, log) = (Arc::new(Notify::new()), Log::default());
    let model = watch_then_more();
    let ctx = context(&model, [cancellation_watcher(&started, &log, false), recording_tool("after", &log)]);
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { assistant().execute("go".to_string(), &ctx).await }
    });
    started.notified().await;
    ctx.cancel("user pressed stop");
    let result = task.await.unwrap();
    match result {
        Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some("user pressed stop")),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(entries(&log), ["watch saw cancellation"], "the later tool never starts");
    assert_eq!(model.calls(), 1, "no model call after cancellation");
    let items = ctx.items();
    assert_every_call_has_one_result(&items);
    assert!(tool_results(&History::new(items)).iter().all(|r| r.is_error));
}

#[tokio::test]
async fn a_tool_that_returns_after_seeing_cancellation_still_ends_the_step_cancelled() {
    let (started, log) = (Arc::new(Notify::new()), Log::default());
    let model = watch_then_more();
    let ctx = context(&model, [cancellation_watcher(&started, &log, true), recording_tool("after", &log)]);
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { assistant().execute("go".to_string(), &ctx).await }
    });
    started.notified().await;
    ctx.cancel("user pressed stop");
    let result = task.await.unwrap();
    assert!(matches!(result, Err(NoeticError::Cancelled { .. })), "expected Cancelled, got {result:?}");
    assert_eq!(entries(&log), ["watch saw cancellation"], "no tool starts after cancellation");
    assert_eq!(model.calls(), 1, "no model call after cancellation");
    assert_every_call_has_one_result(&ctx.items());
}

#[tokio::test(start_paused = true)]
async fn a_held_model_call_is_cancelled_with_the_context() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("too late"));
    let ctx = context(&model, []);
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { assistant().execute("go".to_string(), &ctx).await }
    });
    held.entered().await;
    ctx.cancel("shutdown");
    let result = tokio::time::timeout(Duration::from_secs(60), task).await.expect("the step must end").unwrap();
    match result {
        Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some("shutdown")),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert!(!ctx.items().iter().any(|i| i.text() == Some("too late")));
    drop(held);
}

// ---------------------------------------------------------------------------------------------------------------
// Model errors and configuration

#[tokio::test]
async fn a_model_rate_limit_surfaces_with_the_step_id_filled_in() {
    let model = ScriptedModel::new([]);
    model.push_error(NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: Some(5), message: None });
    let err = assistant().execute("hi".to_string(), &context(&model, [])).await.unwrap_err();
    match err {
        NoeticError::ModelRateLimit { step_id, retry_after_ms, .. } => {
            assert_eq!(step_id, "assistant");
            assert_eq!(retry_after_ms, Some(5));
        }
        other => panic!("expected ModelRateLimit, got {other:?}"),
    }
    assert_eq!(model.calls(), 1, "the llm step itself does not retry");
}

#[tokio::test]
async fn a_model_refusal_fails_the_step_with_model_refused() {
    let model =
        ScriptedModel::new([ModelResponse { refusal: Some("I can't help with that.".into()), ..Default::default() }]);
    let err = assistant().execute("do something bad".to_string(), &context(&model, [])).await.unwrap_err();
    match err {
        NoeticError::ModelRefused { step_id, refusal } => {
            assert_eq!(step_id, "assistant");
            assert_eq!(refusal, "I can't help with that.");
        }
        other => panic!("expected ModelRefused, got {other:?}"),
    }
}

#[tokio::test]
async fn an_llm_step_without_a_model_is_a_no_model_provider_config_error() {
    let err = assistant().execute("hi".to_string(), &StepContext::new()).await.unwrap_err();
    match err {
        NoeticError::Config(e) => {
            assert_eq!(e.code, ConfigCode::NoModelProvider);
            assert_eq!(e.code.as_str(), "NO_MODEL_PROVIDER");
            assert!(e.message.contains("assistant"), "{}", e.message);
        }
        other => panic!("expected Config(NoModelProvider), got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Events

/// The kinds of the events not yet taken from `events`.
fn drain(events: &mut EventCollector) -> Vec<EventKind> {
    events.take().iter().map(|e| e.kind.clone()).collect()
}

fn evented_context(model: &ScriptedModel, log: &Log) -> (StepContext, EventCollector) {
    let sink = EventSink::new(256);
    let events = EventCollector::new(sink.subscribe().unwrap());
    let ctx = StepContext::builder().model(Arc::new(model.clone())).tools([add_tool(log)]).events(sink).build();
    (ctx, events)
}

fn add_then_answer() -> ScriptedModel {
    ScriptedModel::new([ModelResponse::tool_calls([("c1", "add", json!({"a": 1, "b": 2}))]), ModelResponse::text("3")])
}

#[tokio::test]
async fn emit_nothing_suppresses_the_step_model_and_tool_events() {
    let log = Log::default();
    let model = add_then_answer();
    let (ctx, mut rx) = evented_context(&model, &log);
    let quiet: Step<String, String> = Step::llm("quiet", MODEL).emit(Emit::Nothing).build().unwrap();
    assert_eq!(quiet.execute("1+2?".to_string(), &ctx).await.unwrap(), "3");
    assert_eq!(entries(&log), ["add(1,2)"], "the step still ran its tool");
    let events = drain(&mut rx);
    assert!(events.is_empty(), "Emit::Nothing must emit nothing for the step, got {events:?}");

    // The sink itself works: a step with default emission is seen.
    let probe: Step<String, String> = Step::run("probe", |s: String, _ctx| async move { Ok(s) }).build().unwrap();
    probe.execute("x".to_string(), &ctx).await.unwrap();
    let events = drain(&mut rx);
    assert!(
        events.iter().any(|e| matches!(e, EventKind::StepStarted { step_id, .. } if &**step_id == "probe")),
        "{events:?}"
    );
}

#[tokio::test]
async fn emit_all_emits_model_and_tool_events_in_order() {
    let log = Log::default();
    let model = add_then_answer();
    let (ctx, mut rx) = evented_context(&model, &log);
    let streamed: Step<String, String> = Step::llm("assistant", MODEL).stream(true).build().unwrap();
    assert_eq!(streamed.execute("1+2?".to_string(), &ctx).await.unwrap(), "3");
    let labels: Vec<String> = drain(&mut rx)
        .into_iter()
        .map(|e| match e {
            EventKind::StepStarted { step_id, .. } => format!("step_started {step_id}"),
            EventKind::StepCompleted { step_id, .. } => format!("step_completed {step_id}"),
            EventKind::ModelCallStarted { step_id, model, round, tools, .. } => {
                format!("model_call_started {step_id} {model} round={round} tools={tools}")
            }
            EventKind::ModelCallCompleted { round, tool_calls, .. } => {
                format!("model_call_completed round={round} tool_calls={tool_calls}")
            }
            EventKind::ToolCallStarted { call_id, tool, .. } => format!("tool_call_started {call_id} {tool}"),
            EventKind::ToolCallCompleted { call_id, is_error, output, .. } => {
                format!("tool_call_completed {call_id} error={is_error} {output}")
            }
            EventKind::ModelTextDelta { step_id, text } => format!("model_text_delta {step_id} {text}"),
            other => format!("other {other:?}"),
        })
        .collect();
    assert_eq!(
        labels,
        [
            "step_started assistant",
            "model_call_started assistant openai/gpt-4o-mini round=0 tools=1",
            "model_call_completed round=0 tool_calls=1",
            "tool_call_started c1 add",
            "tool_call_completed c1 error=false 3",
            "model_call_started assistant openai/gpt-4o-mini round=1 tools=1",
            "model_text_delta assistant 3",
            "model_call_completed round=1 tool_calls=0",
            "step_completed assistant",
        ]
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Loop integration

#[tokio::test]
async fn no_tool_calls_around_an_llm_step_stops_after_one_iteration() {
    let log = Log::default();
    let model = add_then_answer();
    let ctx = context(&model, [add_tool(&log)]);
    let agent = Step::loop_("agent", [assistant()]).until(until::no_tool_calls()).max_iterations(5).build().unwrap();
    assert_eq!(agent.execute("1+2?".to_string(), &ctx).await.unwrap(), "3");
    assert_eq!(model.calls(), 2, "one iteration: a tool round and the answer");
    let meta: Arc<StepMeta> = ctx.last_step_meta().unwrap();
    assert!(meta.tool_calls.is_empty(), "{meta:?}");
}

/// A model that stops the turn while it answers, then answers anyway (the answer arrives with the cancellation).
struct CancelsWhileAnswering {
    ctx: Arc<std::sync::OnceLock<Context>>,
}

impl noetic::model::Model for CancelsWhileAnswering {
    fn call(&self, _request: ModelRequest) -> futures::future::BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        if let Some(ctx) = self.ctx.get() {
            ctx.cancel("the user stopped the turn");
        }
        let mut response = ModelResponse::tool_calls([("c1", "never_run", json!({}))]);
        response.usage = Usage { input_tokens: 7, output_tokens: 3, ..Usage::default() };
        Box::pin(async move { Ok(response) })
    }
}

#[tokio::test]
async fn cancelled_while_the_model_answers_the_step_fails_cancelled_appends_nothing_and_counts_the_usage() {
    let slot = Arc::new(std::sync::OnceLock::new());
    let ctx = StepContext::builder().model(Arc::new(CancelsWhileAnswering { ctx: slot.clone() })).build();
    slot.set(ctx.context().clone()).unwrap();
    let err = assistant().execute("go".to_string(), &ctx).await.unwrap_err();
    assert!(matches!(&err, NoeticError::Cancelled { reason: Some(r) } if r == "the user stopped the turn"), "{err:?}");
    let history: Vec<String> = ctx.items().iter().map(|i| format!("{i:?}")).collect();
    assert_eq!(ctx.items().len(), 1, "only the user prompt, not the answer: {history:?}");
    assert_eq!((ctx.usage().input_tokens, ctx.usage().output_tokens), (7, 3), "the spent tokens still count");
}
