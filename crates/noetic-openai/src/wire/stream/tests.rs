use noetic_core::model::{FinishReason, ToolCall};
use serde_json::json;

use super::*;

fn feed(chunks: &[Value]) -> Vec<StreamDelta> {
    let mut acc = StreamAccumulator::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(acc.push(&c.to_string()).unwrap());
    }
    out.extend(acc.push("[DONE]").unwrap());
    out
}

fn done(deltas: &[StreamDelta]) -> ModelResponse {
    match deltas.last() {
        Some(StreamDelta::Done { response }) => response.clone(),
        other => panic!("expected Done last, got {other:?}"),
    }
}

#[test]
fn tool_call_pieces_are_assembled_per_index_with_id_and_name_on_the_first_piece() {
    let deltas = feed(&[
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{\"x\""}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "function": {"arguments": ":1}"}}]}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}),
    ]);
    assert_eq!(
        deltas[0],
        StreamDelta::ToolCall { index: 0, id: Some("a".into()), name: Some("f".into()), arguments: String::new() }
    );
    assert_eq!(deltas[2], StreamDelta::ToolCall { index: 0, id: None, name: None, arguments: "{}".into() });
    let response = done(&deltas);
    let calls: Vec<_> = response.tool_calls_iter().cloned().collect();
    assert_eq!(
        calls,
        vec![
            ToolCall { id: "a".into(), name: "f".into(), arguments: "{}".into() },
            ToolCall { id: "b".into(), name: "g".into(), arguments: "{\"x\":1}".into() },
        ]
    );
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (5, 7));
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn the_final_chunk_s_cost_is_kept_in_the_usage_and_none_is_made_up_without_one() {
    let answer = json!({"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]});
    let with = feed(&[
        answer.clone(),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7, "cost": 0.00123}}),
    ]);
    assert_eq!(done(&with).usage.cost, Some(0.00123));
    let without = feed(&[answer, json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}})]);
    assert_eq!(done(&without).usage, Usage { input_tokens: 5, output_tokens: 7, cached_tokens: 0, cost: None });
}

#[test]
fn calls_without_index_are_matched_by_id_and_a_new_id_at_index_zero_is_a_new_call() {
    let deltas = feed(&[
        json!({"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "h", "arguments": "{}"}}]}}]}),
    ]);
    let ids: Vec<_> = done(&deltas).tool_calls_iter().map(|c| c.id.to_string()).collect();
    assert_eq!(ids, vec!["a", "b", "c"]);
}

#[test]
fn a_stream_cut_before_the_finish_is_an_error_and_one_with_a_finish_reason_completes() {
    let mut acc = StreamAccumulator::new();
    acc.push(&json!({"choices": [{"delta": {"content": "Hi"}}]}).to_string()).unwrap();
    assert!(matches!(acc.finish(), Err(NoeticError::ModelFailed { retryable: false, .. })));
    acc.push(&json!({"choices": [{"delta": {}, "finish_reason": "length"}]}).to_string()).unwrap();
    match acc.finish() {
        Ok(Some(StreamDelta::Done { response })) => assert_eq!(response.finish_reason, FinishReason::Length),
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn an_error_chunk_is_a_non_retryable_error_even_with_a_server_error_code() {
    let mut acc = StreamAccumulator::new();
    let chunk = json!({"error": {"code": 502, "message": "Provider disconnected"}, "choices": []}).to_string();
    match acc.push(&chunk) {
        Err(NoeticError::ModelFailed { message, raw, retryable, status, source: None }) => {
            assert!(message.contains("Provider disconnected"));
            assert_eq!(raw, Some(chunk));
            assert_eq!(status, Some(502));
            assert!(!retryable);
        }
        other => panic!("expected ModelFailed, got {other:?}"),
    }
}

#[test]
fn refusal_pieces_are_collected_and_replay_mirrors_a_response() {
    let deltas = feed(&[
        json!({"choices": [{"delta": {"refusal": "I can't"}}]}),
        json!({"choices": [{"delta": {"refusal": " help."}, "finish_reason": "stop"}]}),
    ]);
    assert_eq!(done(&deltas).refusal.as_deref(), Some("I can't help."));
    let response = ModelResponse::tool_calls([("c", "f", json!({}))]).with_text("ok");
    let replayed = replay(response.clone());
    assert_eq!(replayed.len(), 3);
    assert_eq!(done(&replayed), response);
}
