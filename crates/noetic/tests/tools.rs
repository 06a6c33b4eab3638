//! Typed tools, tool progress events, and the model wrappers (retry, timeout, default streaming).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use noetic::model::{
    FinishReason, ModelExt, ModelRequest, ModelResponse, ScriptedModel, StreamDelta, ToolCall, ToolResult, Usage,
};
use noetic::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

const MODEL: &str = "openai/gpt-4o-mini";

/// Arguments of the typed `add` tool.
#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
    /// Optional label echoed in the result.
    label: Option<String>,
}

/// Result of the typed `add` tool.
#[derive(Debug, Serialize, JsonSchema)]
struct Sum {
    sum: i64,
    label: Option<String>,
}

fn typed_add() -> noetic::tool::TypedTool<AddArgs, Sum> {
    tool_fn("add", "Adds two integers.", |args: AddArgs, _tcx| async move {
        Ok::<_, ToolError>(Sum { sum: args.a + args.b, label: args.label })
    })
    .unwrap()
}

fn tool_context(call_id: &str, tool: &str) -> ToolContext {
    ToolContext { ctx: Context::new(), call_id: call_id.into(), tool: tool.into(), event_schema: None }
}

fn rate_limited(ms: u64) -> NoeticError {
    NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: Some(ms), message: None }
}

fn failed(retryable: bool) -> NoeticError {
    NoeticError::ModelFailed { message: "upstream 503".into(), status: Some(503), raw: None, retryable, source: None }
}

// ---------------------------------------------------------------------------------------------------------------
// Typed tools

#[tokio::test]
async fn a_typed_tool_derives_its_schemas_from_the_rust_types() {
    let add = typed_add();
    assert_eq!(add.name(), "add");
    assert_eq!(add.description(), "Adds two integers.");
    let input = add.input_schema().json();
    assert_eq!(input["type"], "object");
    let props = input["properties"].as_object().unwrap();
    assert!(props.contains_key("a") && props.contains_key("b") && props.contains_key("label"), "{input}");
    assert_eq!(props["a"]["type"], "integer");
    let mut required: Vec<&str> = input["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    required.sort_unstable();
    assert_eq!(required, ["a", "b"], "the Option field is not required");
    let output = add.output_schema().expect("typed tools declare an output schema").json();
    assert!(output["properties"].as_object().unwrap().contains_key("sum"), "{output}");
    assert!(add.input_schema().validate(&json!({"a": 1, "b": 2})).is_ok());
    assert!(add.input_schema().validate(&json!({"a": "one", "b": 2})).is_err());
    assert!(!Tool::needs_approval(&add));
    assert!(Tool::needs_approval(&typed_add().needs_approval(true)));
}

#[tokio::test]
async fn a_typed_tool_deserialises_its_arguments_and_serialises_its_result() {
    let add = typed_add();
    let out = add.call(json!({"a": 40, "b": 2, "label": "answer"}), tool_context("c1", "add")).await.unwrap();
    assert_eq!(out.structured, Some(json!({"sum": 42, "label": "answer"})));
    let err = add.call(json!({"a": "forty", "b": 2}), tool_context("c2", "add")).await.unwrap_err();
    assert!(err.message.contains("add"), "{}", err.message);
}

#[test]
fn a_typed_tool_with_an_empty_name_is_a_config_error() {
    let err =
        tool_fn(
            "  ",
            "nameless",
            |args: AddArgs, _tcx| async move { Ok::<_, ToolError>(Sum { sum: args.a, label: None }) },
        )
        .err()
        .expect("an empty name is rejected");
    assert_eq!(err.code, ConfigCode::EmptyToolName);
}

#[tokio::test]
async fn a_typed_tool_is_offered_to_and_called_by_the_model() {
    let add = typed_add();
    let schema = add.input_schema().json().clone();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "add", json!({"a": 2, "b": 3}))]),
        ModelResponse::text("5"),
    ]);
    let ctx = StepContext::builder().model(Arc::new(model.clone())).tools([Arc::new(add) as Arc<dyn Tool>]).build();
    let step: Step<String, String> = Step::llm("assistant", MODEL).build().unwrap();
    assert_eq!(step.execute("2+3?".to_string(), &ctx).await.unwrap(), "5");
    let requests = model.requests();
    assert_eq!(requests[0].tools.len(), 1);
    assert_eq!(requests[0].tools[0].name, "add");
    assert_eq!(*requests[0].tools[0].parameters, schema);
    let result = requests[1].history.iter().find_map(|i| match i {
        Item::ToolResult(r) => Some(r.clone()),
        _ => None,
    });
    let result = result.expect("the tool result reaches the model");
    assert_eq!(&*result.call_id, "c1");
    assert!(!result.is_error, "{result:?}");
    let value: Value = serde_json::from_str(&result.content).unwrap();
    assert_eq!(value, json!({"sum": 5, "label": null}));
}

