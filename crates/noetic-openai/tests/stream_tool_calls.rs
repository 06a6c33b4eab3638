//! Streamed tool-call pieces find their call by `index` (or by id, or as a continuation of the last call) however
//! many calls came before, in whatever order the pieces arrive: each call gathers its own id, name and arguments,
//! and calls keep the order they first appeared in. (The speed of it is the suite's
//! `openai_stream_64k_tool_calls_ms`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::model::{StreamDelta, ToolCall};
use noetic_openai::wire::StreamAccumulator;
use serde_json::{Value, json};

/// A chunk carrying the tool-call pieces `pieces`.
fn chunk(pieces: Vec<Value>) -> String {
    json!({"choices": [{"index": 0, "delta": {"tool_calls": pieces}}]}).to_string()
}

/// Feeds `chunks`, then a finish and `[DONE]`; returns the tool-call deltas and the calls of the response.
fn feed(chunks: impl IntoIterator<Item = String>) -> (Vec<StreamDelta>, Vec<ToolCall>) {
    let mut acc = StreamAccumulator::new();
    let mut deltas = Vec::new();
    for data in chunks {
        deltas.extend(acc.push(&data).unwrap());
    }
    deltas.extend(acc.push(&json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}).to_string()).unwrap());
    deltas.extend(acc.push("[DONE]").unwrap());
    let Some(StreamDelta::Done { response }) = deltas.pop() else { panic!("the stream must end with Done") };
    (deltas, response.tool_calls_iter().cloned().collect())
}

/// The argument fragments of call `k`: `{"n":k}` cut in three.
fn fragments(k: usize) -> [String; 3] {
    ["{\"n\"".to_owned(), ":".to_owned(), format!("{k}}}")]
}

#[test]
fn pieces_of_thousands_of_interleaved_calls_accumulate_per_index() {
    const CALLS: usize = 3000;
    // Every call opens (id and name), then the fragments arrive round by round, each round in a different order.
    let mut chunks: Vec<String> = (0..CALLS)
        .map(|k| chunk(vec![json!({"index": k, "id": format!("call_{k}"), "function": {"name": "f"}})]))
        .collect();
    for round in 0..3 {
        let order: Vec<usize> = match round {
            0 => (0..CALLS).rev().collect(),
            1 => (0..CALLS).map(|i| (i * 7919) % CALLS).collect(),
            _ => (0..CALLS).collect(),
        };
        // Two pieces per chunk, of calls far apart.
        for pair in order.chunks(2) {
            let pieces =
                pair.iter().map(|&k| json!({"index": k, "function": {"arguments": fragments(k)[round]}})).collect();
            chunks.push(chunk(pieces));
        }
    }
    let (deltas, calls) = feed(chunks);
    assert_eq!(calls.len(), CALLS);
    for (k, call) in calls.iter().enumerate() {
        assert_eq!(call, &ToolCall::new(format!("call_{k}"), "f", format!("{{\"n\":{k}}}")));
    }
    let argument_pieces = deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCall { id: None, .. })).count();
    assert_eq!(argument_pieces, 3 * CALLS, "every fragment is passed on once");
}

#[test]
fn sparse_and_out_of_order_indices_keep_the_order_calls_first_appeared_in() {
    let opens = [(5, "e"), (1_000_000, "m"), (0, "z"), (u64::MAX, "x")];
    let mut chunks: Vec<String> = opens
        .iter()
        .map(|(index, name)| chunk(vec![json!({"index": index, "id": name, "function": {"name": name}})]))
        .collect();
    for (index, name) in opens.iter().rev() {
        chunks.push(chunk(vec![json!({"index": index, "function": {"arguments": format!("[\"{name}\"]")}})]));
    }
    let (deltas, calls) = feed(chunks);
    let names: Vec<_> = calls.iter().map(|c| (&*c.name, &*c.arguments)).collect();
    assert_eq!(names, vec![("e", "[\"e\"]"), ("m", "[\"m\"]"), ("z", "[\"z\"]"), ("x", "[\"x\"]")]);
    // Deltas name calls by their position, not by the server's index.
    let positions: Vec<_> =
        deltas.iter().map(|d| if let StreamDelta::ToolCall { index, .. } = d { *index } else { usize::MAX }).collect();
    assert_eq!(positions, vec![0, 1, 2, 3, 3, 2, 1, 0]);
}

#[test]
fn without_indices_pieces_are_matched_by_id_among_many_calls() {
    const CALLS: usize = 2000;
    let mut chunks: Vec<String> =
        (0..CALLS).map(|k| chunk(vec![json!({"id": format!("c{k}"), "function": {"name": "f"}})])).collect();
    chunks
        .extend((0..CALLS).rev().map(|k| chunk(vec![json!({"id": format!("c{k}"), "function": {"arguments": "{}"}})])));
    let (_, calls) = feed(chunks);
    assert_eq!(calls.len(), CALLS);
    assert!(calls.iter().enumerate().all(|(k, c)| *c.id == format!("c{k}") && &*c.arguments == "{}"));
}

#[test]
fn a_new_id_at_a_used_index_starts_a_call_that_later_pieces_at_that_index_continue() {
    let (deltas, calls) = feed([
        chunk(vec![json!({"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"a\""}})]),
        chunk(vec![json!({"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}})]),
        chunk(vec![json!({"index": 0, "id": "c", "function": {"name": "h", "arguments": "{\"c\""}})]),
        chunk(vec![json!({"index": 0, "function": {"arguments": ":1}"}})]),
        // A piece naming an earlier call's id, with no index, goes to that call.
        chunk(vec![json!({"id": "a", "function": {"arguments": ":2}"}})]),
        // A piece with neither continues the last call.
        chunk(vec![json!({"function": {"arguments": " "}})]),
    ]);
    let got: Vec<_> = calls.iter().map(|c| (&*c.id, &*c.name, &*c.arguments)).collect();
    assert_eq!(got, vec![("a", "f", "{\"a\":2}"), ("b", "g", "{}"), ("c", "h", "{\"c\":1} ")]);
    assert!(matches!(deltas[3], StreamDelta::ToolCall { index: 2, .. }));
    assert!(matches!(deltas[4], StreamDelta::ToolCall { index: 0, .. }));
}

#[test]
fn an_id_that_arrives_after_the_first_piece_is_found_by_later_pieces_without_an_index() {
    let (_, calls) = feed([
        chunk(vec![json!({"index": 3, "function": {"name": "f", "arguments": "{"}})]),
        chunk(vec![json!({"index": 4, "id": "other", "function": {"name": "g", "arguments": "{}"}})]),
        chunk(vec![json!({"index": 3, "id": "late", "function": {"arguments": "\"k\""}})]),
        chunk(vec![json!({"id": "late", "function": {"arguments": ":1}"}})]),
    ]);
    let got: Vec<_> = calls.iter().map(|c| (&*c.id, &*c.arguments)).collect();
    assert_eq!(got, vec![("late", "{\"k\":1}"), ("other", "{}")]);
}
