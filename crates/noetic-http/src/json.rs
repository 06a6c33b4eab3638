//! JSON strings written straight into a byte buffer, escaped exactly as `serde_json` escapes them, scanning eight
//! bytes at a time: request bodies are mostly text that needs no escape (instructions, tool results), and a
//! byte-at-a-time escaper spent most of a request's encoding there.

pub use noetic_core::json::find_json_escape;

/// Appends `text` as a JSON string (quotes included): the bytes `serde_json::to_string(text)` gives.
///
/// ```
/// let mut out = Vec::new();
/// noetic_http::write_json_str(&mut out, "say \"hi\"\n\u{1}");
/// assert_eq!(out, br#""say \"hi\"\n\u0001""#);
/// ```
pub fn write_json_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `bytes[copied..]` is not written yet; what lies before the next escape needs none.
    let mut copied = 0;
    while let Some(at) = find_json_escape(bytes, copied) {
        out.extend_from_slice(&bytes[copied..at]);
        let byte = bytes[at];
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
        }
        copied = at + 1;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(text: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, text);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn every_byte_that_needs_an_escape_is_escaped_as_serde_json_does_at_every_position() {
        for byte in 0u8..=0x7f {
            for position in 0..40 {
                let mut text = "a".repeat(position);
                text.push(char::from(byte));
                text.push_str("é\u{1F600}z");
                assert_eq!(written(&text), serde_json::to_string(&text).unwrap_or_default(), "byte {byte:#x}");
            }
        }
    }

    #[test]
    fn the_first_byte_a_string_must_escape_is_found_at_every_position() {
        for byte in [b'"', b'\\', 0x00, 0x1f] {
            for position in 0..40 {
                let mut bytes = vec![b'a'; position];
                bytes.push(byte);
                bytes.extend_from_slice("é\"z".as_bytes());
                assert_eq!(find_json_escape(&bytes, 0), Some(position), "byte {byte:#x}");
                assert_eq!(find_json_escape(&bytes, position + 1), Some(position + 3), "after it, the quote");
            }
        }
        assert_eq!(find_json_escape(b"no escape at all, however long it is", 0), None);
        assert_eq!(find_json_escape(b"ab", 5), None, "from beyond the end");
    }

    proptest! {
        #[test]
        fn any_text_is_written_as_serde_json_writes_it(text in "(?s).{0,80}", ascii in "[\\x00-\\x7f]{0,80}") {
            prop_assert_eq!(written(&text), serde_json::to_string(&text).unwrap_or_default());
            prop_assert_eq!(written(&ascii), serde_json::to_string(&ascii).unwrap_or_default());
        }
    }
}
