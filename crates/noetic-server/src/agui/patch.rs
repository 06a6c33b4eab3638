//! JSON Patch (RFC 6902) between two states, for AG-UI's `STATE_DELTA`: objects are compared key by key, an array
//! that grew or shrank at its end changes by its end, anything else is replaced.

use serde_json::{Value, json};

/// The operations that turn `old` into `new` (none when they are equal).
pub(crate) fn diff(old: &Value, new: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    diff_at(&mut String::new(), old, new, &mut ops);
    ops
}

/// `token` escaped as a JSON Pointer reference token (`~` is `~0`, `/` is `~1`).
fn escaped(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn diff_at(path: &mut String, old: &Value, new: &Value, ops: &mut Vec<Value>) {
    if old == new {
        return;
    }
    let len = path.len();
    match (old, new) {
        (Value::Object(before), Value::Object(after)) => {
            for key in before.keys().filter(|k| !after.contains_key(*k)) {
                ops.push(json!({ "op": "remove", "path": format!("{path}/{}", escaped(key)) }));
            }
            for (key, value) in after {
                path.push('/');
                path.push_str(&escaped(key));
                match before.get(key) {
                    Some(was) => diff_at(path, was, value, ops),
                    None => ops.push(json!({ "op": "add", "path": path.as_str(), "value": value })),
                }
                path.truncate(len);
            }
        }
        (Value::Array(before), Value::Array(after)) if after.starts_with(before) => {
            for value in &after[before.len()..] {
                ops.push(json!({ "op": "add", "path": format!("{path}/-"), "value": value }));
            }
        }
        (Value::Array(before), Value::Array(after)) if before.starts_with(after) => {
            for index in (after.len()..before.len()).rev() {
                ops.push(json!({ "op": "remove", "path": format!("{path}/{index}") }));
            }
        }
        _ => ops.push(json!({ "op": "replace", "path": path.as_str(), "value": new })),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// Applies the operations `diff` makes (add, remove, replace) to `doc`.
    fn apply(mut doc: Value, ops: &[Value]) -> Value {
        for op in ops {
            let path = op["path"].as_str().unwrap();
            if path.is_empty() {
                doc = op["value"].clone();
                continue;
            }
            let (parent, last) = path.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            let target = doc.pointer_mut(parent).unwrap();
            match (op["op"].as_str().unwrap(), target) {
                ("add", Value::Array(items)) if last == "-" => items.push(op["value"].clone()),
                ("remove", Value::Array(items)) => {
                    items.remove(last.parse().unwrap());
                }
                ("add" | "replace", Value::Object(fields)) => {
                    fields.insert(last, op["value"].clone());
                }
                ("replace", Value::Array(items)) => items[last.parse::<usize>().unwrap()] = op["value"].clone(),
                ("remove", Value::Object(fields)) => {
                    fields.remove(&last);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        doc
    }

    #[test]
    fn a_state_delta_applied_to_the_old_state_gives_the_new_one() {
        let old = json!({ "busy": false, "turns": 1, "queued": [], "pending_approvals": [{ "call_id": "c1" }],
                          "a/b~c": 1, "gone": true, "paused": null });
        let cases = [
            json!({ "busy": true, "turns": 2, "queued": [{ "id": "m1" }], "pending_approvals": [{ "call_id": "c1" }],
                    "a/b~c": 2, "paused": null }),
            json!({ "busy": false, "turns": 1, "queued": [], "pending_approvals": [], "a/b~c": 1, "gone": true,
                    "paused": { "limit": "tool_calls" } }),
            json!({ "busy": false, "turns": 1, "queued": [], "pending_approvals": [{ "call_id": "c2" }],
                    "new": [1, 2], "a/b~c": 1, "gone": true, "paused": null }),
            json!([1, 2]),
        ];
        for new in cases {
            let ops = diff(&old, &new);
            assert_eq!(apply(old.clone(), &ops), new, "{ops:?}");
        }
        assert!(diff(&old, &old).is_empty());
        assert_eq!(
            diff(&json!({ "q": [1] }), &json!({ "q": [1, 2] })),
            [json!({ "op": "add", "path": "/q/-", "value": 2 })]
        );
        assert_eq!(
            diff(&json!({ "a/b": 1 }), &json!({ "a/b": 2 })),
            [json!({ "op": "replace", "path": "/a~1b", "value": 2 })]
        );
    }
}
