//! `llm` steps: the ReAct tool loop, bad tool calls, approval and round limits (requests, history, cancellation,
//! model errors and events: `llm_step_requests.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod llm_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_common::*;
use noetic::model::{ModelRequest, ModelResponse, ScriptedModel, ToolCall, ToolResult, Usage};
use noetic::prelude::*;
use noetic::tool::{ApprovalRequest, FnApprover};
use serde_json::{Value, json};

/// Runs one model-requested call that is expected to fail, followed by a final answer. Returns the single tool
/// result the model saw on its second call.
async fn run_bad_call(call: ToolCall, tools: Vec<Arc<dyn Tool>>) -> ToolResult {
    let call_id = call.id.clone();
    let model = ScriptedModel::new([
        ModelResponse { items: vec![Item::ToolCall(call)], ..Default::default() },
        ModelResponse::text("recovered"),
    ]);
    let ctx = context(&model, tools);
    let answer = assistant().execute("go".to_string(), &ctx).await.unwrap();
    assert_eq!(answer, "recovered", "the turn continues after a bad tool call");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_results(&requests[1].history);
    assert_eq!(results.len(), 1, "exactly one result for the call: {results:?}");
    let result = results.into_iter().next().unwrap();
    assert_eq!(result.call_id, call_id);
    assert!(result.is_error, "{result:?}");
    assert!(result.content.starts_with("Error:"), "{result:?}");
    result
}

// ---------------------------------------------------------------------------------------------------------------
// The ReAct loop

#[tokio::test(start_paused = true)]
async fn react_runs_two_tool_calls_in_order_feeds_results_back_and_returns_the_answer() {
    let log = Log::default();
    let slow = {
        let log = log.clone();
        Arc::new(
            FnTool::builder("slow", "Takes a while.")
                .handler(move |_args, _tcx| {
                    let log = log.clone();
                    async move {
                        log.lock().unwrap().push("slow:start".into());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        log.lock().unwrap().push("slow:end".into());
                        Ok::<_, ToolError>(json!("slow result"))
                    }
                })
                .build()
                .unwrap(),
        ) as Arc<dyn Tool>
    };
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "add", json!({"a": 2, "b": 3}))])
            .with_usage(Usage { input_tokens: 10, output_tokens: 5, cached_tokens: 1, cost: None }),
        ModelResponse::text("The answer is 5.").with_usage(Usage {
            input_tokens: 30,
            output_tokens: 7,
            cached_tokens: 2,
            cost: None,
        }),
    ]);
    let ctx = context(&model, [slow, add_tool(&log)]);

    let answer = assistant().execute("question".to_string(), &ctx).await.unwrap();

    assert_eq!(answer, "The answer is 5.");
    assert_eq!(entries(&log), ["slow:start", "slow:end", "add(2,3)"], "tools run one after another, in call order");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].history.as_slice(), &[Item::user("question")]);
    let expected = vec![
        Item::user("question"),
        Item::ToolCall(call("c1", "slow", "{}")),
        Item::ToolCall(call("c2", "add", &json!({"a": 2, "b": 3}).to_string())),
        Item::ToolResult(ToolResult::ok("c1", "slow result")),
        Item::ToolResult(ToolResult::ok("c2", "5")),
    ];
    assert_eq!(requests[1].history.as_slice(), expected.as_slice());
    assert_eq!(ctx.usage(), Usage { input_tokens: 40, output_tokens: 12, cached_tokens: 3, cost: None });
    let items = ctx.items();
    assert_eq!(items.last(), Some(&Item::assistant("The answer is 5.")), "the answer is appended to the log");
}

// ---------------------------------------------------------------------------------------------------------------
// Bad tool calls become error results

#[tokio::test]
async fn malformed_argument_json_becomes_an_error_result_and_the_tool_does_not_run() {
    let log = Log::default();
    let result = run_bad_call(call("c1", "add", "{not json"), vec![add_tool(&log)]).await;
    assert!(result.content.contains("JSON"), "{}", result.content);
    assert!(result.content.contains("{not json"), "the raw arguments are quoted: {}", result.content);
    assert!(entries(&log).is_empty());
}

#[tokio::test]
async fn unknown_tool_becomes_an_error_result_listing_the_available_tools() {
    let log = Log::default();
    let tools = vec![add_tool(&log), recording_tool("lookup", &log)];
    let result = run_bad_call(call("c1", "multiply", "{}"), tools).await;
    assert!(result.content.contains("multiply"), "{}", result.content);
    assert!(result.content.contains("add") && result.content.contains("lookup"), "{}", result.content);
    assert!(entries(&log).is_empty());
}