#[tokio::test]
async fn typed_argument_mismatches_become_error_results_for_the_model() {
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "add", json!({"a": 2}))]), ModelResponse::text("sorry")]);
    let ctx =
        StepContext::builder().model(Arc::new(model.clone())).tools([Arc::new(typed_add()) as Arc<dyn Tool>]).build();
    let step: Step<String, String> = Step::llm("assistant", MODEL).build().unwrap();
    assert_eq!(step.execute("2+?".to_string(), &ctx).await.unwrap(), "sorry");
    let results: Vec<ToolResult> = model.requests()[1]
        .history
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error && results[0].content.starts_with("Error:"), "{results:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// Progress

#[tokio::test]
async fn tool_progress_is_emitted_as_tool_progress_events_between_start_and_completion() {
    let reporter: Arc<dyn Tool> = Arc::new(
        FnTool::builder("index", "Indexes files.")
            .handler(|_args, tcx: ToolContext| async move {
                tcx.progress(json!({"done": 1, "of": 2})).unwrap();
                tokio::task::yield_now().await;
                tcx.progress(json!({"done": 2, "of": 2})).unwrap();
                Ok::<_, ToolError>(json!("indexed"))
            })
            .build()
            .unwrap(),
    );
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c7", "index", json!({}))]),
        ModelResponse::text("indexed everything"),
    ]);
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().model(Arc::new(model)).tools([reporter]).events(sink).build();
    let step: Step<String, String> = Step::llm("assistant", MODEL).build().unwrap();
    step.execute("index".to_string(), &ctx).await.unwrap();

    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        assert_eq!(event.execution_id, ctx.execution_id());
        match &event.kind {
            EventKind::ToolCallStarted { call_id, .. } => seen.push(format!("started {call_id}")),
            EventKind::ToolProgress { call_id, tool, data } => seen.push(format!("progress {call_id} {tool} {data}")),
            EventKind::ToolCallCompleted { call_id, .. } => seen.push(format!("completed {call_id}")),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        [
            "started c7",
            r#"progress c7 index {"done":1,"of":2}"#,
            r#"progress c7 index {"done":2,"of":2}"#,
            "completed c7",
        ]
    );
}

#[tokio::test]
async fn tool_progress_without_a_subscriber_is_harmless() {
    let tcx = tool_context("c1", "t");
    tcx.progress(json!({"n": 1})).unwrap();
    let sink = EventSink::new(8);
    let mut rx = sink.subscribe().unwrap();
    let tcx = ToolContext {
        ctx: Context::builder().events(sink).build(),
        call_id: "c2".into(),
        tool: "t".into(),
        event_schema: None,
    };
    tcx.progress(json!({"n": 2})).unwrap();
    let event = rx.try_recv().unwrap();
    assert!(
        matches!(&event.kind, EventKind::ToolProgress { call_id, data, .. } if **call_id == *"c2" && *data == json!({"n": 2})),
        "{:?}",
        event.kind
    );
}

