//! The typed reading and the `Value` walk give the same result for every answer and chunk shape, odd ones
//! included (the typed reading then leaves them to the walk).
#![allow(clippy::unwrap_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::wire::StreamAccumulator;
use crate::wire::response::{parse_response, typed_response, value_response};

/// One of `choices`, or the field left out (`None`).
fn pick(choices: Vec<Option<Value>>) -> impl Strategy<Value = Option<Value>> {
    proptest::sample::select(choices)
}

fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    Value::Object(fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect::<Map<_, _>>())
}

fn count() -> impl Strategy<Value = Option<Value>> {
    pick(vec![
        None,
        Some(Value::Null),
        Some(json!(5)),
        Some(json!(-3)),
        Some(json!(2.7)),
        Some(json!("9")),
        Some(json!(1e30)),
        Some(json!(0)),
        Some(json!(u64::MAX)),
    ])
}

fn usage() -> impl Strategy<Value = Option<Value>> {
    let details = pick(vec![
        None,
        Some(Value::Null),
        Some(json!({"cached_tokens": 4})),
        Some(json!({"cached_tokens": -1.5})),
        Some(json!(4)),
    ]);
    let cost = pick(vec![None, Some(Value::Null), Some(json!(0.5)), Some(json!(2)), Some(json!("x"))]);
    (count(), count(), details, cost, any::<u8>()).prop_map(|(p, c, d, cost, shape)| match shape % 8 {
        0 => None,
        1 => Some(Value::Null),
        2 => Some(json!(9)),
        _ => Some(object(vec![
            ("prompt_tokens", p),
            ("completion_tokens", c),
            ("prompt_tokens_details", d),
            ("cost", cost),
        ])),
    })
}

fn call() -> impl Strategy<Value = Value> {
    let index = pick(vec![None, Some(json!(0)), Some(json!(1)), Some(json!(-1)), Some(json!(1.5)), Some(json!("0"))]);
    let id = pick(vec![None, Some(Value::Null), Some(json!("c1")), Some(json!("")), Some(json!(7))]);
    let name = pick(vec![None, Some(Value::Null), Some(json!("search")), Some(json!("")), Some(json!(3))]);
    let arguments = pick(vec![
        None,
        Some(Value::Null),
        Some(json!("{}")),
        Some(json!("")),
        Some(json!("{\"city\": \"Paris\"}")),
        Some(json!({"city": "Paris"})),
        Some(json!([1])),
    ]);
    let function_shape = any::<u8>();
    (index, id, name, arguments, function_shape, any::<u8>()).prop_map(|(index, id, name, arguments, f, shape)| {
        let function = match f % 6 {
            0 => None,
            1 => Some(Value::Null),
            2 => Some(json!("f")),
            _ => Some(object(vec![("name", name), ("arguments", arguments)])),
        };
        match shape % 10 {
            0 => json!("not a call"),
            _ => object(vec![("index", index), ("id", id), ("type", Some(json!("function"))), ("function", function)]),
        }
    })
}

fn message() -> impl Strategy<Value = Option<Value>> {
    let content = pick(vec![
        None,
        Some(Value::Null),
        Some(json!("hi")),
        Some(json!("")),
        Some(json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}])),
        Some(json!([{"text": null}])),
        Some(json!(["plain"])),
        Some(json!([{"text": 5}])),
        Some(json!(7)),
        Some(json!({"a": 1})),
    ]);
    let refusal = pick(vec![None, Some(Value::Null), Some(json!("no")), Some(json!("")), Some(json!(5))]);
    let calls = proptest::collection::vec(call(), 0..3);
    (content, refusal, calls, any::<u8>()).prop_map(|(content, refusal, calls, shape)| {
        let tool_calls = match shape % 6 {
            0 => None,
            1 => Some(Value::Null),
            2 => Some(json!("x")),
            _ => Some(Value::Array(calls)),
        };
        match shape % 13 {
            0 => None,
            1 => Some(Value::Null),
            2 => Some(json!(3)),
            _ => Some(object(vec![
                ("role", Some(json!("assistant"))),
                ("content", content),
                ("refusal", refusal),
                ("tool_calls", tool_calls),
            ])),
        }
    })
}

