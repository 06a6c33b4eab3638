//! The typed reading and the `Value` walk give the same response for every body shape, odd ones included (the
//! typed reading then leaves them to the walk).

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{parse_response, value_response};

fn pick(choices: Vec<Option<Value>>) -> impl Strategy<Value = Option<Value>> {
    proptest::sample::select(choices)
}

fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    Value::Object(fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect::<Map<_, _>>())
}

fn block() -> impl Strategy<Value = Value> {
    let kind = pick(vec![None, Some(json!("text")), Some(json!("tool_use")), Some(json!("thinking")), Some(json!(3))]);
    let text = pick(vec![None, Some(Value::Null), Some(json!("hi ")), Some(json!("")), Some(json!(5))]);
    let id = pick(vec![None, Some(json!("t1")), Some(json!(7))]);
    let name = pick(vec![None, Some(json!("weather")), Some(Value::Null)]);
    let input = pick(vec![
        None,
        Some(Value::Null),
        Some(json!({"city": "Oslo", "a": [1, 2.5]})),
        Some(json!({})),
        Some(json!("x")),
    ]);
    (kind, text, id, name, input, any::<u8>()).prop_map(|(kind, text, id, name, input, shape)| {
        if shape % 11 == 0 {
            json!("not a block")
        } else {
            object(vec![("type", kind), ("text", text), ("id", id), ("name", name), ("input", input)])
        }
    })
}

fn body() -> impl Strategy<Value = Value> {
    let count =
        || pick(vec![None, Some(Value::Null), Some(json!(5)), Some(json!(-1)), Some(json!(2.5)), Some(json!("3"))]);
    let usage = (count(), count(), count(), count(), any::<u8>()).prop_map(|(i, o, r, c, shape)| match shape % 6 {
        0 => None,
        1 => Some(json!(4)),
        _ => Some(object(vec![
            ("input_tokens", i),
            ("output_tokens", o),
            ("cache_read_input_tokens", r),
            ("cache_creation_input_tokens", c),
        ])),
    });
    let stop = pick(vec![
        None,
        Some(Value::Null),
        Some(json!("end_turn")),
        Some(json!("tool_use")),
        Some(json!("refusal")),
        Some(json!(1)),
    ]);
    let kind = pick(vec![None, Some(json!("message")), Some(json!("error")), Some(json!(2))]);
    let error = pick(vec![
        None,
        Some(Value::Null),
        Some(json!({"type": "overloaded_error", "message": "Overloaded"})),
        Some(json!("x")),
    ]);
    let model = pick(vec![None, Some(json!("claude")), Some(json!("")), Some(json!(3))]);
    (proptest::collection::vec(block(), 0..4), usage, stop, kind, error, model, any::<u8>()).prop_map(
        |(blocks, usage, stop, kind, error, model, shape)| {
            let content = match shape % 7 {
                0 => None,
                1 => Some(Value::Null),
                2 => Some(json!("text")),
                _ => Some(Value::Array(blocks)),
            };
            object(vec![
                ("type", kind),
                ("content", content),
                ("stop_reason", stop),
                ("usage", usage),
                ("error", error),
                ("model", model),
            ])
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_body_of_any_shape_parses_as_the_value_walk_parses_it(body in body()) {
        let text = body.to_string();
        prop_assert_eq!(format!("{:?}", parse_response(&text)), format!("{:?}", value_response(&text, "")), "{}", text);
    }
}