#[tokio::test]
async fn progress_breaking_the_event_schema_is_refused_and_not_emitted() {
    let reporter: Arc<dyn Tool> = Arc::new(
        FnTool::builder("index", "Indexes files.")
            .event_schema(json!({"type": "object", "properties": {"done": {"type": "integer"}}, "required": ["done"]}))
            .handler(|_args, tcx: ToolContext| async move {
                tcx.progress(json!({"done": 1})).unwrap();
                let refused = tcx.progress(json!({"done": "half"})).unwrap_err();
                Ok::<_, ToolError>(json!(refused))
            })
            .build()
            .unwrap(),
    );
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "index", json!({}))]), ModelResponse::text("ok")]);
    let sink = EventSink::new(64);
    let mut rx = sink.subscribe().unwrap();
    let ctx = StepContext::builder().model(Arc::new(model.clone())).tools([reporter]).events(sink).build();
    let step: Step<String, String> = Step::llm("assistant", MODEL).build().unwrap();
    step.execute("index".to_string(), &ctx).await.unwrap();
    let mut progress = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let EventKind::ToolProgress { data, .. } = &event.kind {
            progress.push(data.clone());
        }
    }
    assert_eq!(progress, [json!({"done": 1})], "only schema-valid progress is emitted");
    let refusal = model.requests()[1]
        .history
        .iter()
        .find_map(|i| match i {
            Item::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(refusal.contains("event schema"), "the tool learns why: {refusal}");
}

// ---------------------------------------------------------------------------------------------------------------
// Retry

#[tokio::test(start_paused = true)]
async fn with_retry_retries_rate_limits_until_the_call_succeeds() {
    let model = ScriptedModel::new([]);
    model.push_error(rate_limited(1));
    model.push_error(rate_limited(1));
    model.push(ModelResponse::text("finally"));
    let retrying = model.clone().with_retry(RetryPolicy::new(5, Backoff::Fixed, Duration::from_millis(100)));
    let response = retrying.call(ModelRequest::default()).await.unwrap();
    assert_eq!(response.text_output(), "finally");
    assert_eq!(model.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn with_retry_waits_for_retry_after_when_it_is_longer_than_the_backoff() {
    let model = ScriptedModel::new([]);
    model.push_error(rate_limited(2_000));
    model.push(ModelResponse::text("ok"));
    let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(100)));
    let start = Instant::now();
    retrying.call(ModelRequest::default()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(2_000), "paused time: exactly the Retry-After delay");
    assert_eq!(model.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn with_retry_retries_retryable_model_failures_with_backoff() {
    let model = ScriptedModel::new([]);
    model.push_error(failed(true));
    model.push_error(failed(true));
    model.push(ModelResponse::text("ok"));
    let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Exponential, Duration::from_millis(100)));
    let start = Instant::now();
    retrying.call(ModelRequest::default()).await.unwrap();
    assert_eq!(model.calls(), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(300), "100 ms then 200 ms of backoff");
}

#[tokio::test(start_paused = true)]
async fn with_retry_stops_at_the_first_non_retryable_error() {
    let model = ScriptedModel::new([]);
    model.push_error(failed(false));
    model.push(ModelResponse::text("never reached"));
    let retrying = model.clone().with_retry(RetryPolicy::new(5, Backoff::Fixed, Duration::from_millis(100)));
    let err = retrying.call(ModelRequest::default()).await.unwrap_err();
    assert!(matches!(err, NoeticError::ModelFailed { retryable: false, .. }), "{err:?}");
    assert_eq!(model.calls(), 1);
    assert_eq!(model.remaining(), 1);
}

#[tokio::test(start_paused = true)]
async fn with_retry_does_not_retry_errors_that_are_not_model_failures() {
    let model = ScriptedModel::new([]);
    model.push_error(NoeticError::other("bad request: invalid tool schema"));
    model.push(ModelResponse::text("never reached"));
    let retrying = model.clone().with_retry(RetryPolicy::new(5, Backoff::Fixed, Duration::from_millis(100)));
    let err = retrying.call(ModelRequest::default()).await.unwrap_err();
    assert!(matches!(err, NoeticError::Other { .. }), "{err:?}");
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn with_retry_gives_up_after_max_attempts_with_the_last_error() {
    let model = ScriptedModel::new([]);
    for _ in 0..3 {
        model.push_error(rate_limited(10));
    }
    model.push(ModelResponse::text("never reached"));
    let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(10)));
    let err = retrying.call(ModelRequest::default()).await.unwrap_err();
    assert!(matches!(err, NoeticError::ModelRateLimit { .. }), "{err:?}");
    assert_eq!(model.calls(), 3);
}