fn answer() -> impl Strategy<Value = Value> {
    let finish = pick(vec![
        None,
        Some(Value::Null),
        Some(json!("stop")),
        Some(json!("tool_calls")),
        Some(json!("eos")),
        Some(json!(3)),
    ]);
    let error = pick(vec![
        None,
        Some(Value::Null),
        Some(json!({"message": "bad", "code": 502})),
        Some(json!("oops")),
        Some(json!({})),
    ]);
    let object_kind = pick(vec![None, Some(json!("chat.completion")), Some(json!("error")), Some(json!(5))]);
    let model = pick(vec![None, Some(Value::Null), Some(json!("gpt")), Some(json!("")), Some(json!(3))]);
    (message(), message(), finish, usage(), error, object_kind, model, any::<u8>()).prop_map(
        |(message, delta, finish, usage, error, object_kind, model, shape)| {
            let choice = object(vec![
                ("index", Some(json!(0))),
                ("message", message),
                ("delta", delta),
                ("finish_reason", finish),
            ]);
            let choices = match shape % 9 {
                0 => None,
                1 => Some(Value::Null),
                2 => Some(json!([])),
                3 => Some(json!({"a": 1})),
                4 => Some(json!([choice, "second"])),
                5 => Some(json!(["not a choice"])),
                _ => Some(json!([choice])),
            };
            let fields = vec![
                ("choices", choices),
                ("usage", usage),
                ("error", error),
                ("object", object_kind),
                ("model", model),
            ];
            if shape % 31 == 0 { json!([1, 2]) } else { object(fields) }
        },
    )
}

/// Deltas and the end of a stream of `chunks`, fed by `push`.
fn streamed(chunks: &[String], typed: bool) -> String {
    let mut acc = StreamAccumulator::new();
    let mut out = Vec::new();
    for chunk in chunks {
        out.push(format!("{:?}", if typed { acc.push(chunk) } else { acc.push_value(chunk) }));
    }
    out.push(format!("{:?}", acc.finish()));
    out.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn an_answer_of_any_shape_parses_as_the_value_walk_parses_it(answer in answer()) {
        let body = answer.to_string();
        prop_assert_eq!(format!("{:?}", parse_response(&body)), format!("{:?}", value_response(&body)), "{}", body);
    }

    #[test]
    fn a_stream_of_chunks_of_any_shape_accumulates_as_the_value_walk_does(chunks in proptest::collection::vec(answer(), 1..5)) {
        let chunks: Vec<String> = chunks.iter().map(Value::to_string).collect();
        prop_assert_eq!(streamed(&chunks, true), streamed(&chunks, false), "{:?}", chunks);
    }
}

#[test]
fn duplicated_keys_and_bodies_that_are_not_json_parse_as_the_value_walk_parses_them() {
    for body in [
        r#"{"choices":[{"message":{"content":"a"}}],"model":"x","model":"y"}"#,
        r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"message":{"content":"a"}}]} trailing"#,
        r#"{"choices":[{"message":{"content":"\u00e9\n"}}]}"#,
        "{not json",
        "",
    ] {
        assert_eq!(format!("{:?}", parse_response(body)), format!("{:?}", value_response(body)), "{body}");
    }
}

#[test]
fn the_committed_answers_of_openai_openrouter_and_llama_cpp_are_read_by_the_typed_view() {
    for body in [
        include_str!("../../../tests/fixtures/chat_text.json"),
        include_str!("../../../tests/fixtures/chat_tool_calls.json"),
        include_str!("../../../tests/fixtures/openrouter_cost.json"),
        include_str!("../../../tests/fixtures/llama_cpp_tool_call.json"),
    ] {
        assert!(super::Answer::read(body).is_some(), "{body}");
        assert_eq!(format!("{:?}", parse_response(body)), format!("{:?}", value_response(body)));
    }
}

/// Where the hand scan reads `body`, the typed view reads it and both give the same response.
fn scanned_as_typed(body: &str) -> Result<(), String> {
    let Some(scanned) = super::scan::answer(body) else { return Ok(()) };
    let Ok(typed) = serde_json::from_str::<super::Answer<'_>>(body) else {
        return Err(format!("scanned, but the typed view refuses it: {body}"));
    };
    let (scanned, typed) = (typed_response(scanned, body), typed_response(typed, body));
    match format!("{scanned:?}") == format!("{typed:?}") {
        true => Ok(()),
        false => Err(format!("{body}\nscanned: {scanned:?}\ntyped:   {typed:?}")),
    }
}

