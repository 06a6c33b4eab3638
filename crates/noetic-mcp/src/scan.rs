//! Finding out, without keeping it, which request a message too large to keep answered: a JSON-RPC message is
//! scanned byte by byte for its top-level `id` (which a server may write after a huge `result`) and `method`
//! (which only requests and notifications have).

use serde_json::Value;

/// The longest `id` value kept (a request id is a short number or string).
const MAX_ID_BYTES: usize = 256;

/// Which top-level key a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Method,
    Other,
}

/// The scan of one line so far.
#[derive(Debug, Default)]
pub(crate) struct IdScanner {
    /// Nesting of objects and arrays outside strings (1 inside the top-level object).
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The next string at depth 1 is a key.
    expecting_key: bool,
    /// The key being read (`None` when the string is not a top-level key); the first bytes only.
    key: Option<Vec<u8>>,
    /// The key just read, waiting for its `:`.
    after_key: Option<Key>,
    /// The top-level key whose value is being read.
    value_of: Option<Key>,
    /// The `id` value's text.
    id: Vec<u8>,
    /// The `id` value is longer than [`MAX_ID_BYTES`] or nested: not a request id.
    id_unusable: bool,
    has_method: bool,
}

impl IdScanner {
    /// Scans the next bytes of the line.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn keep_id_byte(&mut self, b: u8) {
        if self.value_of == Some(Key::Id) && self.depth == 1 {
            if self.id.len() < MAX_ID_BYTES {
                self.id.push(b);
            } else {
                self.id_unusable = true;
            }
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if let Some(key) = &mut self.key {
                if b == b'"' && !self.escaped {
                    self.after_key = Some(match key.as_slice() {
                        b"id" => Key::Id,
                        b"method" => Key::Method,
                        _ => Key::Other,
                    });
                    self.key = None;
                } else if key.len() < 8 {
                    key.push(b);
                } else {
                    key.push(b'?');
                    key.truncate(8);
                }
            } else {
                self.keep_id_byte(b);
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expecting_key {
                    self.expecting_key = false;
                    self.key = Some(Vec::new());
                } else {
                    self.keep_id_byte(b);
                }
            }
            b'{' | b'[' => {
                if self.value_of == Some(Key::Id) && self.depth == 1 {
                    self.id_unusable = true;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expecting_key = b == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.value_of = None;
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.value_of = self.after_key.take();
                if self.value_of == Some(Key::Method) {
                    self.has_method = true;
                }
                if self.value_of == Some(Key::Id) {
                    self.id.clear();
                }
            }
            b',' if self.depth == 1 => {
                self.value_of = None;
                self.expecting_key = true;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            other => self.keep_id_byte(other),
        }
    }

    /// The id of the request the scanned message answers: `None` for a request or notification of the server
    /// (it has a `method`) or when no usable `id` was seen.
    pub(crate) fn answered_id(&self) -> Option<Value> {
        if self.has_method || self.id_unusable || self.id.is_empty() {
            return None;
        }
        serde_json::from_slice::<Value>(&self.id).ok().filter(|v| v.is_number() || v.is_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    fn scan(text: &str) -> Option<Value> {
        let mut scanner = IdScanner::default();
        // Fed in small pieces, as a pipe hands them over.
        for piece in text.as_bytes().chunks(3) {
            scanner.feed(piece);
        }
        scanner.answered_id()
    }

    #[test]
    fn the_id_of_an_answer_is_found_before_or_after_a_large_result() {
        let big = "x\\\"}{,".repeat(1000);
        assert_eq!(scan(&format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{big}"}}}}"#)), Some(json!(7)));
        assert_eq!(
            scan(&format!(r#"{{"result":{{"content":[{{"text":"{big}"}}]}},"jsonrpc":"2.0","id":12}}"#)),
            Some(json!(12))
        );
        assert_eq!(scan(r#"{ "id" : "req-1" , "error": {"code": 1, "id": 5}}"#), Some(json!("req-1")));
    }

    #[test]
    fn requests_notifications_nested_ids_and_garbage_answer_nothing() {
        assert_eq!(scan(r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{}}"#), None);
        assert_eq!(scan(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":4}}"#), None);
        assert_eq!(scan(r#"{"result":{"id":9}}"#), None);
        assert_eq!(scan(r#"{"id":{"x":1},"result":{}}"#), None);
        assert_eq!(scan(r#"["id", 5]"#), None);
        assert_eq!(scan("not json at all"), None);
        assert_eq!(scan(r#"{"ids":1,"idx":2}"#), None);
    }
}
