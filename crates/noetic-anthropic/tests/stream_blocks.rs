//! Stream events find their content block by `index` however many blocks came before and in whatever order the
//! events arrive; a reused index means the latest block with it. (The speed of it is the suite's
//! `anthropic_stream_64k_tool_calls_ms`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::model::{StreamDelta, ToolCall};
use noetic_anthropic::StreamAccumulator;
use serde_json::{Value, json};

/// Feeds `events` between a `message_start` and a `message_stop`; returns the deltas and the response's calls.
fn feed(events: impl IntoIterator<Item = Value>) -> (Vec<StreamDelta>, Vec<ToolCall>) {
    let mut acc = StreamAccumulator::new();
    let mut deltas = Vec::new();
    let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 1}}});
    for event in std::iter::once(start).chain(events).chain([json!({"type": "message_stop"})]) {
        deltas.extend(acc.push(&event.to_string()).unwrap());
    }
    (deltas, acc.finish().unwrap().tool_calls_iter().cloned().collect())
}

fn tool_start(index: u64, id: &str) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": "f", "input": {}}})
}

fn json_piece(index: u64, piece: &str) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})
}

fn stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

#[test]
fn argument_pieces_of_thousands_of_open_blocks_go_to_their_own_calls() {
    const BLOCKS: u64 = 3000;
    let mut events: Vec<Value> = (0..BLOCKS).map(|k| tool_start(k, &format!("toolu_{k}"))).collect();
    events.extend((0..BLOCKS).rev().map(|k| json_piece(k, "{\"n\":")));
    events.extend((0..BLOCKS).map(|k| (k * 7919) % BLOCKS).map(|k| json_piece(k, &format!("{k}}}"))));
    // Half the blocks are stopped; the rest keep what arrived when the message stops.
    events.extend((0..BLOCKS).filter(|k| k % 2 == 0).map(stop));
    let (deltas, calls) = feed(events);
    assert_eq!(calls.len(), BLOCKS as usize);
    for (k, call) in calls.iter().enumerate() {
        assert_eq!(call, &ToolCall::new(format!("toolu_{k}"), "f", format!("{{\"n\":{k}}}")));
    }
    let pieces = deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCall { id: None, .. })).count();
    assert_eq!(pieces, 2 * BLOCKS as usize);
}

#[test]
fn sparse_indices_and_a_reused_index_refer_to_the_latest_block_with_it() {
    let (deltas, calls) = feed([
        json!({"type": "content_block_start", "index": 9, "content_block": {"type": "text", "text": ""}}),
        tool_start(1_000_000, "a"),
        tool_start(4, "b"),
        json_piece(1_000_000, "{\"a\":1}"),
        // Index 9 is reused for a tool call: later events at 9 are that call's.
        tool_start(9, "c"),
        json_piece(9, "{\"c\":1}"),
        json!({"type": "content_block_delta", "index": 9, "delta": {"type": "text_delta", "text": "lost"}}),
        stop(4),
        stop(9),
    ]);
    let got: Vec<_> = calls.iter().map(|c| (&*c.id, &*c.arguments)).collect();
    assert_eq!(got, vec![("a", "{\"a\":1}"), ("b", "{}"), ("c", "{\"c\":1}")]);
    assert!(!deltas.iter().any(|d| matches!(d, StreamDelta::Text { .. })), "text at a tool block's index is dropped");
}