/// An answer carrying `text` as its content, a call's arguments and an unknown field.
fn carrying(text: &str) -> Value {
    json!({"id": text, "object": "chat.completion", "model": "gpt",
           "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": text,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": text}}]}}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}, "extra": [text, {"k": text}]})
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn an_answer_the_hand_scan_reads_is_read_as_the_typed_view_reads_it(answer in answer(), pretty in any::<bool>()) {
        let body = if pretty { serde_json::to_string_pretty(&answer).unwrap() } else { answer.to_string() };
        prop_assert!(scanned_as_typed(&body).is_ok(), "{:?}", scanned_as_typed(&body));
    }

    #[test]
    fn text_of_any_characters_is_scanned_as_the_typed_view_reads_it(text in "(?s).{0,60}", pretty in any::<bool>()) {
        let answer = carrying(&text);
        let body = if pretty { serde_json::to_string_pretty(&answer).unwrap() } else { answer.to_string() };
        prop_assert!(scanned_as_typed(&body).is_ok(), "{:?}", scanned_as_typed(&body));
        prop_assert_eq!(format!("{:?}", parse_response(&body)), format!("{:?}", value_response(&body)));
    }
}

#[test]
fn the_usual_answers_are_scanned_by_hand() {
    let escaped = carrying(r#"{"path": "src/lib.rs", "query": "say \"hi\"\n\t/\\"}"#).to_string();
    let long = carrying(&format!("{{\"a\": \"{}\"}}", "x".repeat(5000))).to_string();
    for body in [
        include_str!("../../../tests/fixtures/chat_text.json"),
        include_str!("../../../tests/fixtures/chat_tool_calls.json"),
        include_str!("../../../tests/fixtures/llama_cpp_tool_call.json"),
        &escaped,
        &long,
    ] {
        assert!(super::scan::answer(body).is_some(), "{body}");
        assert_eq!(scanned_as_typed(body), Ok(()));
        assert_eq!(format!("{:?}", parse_response(body)), format!("{:?}", value_response(body)));
    }
}

#[test]
fn what_the_hand_scan_is_not_sure_of_is_left_to_the_typed_view() {
    let deep = format!(r#"{{"choices":[{{"message":{{"content":"a"}}}}],"x":{}1{}}}"#, "[".repeat(70), "]".repeat(70));
    let deeper =
        format!(r#"{{"choices":[{{"message":{{"content":"a"}}}}],"x":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    for body in [
        r#"{"choices":[{"message":{"content":"\u00e9"}}]}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":1.5,"y":-2.5e-3,"z":1E+2}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":1e400}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":1.}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":1e}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":.5}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":-0}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":01}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":- 1}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":[1,]}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"x":{"a":1,}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"mod\u0065l":"m"}"#,
        r#"{"choices":[{"message":{"content":"a\/b"}}],"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"usage":{"prompt_tokens":-2,"cost":0.25}}"#,
        r#"{"choices":[{"message":{"content":"a\ud800"}}]}"#,
        "{\"choices\":[{\"message\":{\"content\":\"tab\there\"}}]}",
        r#"{"choices":[{"message":{"content":"a"},"delta":null}],"error":null,"object":"error"}"#,
        r#"{"choices":[{"message":{"content":"unterminated}]}"#,
        r#"{"choices":[{"message":{"content":"a\"}}]}"#,
        &deep,
        &deeper,
    ] {
        assert_eq!(scanned_as_typed(body), Ok(()));
        let before = match super::Answer::read(body) {
            Some(answer) => typed_response(answer, body),
            None => value_response(body),
        };
        assert_eq!(format!("{:?}", parse_response(body)), format!("{before:?}"), "{body}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn text_the_scan_is_sure_is_json_is_json_to_serde(text in "[ \\[\\]{}\":,0-9.eE+\\-tfrulnsax\\\\/\u{e9}\t]{0,24}") {
        let serde = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
        prop_assert!(!super::surely_json(&text) || serde, "{:?}", text);
    }

    #[test]
    fn any_answer_without_unicode_escapes_is_surely_json(answer in answer()) {
        let text = answer.to_string();
        prop_assert!(super::surely_json(&text) || text.contains("\\u"), "{}", text);
    }
}

#[test]
fn the_scan_is_sure_of_json_arguments_and_never_of_what_is_not_json() {
    for json in [r#"{"city": "Paris", "n": [1, -2.5e3, true, false, null]}"#, " {} ", "\"s\\\"\"", "0", "-0.5E+2"] {
        assert!(super::surely_json(json), "{json}");
    }
    for not_json in ["", "{", "{\"a\":}", "[1,]", "01", "1.", "tru", "{} {}", "\"a", "\"\t\"", "{'a': 1}", "[1]x"] {
        assert!(!super::surely_json(not_json), "{not_json}");
        assert!(serde_json::from_str::<serde::de::IgnoredAny>(not_json).is_err(), "{not_json}");
    }
}
