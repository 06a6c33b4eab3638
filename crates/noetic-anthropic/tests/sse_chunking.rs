//! Parsing a streamed response gives the same result however the byte stream is cut into chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::fixture;
use futures::StreamExt;
use futures::executor::block_on;
use noetic::NoeticError;
use noetic::model::{ModelResponse, StreamDelta};
use noetic_anthropic::stream_deltas;
use proptest::prelude::*;

/// What a stream amounts to: all text, the argument text of each call, and the final response or error message.
#[derive(Debug, PartialEq)]
struct Outcome {
    text: String,
    arguments: Vec<String>,
    end: Result<ModelResponse, String>,
}

/// Feeds `bytes` to the parser cut at `cuts` (positions, any order, duplicates allowed).
fn parse(bytes: &[u8], cuts: &[usize]) -> Outcome {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(0);
    cuts.push(bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let chunks: Vec<Result<Vec<u8>, String>> = cuts.windows(2).map(|w| Ok(bytes[w[0]..w[1]].to_vec())).collect();
    let deltas: Vec<Result<StreamDelta, NoeticError>> =
        block_on(stream_deltas(futures::stream::iter(chunks)).collect());
    let mut outcome = Outcome { text: String::new(), arguments: Vec::new(), end: Err("no end".into()) };
    for delta in deltas {
        match delta {
            Ok(StreamDelta::Text { text }) => outcome.text.push_str(&text),
            Ok(StreamDelta::ToolCall { index, arguments, .. }) => {
                if outcome.arguments.len() <= index {
                    outcome.arguments.resize(index + 1, String::new());
                }
                outcome.arguments[index].push_str(&arguments);
            }
            Ok(StreamDelta::Done { response }) => outcome.end = Ok(response),
            Err(e) => outcome.end = Err(e.to_string()),
        }
    }
    outcome
}

fn fixtures() -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for name in ["stream_text.sse", "stream_tool_use.sse", "stream_error_mid.sse"] {
        let text = fixture(name);
        all.push(text.replace('\n', "\r\n").into_bytes());
        all.push(text.into_bytes());
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_chunking_of_a_stream_gives_the_same_deltas_and_final_response(
        which in 0usize..6,
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let bytes = &fixtures()[which];
        let whole = parse(bytes, &[]);
        prop_assert_eq!(parse(bytes, &cuts), whole);
    }
}

#[test]
fn one_byte_chunks_give_the_same_result_as_the_whole_body() {
    for bytes in fixtures() {
        let every: Vec<usize> = (0..bytes.len()).collect();
        assert_eq!(parse(&bytes, &every), parse(&bytes, &[]));
    }
}

#[test]
fn the_unsplit_fixtures_parse_to_their_expected_ends() {
    let fixtures = fixtures();
    assert!(fixtures[0..4].iter().all(|b| parse(b, &[]).end.is_ok()));
    assert!(fixtures[4..6].iter().all(|b| parse(b, &[]).end.is_err_and(|e| e.contains("Overloaded"))));
    assert_eq!(parse(&fixtures[2], &[]).arguments[0], r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#);
}