// ---------------------------------------------------------------------------------------------------------------
// Timeout

#[tokio::test(start_paused = true)]
async fn with_timeout_fails_a_held_call_with_a_retryable_model_failure() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("too late"));
    let timed = model.clone().with_timeout(Duration::from_secs(5));
    let start = Instant::now();
    let err = timed.call(ModelRequest::default()).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    match &err {
        NoeticError::ModelFailed { retryable, message, .. } => {
            assert!(*retryable);
            assert!(message.contains("5000 ms"), "{message}");
        }
        other => panic!("expected ModelFailed, got {other:?}"),
    }
    assert!(err.is_retryable());
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn with_timeout_passes_a_fast_answer_through() {
    let model = ScriptedModel::new([ModelResponse::text("quick")]);
    let timed = model.clone().with_timeout(Duration::from_secs(5));
    let start = Instant::now();
    assert_eq!(timed.call(ModelRequest::default()).await.unwrap().text_output(), "quick");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_is_retried_by_an_outer_retry() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("too late"));
    model.push(ModelResponse::text("second try"));
    let robust = model.clone().with_timeout(Duration::from_secs(1)).with_retry(RetryPolicy::new(
        2,
        Backoff::Fixed,
        Duration::from_millis(50),
    ));
    let response = robust.call(ModelRequest::default()).await.unwrap();
    assert_eq!(response.text_output(), "second try");
    assert_eq!(model.calls(), 2);
    drop(held);
}

// ---------------------------------------------------------------------------------------------------------------
// Default streaming

#[tokio::test]
async fn the_default_stream_replays_a_response_as_deltas_ending_in_done() {
    let response = ModelResponse::tool_calls([("c1", "add", json!({"a": 1, "b": 2})), ("c2", "mul", json!({"x": 3}))])
        .with_text("Let me compute.")
        .with_usage(Usage { input_tokens: 12, output_tokens: 4, cached_tokens: 0, cost: None });
    let model = ScriptedModel::new([response.clone()]);
    let deltas: Vec<StreamDelta> = model.stream(ModelRequest::default()).map(Result::unwrap).collect().await;
    assert_eq!(
        deltas,
        vec![
            StreamDelta::Text { text: "Let me compute.".into() },
            StreamDelta::ToolCall {
                index: 0,
                id: Some("c1".into()),
                name: Some("add".into()),
                arguments: json!({"a": 1, "b": 2}).to_string(),
            },
            StreamDelta::ToolCall {
                index: 1,
                id: Some("c2".into()),
                name: Some("mul".into()),
                arguments: json!({"x": 3}).to_string(),
            },
            StreamDelta::Done { response: response.clone() },
        ]
    );
    let StreamDelta::Done { response: done } = deltas.last().unwrap() else { panic!("last delta must be Done") };
    assert_eq!(done.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        done.tool_calls_iter().cloned().collect::<Vec<_>>(),
        vec![
            ToolCall { id: "c1".into(), name: "add".into(), arguments: json!({"a": 1, "b": 2}).to_string().into() },
            ToolCall { id: "c2".into(), name: "mul".into(), arguments: json!({"x": 3}).to_string().into() },
        ]
    );
}

#[tokio::test]
async fn the_default_stream_of_a_text_answer_is_one_text_delta_then_done() {
    let model = ScriptedModel::new([ModelResponse::text("hello")]);
    let deltas: Vec<StreamDelta> = model.stream(ModelRequest::default()).map(Result::unwrap).collect().await;
    assert_eq!(
        deltas,
        vec![StreamDelta::Text { text: "hello".into() }, StreamDelta::Done { response: ModelResponse::text("hello") }]
    );
}

#[tokio::test]
async fn the_default_stream_yields_a_model_error_as_its_only_item() {
    let model = ScriptedModel::new([]);
    model.push_error(rate_limited(7));
    let items: Vec<Result<StreamDelta, NoeticError>> = model.stream(ModelRequest::default()).collect().await;
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(NoeticError::ModelRateLimit { retry_after_ms: Some(7), .. })), "{items:?}");
}
