//! SSE parsing gives the same deltas and the same final response however the byte stream is split into chunks
//! (the same `sse_deltas` path the client runs on the HTTP body).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::fixture;
use futures::StreamExt;
use noetic::model::StreamDelta;
use noetic_openai::wire::sse_deltas;
use proptest::prelude::*;

const FIXTURES: [&str; 4] =
    ["stream_text.sse", "stream_tool_calls.sse", "stream_openrouter_cost.sse", "stream_error.sse"];

/// The deltas (errors as text) for the bytes delivered in `chunks`.
fn deltas(chunks: Vec<Vec<u8>>) -> Vec<Result<StreamDelta, String>> {
    let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    futures::executor::block_on(sse_deltas(bytes).map(|d| d.map_err(|e| e.to_string())).collect())
}

fn split_at(bytes: &[u8], mut points: Vec<usize>) -> Vec<Vec<u8>> {
    points.sort_unstable();
    points.dedup();
    let mut chunks = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([bytes.len()]) {
        chunks.push(bytes[start..p].to_vec());
        start = p;
    }
    chunks
}

fn bytes_of(name: &str, crlf: bool) -> Vec<u8> {
    let text = fixture(name);
    if crlf { text.replace('\n', "\r\n").into_bytes() } else { text.into_bytes() }
}

#[test]
fn every_fixture_parses_whole_into_a_final_done_or_error() {
    for name in FIXTURES {
        let whole = deltas(vec![bytes_of(name, false)]);
        match whole.last() {
            Some(Ok(StreamDelta::Done { .. })) => assert_ne!(name, "stream_error.sse"),
            Some(Err(message)) => assert!(name == "stream_error.sse" && message.contains("Provider disconnected")),
            other => panic!("{name}: unexpected end {other:?}"),
        }
    }
}

#[test]
fn one_byte_chunks_give_the_same_result_as_one_chunk() {
    for name in FIXTURES {
        let bytes = bytes_of(name, false);
        let single: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
        assert_eq!(deltas(single), deltas(vec![bytes]), "{name}");
    }
}

#[test]
fn crlf_line_endings_give_the_same_result_as_lf() {
    for name in FIXTURES {
        assert_eq!(deltas(vec![bytes_of(name, true)]), deltas(vec![bytes_of(name, false)]), "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sse_parsing_gives_the_same_result_however_the_bytes_are_split(
        name in prop::sample::select(FIXTURES.to_vec()),
        crlf in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..48),
    ) {
        let bytes = bytes_of(name, crlf);
        let points = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        let reference = deltas(vec![bytes.clone()]);
        prop_assert_eq!(deltas(split_at(&bytes, points)), reference);
    }
}
