//! Canonical JSON and its SHA-256: one encoding of a value, whatever order its object keys were built in, so
//! that a hash names exactly the content (the arguments an approval was given for, a ledger entry).

use serde_json::Value;
use sha2::{Digest, Sha256};

mod typed;

/// The canonical JSON text of `value`: object keys sorted by their UTF-8 bytes, no whitespace, strings and
/// numbers as `serde_json` writes them.
///
/// ```
/// use serde_json::json;
///
/// assert_eq!(noetic::digest::canonical_json(&json!({"b": 1, "a": [true, null]})), r#"{"a":[true,null],"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    // Only JSON text was written: keys and strings as serde_json escapes them, and ASCII punctuation.
    String::from_utf8(out).unwrap_or_default()
}

/// Writes `value`'s canonical text to `out` (no intermediate strings: hashing a ledger entry is on each decision's
/// path).
fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            let mut keys: Vec<(&String, &Value)> = fields.iter().collect();
            keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, field)) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                scalar(key, out);
                out.push(b':');
                write(field, out);
            }
            out.push(b'}');
        }
        other => scalar(other, out),
    }
}

/// A string or scalar as serde_json writes it (writing to a `Vec` cannot fail).
fn scalar<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The SHA-256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    hex
}

/// The SHA-256 of the canonical JSON of `value` (see [`canonical_json`]), as 64 lowercase hex digits.
///
/// ```
/// use serde_json::json;
///
/// let a = noetic::digest::json_sha256(&json!({"command": "cargo test", "cwd": "."}));
/// let b = noetic::digest::json_sha256(&json!({"cwd": ".", "command": "cargo test"}));
/// assert_eq!(a, b);
/// assert_ne!(a, noetic::digest::json_sha256(&json!({"command": "cargo test ", "cwd": "."})));
/// ```
pub fn json_sha256(value: &Value) -> String {
    let mut out = Vec::with_capacity(512);
    write(value, &mut out);
    sha256_hex(&out)
}

/// The SHA-256 of the canonical JSON of what `value` serialises to — the same as [`json_sha256`] of
/// `serde_json::to_value(value)`, without building the `Value`.
///
/// ```
/// use serde_json::json;
///
/// let args = json!({"cwd": ".", "command": "cargo test"});
/// assert_eq!(noetic::digest::typed_sha256(&args).unwrap(), noetic::digest::json_sha256(&args));
/// ```
pub fn typed_sha256<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let mut out = Vec::with_capacity(512);
    typed::write(value, &mut out)?;
    Ok(sha256_hex(&out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_hash_is_sha256_of_the_canonical_text() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let nested = json!({"z": {"y": 1, "x": "\u{e9}\n"}, "a": [2.5, {"d": 0, "c": -1}]});
        assert_eq!(canonical_json(&nested), r#"{"a":[2.5,{"c":-1,"d":0}],"z":{"x":"é\n","y":1}}"#);
        assert_eq!(json_sha256(&nested), sha256_hex(canonical_json(&nested).as_bytes()));
    }

    #[test]
    fn a_serialisable_value_is_written_as_its_json_value_is() {
        let values = [
            json!({"z": [1, 2.5, null, {"b": "é\n\u{1}\u{7f}\u{2028}", "a": true}], "\"q\"": -3, "A": {}, "": []}),
            json!(f64::MAX),
            json!(-0.0),
            json!("text"),
        ];
        for value in values {
            let mut typed = Vec::new();
            assert!(super::typed::write(&value, &mut typed).is_ok());
            assert_eq!(String::from_utf8(typed).ok(), Some(canonical_json(&value)), "{value}");
            assert_eq!(typed_sha256(&value).ok(), Some(json_sha256(&value)));
        }
    }
}