#[tokio::test]
async fn schema_invalid_arguments_become_an_error_result_and_the_tool_does_not_run() {
    let log = Log::default();
    let args = json!({"a": "two", "b": 3}).to_string();
    let result = run_bad_call(call("c1", "add", &args), vec![add_tool(&log)]).await;
    assert!(result.content.contains("invalid arguments"), "{}", result.content);
    assert!(result.content.contains("/a"), "the offending field is named: {}", result.content);
    assert!(entries(&log).is_empty());
}

#[tokio::test]
async fn a_tool_error_becomes_an_error_result_with_its_message() {
    let failing: Arc<dyn Tool> = Arc::new(
        FnTool::builder("divide", "Divides.")
            .handler(|_args, _tcx| async move { Err::<Value, _>(ToolError::new("division by zero; pass b != 0")) })
            .build()
            .unwrap(),
    );
    let result = run_bad_call(call("c1", "divide", "{}"), vec![failing]).await;
    assert_eq!(&*result.content, "Error: division by zero; pass b != 0");
}

#[tokio::test]
async fn a_tool_panicking_before_its_future_becomes_an_error_result() {
    let explosive: Arc<dyn Tool> = Arc::new(
        FnTool::builder("explode", "Panics synchronously.")
            .handler(|args: Value, _tcx| {
                if args["kaboom"] == json!(true) {
                    panic!("sync kaboom");
                }
                async move { Ok::<_, ToolError>(json!("fine")) }
            })
            .build()
            .unwrap(),
    );
    let result = run_bad_call(call("c1", "explode", r#"{"kaboom": true}"#), vec![explosive]).await;
    assert!(result.content.contains("panicked"), "{}", result.content);
    assert!(result.content.contains("sync kaboom"), "{}", result.content);
}

#[tokio::test]
async fn a_tool_panicking_inside_its_future_becomes_an_error_result() {
    let explosive: Arc<dyn Tool> = Arc::new(
        FnTool::builder("explode", "Panics while running.")
            .handler(|args: Value, _tcx| async move {
                tokio::task::yield_now().await;
                if args["kaboom"] == json!(true) {
                    panic!("async kaboom");
                }
                Ok::<_, ToolError>(json!("fine"))
            })
            .build()
            .unwrap(),
    );
    let result = run_bad_call(call("c1", "explode", r#"{"kaboom": true}"#), vec![explosive]).await;
    assert!(result.content.contains("panicked"), "{}", result.content);
    assert!(result.content.contains("async kaboom"), "{}", result.content);
}

#[tokio::test]
async fn a_result_violating_the_output_schema_becomes_an_error_result() {
    let liar: Arc<dyn Tool> = Arc::new(
        FnTool::builder("sum", "Claims to return an object.")
            .output_schema(json!({"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}))
            .handler(|_args, _tcx| async move { Ok::<_, ToolError>(json!("not an object")) })
            .build()
            .unwrap(),
    );
    let result = run_bad_call(call("c1", "sum", "{}"), vec![liar]).await;
    assert!(result.content.contains("invalid result"), "{}", result.content);
    assert!(!result.content.contains("Error: not an object"), "{}", result.content);
}

#[tokio::test]
async fn every_tool_call_id_gets_exactly_one_result_when_several_calls_fail_in_one_response() {
    let log = Log::default();
    let failing: Arc<dyn Tool> = Arc::new(
        FnTool::builder("fail", "Always fails.")
            .handler(|_args, _tcx| async move { Err::<Value, _>(ToolError::new("nope")) })
            .build()
            .unwrap(),
    );
    let calls = vec![
        call("c1", "add", "{not json"),
        call("c2", "missing", "{}"),
        call("c3", "add", r#"{"a": 1}"#),
        call("c4", "fail", "{}"),
        call("c5", "add", r#"{"a": 1, "b": 2}"#),
    ];
    let model = ScriptedModel::new([
        ModelResponse { items: calls.into_iter().map(Item::ToolCall).collect(), ..Default::default() },
        ModelResponse::text("done"),
    ]);
    let ctx = context(&model, [add_tool(&log), failing]);
    assert_eq!(assistant().execute("go".to_string(), &ctx).await.unwrap(), "done");
    let results = tool_results(&model.requests()[1].history);
    let summary: Vec<(&str, bool)> = results.iter().map(|r| (&*r.call_id, r.is_error)).collect();
    assert_eq!(summary, [("c1", true), ("c2", true), ("c3", true), ("c4", true), ("c5", false)]);
    assert_eq!(&*results[4].content, "3");
    assert_eq!(entries(&log), ["add(1,2)"], "only the valid call ran");
    assert_every_call_has_one_result(&ctx.items());
}

// ---------------------------------------------------------------------------------------------------------------
// Approval

fn guarded_tool(log: &Log) -> Arc<dyn Tool> {
    let log = log.clone();
    Arc::new(
        FnTool::builder("delete", "Deletes a file.")
            .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
            .needs_approval(true)
            .handler(move |args, _tcx| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(format!("deleted {}", args["path"].as_str().unwrap()));
                    Ok::<_, ToolError>(json!("deleted"))
                }
            })
            .build()
            .unwrap(),
    )
}

fn delete_then_answer() -> ScriptedModel {
    ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "delete", json!({"path": "/tmp/x"}))]),
        ModelResponse::text("ok"),
    ])
}

#[tokio::test]
async fn an_approved_call_runs_the_tool() {
    let log = Log::default();
    let seen: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let approver = {
        let seen = seen.clone();
        FnApprover(move |req: ApprovalRequest| {
            seen.lock().unwrap().push(req);
            async { Approval::Approve }
        })
    };
    let model = delete_then_answer();
    let ctx = StepContext::builder()
        .model(Arc::new(model.clone()))
        .tools([guarded_tool(&log)])
        .approver(Arc::new(approver))
        .build();
    assert_eq!(assistant().execute("clean up".to_string(), &ctx).await.unwrap(), "ok");
    assert_eq!(entries(&log), ["deleted /tmp/x"]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].tool.as_str(), seen[0].call_id.as_str()), ("delete", "c1"));
    assert_eq!(seen[0].arguments, json!({"path": "/tmp/x"}));
    let results = tool_results(&model.requests()[1].history);
    assert_eq!(results, [ToolResult::ok("c1", "deleted")]);
}

#[tokio::test]
async fn a_rejected_call_does_not_run_and_the_model_sees_the_reason() {
    let log = Log::default();
    let approver = FnApprover(|_req: ApprovalRequest| async {
        Approval::Reject { reason: "deleting files is not allowed today".into() }
    });
    let model = delete_then_answer();
    let ctx = StepContext::builder()
        .model(Arc::new(model.clone()))
        .tools([guarded_tool(&log)])
        .approver(Arc::new(approver))
        .build();
    assert_eq!(assistant().execute("clean up".to_string(), &ctx).await.unwrap(), "ok");
    assert!(entries(&log).is_empty(), "a rejected tool must not run");
    let results = tool_results(&model.requests()[1].history);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert!(results[0].content.starts_with("Error:"), "{}", results[0].content);
    assert!(results[0].content.contains("deleting files is not allowed today"), "{}", results[0].content);
}

#[tokio::test]
async fn a_call_needing_approval_without_an_approver_is_rejected() {
    let log = Log::default();
    let model = delete_then_answer();
    let ctx = context(&model, [guarded_tool(&log)]);
    assert_eq!(assistant().execute("clean up".to_string(), &ctx).await.unwrap(), "ok");
    assert!(entries(&log).is_empty(), "fail closed: no approver, no run");
    let results = tool_results(&model.requests()[1].history);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert!(results[0].content.contains("approv"), "the message says why: {}", results[0].content);
}

// ---------------------------------------------------------------------------------------------------------------
// Round limit

fn always_calls_a_tool() -> ScriptedModel {
    ScriptedModel::responder(|req: &ModelRequest| {
        let n = req.history.iter().filter(|i| matches!(i, Item::ToolCall(_))).count();
        Ok(ModelResponse::tool_calls([(format!("c{n}").as_str(), "noop", json!({}))]))
    })
}

#[tokio::test]
async fn the_round_limit_fails_the_step_after_exactly_max_rounds_model_calls() {
    let log = Log::default();
    let model = always_calls_a_tool();
    let ctx = context(&model, [recording_tool("noop", &log)]);
    let step: Step<String, String> = Step::llm("assistant", MODEL).max_rounds(3).build().unwrap();
    let err = step.execute("loop".to_string(), &ctx).await.unwrap_err();
    match err {
        NoeticError::RoundLimitExceeded { step_id, max_rounds } => {
            assert_eq!((step_id.as_str(), max_rounds), ("assistant", 3));
        }
        other => panic!("expected RoundLimitExceeded, got {other:?}"),
    }
    assert_eq!(model.calls(), 3);
    assert_eq!(entries(&log).len(), 3);
    assert_every_call_has_one_result(&ctx.items());
}

#[tokio::test]
async fn the_default_round_limit_is_32() {
    let log = Log::default();
    let model = always_calls_a_tool();
    let ctx = context(&model, [recording_tool("noop", &log)]);
    let err = assistant().execute("loop".to_string(), &ctx).await.unwrap_err();
    assert!(matches!(err, NoeticError::RoundLimitExceeded { max_rounds: 32, .. }), "{err:?}");
    assert_eq!(model.calls(), 32);
}
