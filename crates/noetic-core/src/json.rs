//! JSON read by hand where `serde_json`'s generic machinery costs more than the text: the search for the end of a
//! string's plain text ([`find_json_escape`], shared with the providers' encoders and answer scans) and a parse of
//! the usual tool arguments into a [`Value`] ([`parse_value`]). The parse gives up — leaving the text to
//! `serde_json`, its errors included — wherever it is not sure it reads exactly what `serde_json::from_str` reads.

use serde_json::{Map, Number, Value};

/// Eight copies of byte `b`.
const fn splat(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

const HIGH: u64 = splat(0x80);

/// High bit of each byte of `word` that is zero (exact for the lowest such byte, the only one used).
const fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(splat(1)) & !word & HIGH
}

/// High bit of each byte of `word` that JSON must escape: a control character, `"` or `\` (exact for the lowest).
const fn escapes(word: u64) -> u64 {
    let control = word.wrapping_sub(splat(0x20)) & !word & HIGH;
    control | zero_bytes(word ^ splat(b'"')) | zero_bytes(word ^ splat(b'\\'))
}

/// Where the first byte from `from` on lies that a JSON string cannot hold as it is — `"`, `\` or a control
/// character — scanning sixteen bytes at a time (a reader's way through a string: everything before it is text as it
/// is). `None` when there is none.
///
/// ```
/// assert_eq!(noetic_core::json::find_json_escape(br#"abc\"d""#, 0), Some(3));
/// assert_eq!(noetic_core::json::find_json_escape(b"plain text", 2), None);
/// ```
pub fn find_json_escape(bytes: &[u8], mut from: usize) -> Option<usize> {
    while let Some(sixteen) = bytes.get(from..from + 16).and_then(|s| <&[u8; 16]>::try_from(s).ok()) {
        if let Some(within) = first_escape_of_sixteen(sixteen) {
            return Some(from + within);
        }
        from += 16;
    }
    // The last few bytes: one word, then one by one.
    if let Some(eight) = bytes.get(from..from + 8) {
        let mask = escapes(word(eight));
        if mask != 0 {
            return Some(from + (mask.trailing_zeros() / 8) as usize);
        }
        from += 8;
    }
    let rest = bytes.get(from..)?;
    rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|i| from + i)
}

/// Where the first byte of `sixteen` (sixteen bytes) lies that JSON must escape. With SSE2 — every x86-64
/// processor has it — three comparisons of all sixteen bytes at once and one mask of them, through `safe_arch`'s
/// safe wrappers of the instructions (a third of the instructions of two words tested by arithmetic).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn first_escape_of_sixteen(sixteen: &[u8; 16]) -> Option<usize> {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, min_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let text = load_unaligned_m128i(sixteen);
    let splat = |byte: u8| set_splat_i8_m128i(i8::from_ne_bytes([byte]));
    let quote = cmp_eq_mask_i8_m128i(text, splat(b'"'));
    let backslash = cmp_eq_mask_i8_m128i(text, splat(b'\\'));
    // A control character is a byte that the smaller of it and 0x1f is.
    let control = cmp_eq_mask_i8_m128i(min_u8_m128i(text, splat(0x1f)), text);
    let mask = move_mask_i8_m128i(bitor_m128i(bitor_m128i(quote, backslash), control)).cast_unsigned();
    (mask != 0).then(|| mask.trailing_zeros() as usize)
}

/// Elsewhere: [`first_escape_in_words`].
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn first_escape_of_sixteen(sixteen: &[u8; 16]) -> Option<usize> {
    first_escape_in_words(sixteen)
}

/// [`first_escape_of_sixteen`] by arithmetic on two words (any processor; used where SSE2 is not, and tested
/// against it everywhere).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn first_escape_in_words(sixteen: &[u8; 16]) -> Option<usize> {
    let (low, high) = (escapes(word(&sixteen[..8])), escapes(word(&sixteen[8..])));
    match (low, high) {
        (0, 0) => None,
        (0, high) => Some(8 + (high.trailing_zeros() / 8) as usize),
        (low, _) => Some((low.trailing_zeros() / 8) as usize),
    }
}

/// Appends the rest of a JSON string's text to `text`, unescaped: `copied` is where its plain text not yet
/// appended starts in `source`, `at` the first escape after it (as [`find_json_escape`] found it). Returns where the
/// closing quote lies; `None` for a `\u` escape, a control character or a string that does not end (the caller
/// leaves those to `serde_json`).
///
/// ```
/// let source = r#""say \"hi\"\n" tail"#;
/// let at = noetic_core::json::find_json_escape(source.as_bytes(), 1).unwrap();
/// let mut text = String::new();
/// assert_eq!(noetic_core::json::unescape_rest(source, 1, at, &mut text), Some(13));
/// assert_eq!(text, "say \"hi\"\n");
/// ```
pub fn unescape_rest(source: &str, mut copied: usize, mut at: usize, text: &mut String) -> Option<usize> {
    let bytes = source.as_bytes();
    while *bytes.get(at)? != b'"' {
        if bytes[at] != b'\\' {
            return None;
        }
        let escaped = match bytes.get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        };
        text.push_str(source.get(copied..at)?);
        text.push(escaped);
        copied = at + 2;
        at = find_json_escape(bytes, copied)?;
    }
    text.push_str(source.get(copied..at)?);
    Some(at)
}

/// The first byte from `*at` on that is not JSON whitespace, `*at` moved to it; `None` when there is none. A
/// compact body has no whitespace between tokens: one comparison answers there.
#[inline]
pub fn peek_past_ws(bytes: &[u8], at: &mut usize) -> Option<u8> {
    let byte = *bytes.get(*at)?;
    if byte > b' ' {
        return Some(byte);
    }
    *at = skip_ws(bytes, *at);
    bytes.get(*at).copied()
}

/// True when `text` is empty or only whitespace (as `str::trim` tells it: Unicode's), as a call's arguments may be.
/// Text that starts with a visible ASCII character — a JSON object does — is told by its first byte.
///
/// ```
/// assert!(noetic_core::json::blank(" \n\u{a0}"));
/// assert!(!noetic_core::json::blank("{}"));
/// assert!(!noetic_core::json::blank(" x "));
/// ```
#[inline]
pub fn blank(text: &str) -> bool {
    match text.as_bytes().first() {
        None => true,
        Some(&byte) if byte > b' ' && byte.is_ascii() => false,
        Some(_) => text.trim().is_empty(),
    }
}

/// Where the first byte from `at` on lies that is not JSON whitespace (`bytes.len()` when there is none).
pub fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// Eight bytes as a little-endian word.
fn word(eight: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(eight);
    u64::from_le_bytes(word)
}

/// Deeper values are left to `serde_json` (whose own limit is 128).
const MAX_DEPTH: usize = 64;

/// `text` as `serde_json::from_str::<Value>` reads it, or `None` where this parse is not sure: a `\u` escape, a
/// number that is not a whole one within `u64` / `i64` (or is `-0`, which `serde_json` reads as a float), nesting
/// deeper than 64, or text that is not JSON. Callers then ask `serde_json`, which also words the error.
///
/// About half of `serde_json`'s cost on a tool call's arguments (an object of a few strings): the same
/// allocations, without the generic visitor between the text and each value.
///
/// ```
/// use serde_json::json;
/// let text = r#"{"path": "src/lib.rs", "limit": 20, "tags": ["a", "b\n"], "deep": {"ok": true, "none": null}}"#;
/// assert_eq!(noetic_core::json::parse_value(text), Some(serde_json::from_str(text).unwrap()));
/// assert_eq!(noetic_core::json::parse_value(r#"{"x": 1.5}"#), None, "floats are serde_json's to read");
/// ```
pub fn parse_value(text: &str) -> Option<Value> {
    let mut parser = Parser { text, bytes: text.as_bytes(), at: 0 };
    let value = parser.value(0)?;
    parser.ws();
    (parser.at == parser.bytes.len()).then_some(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        self.at = skip_ws(self.bytes, self.at);
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        peek_past_ws(self.bytes, &mut self.at)
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(Value::String),
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            _ => self.whole(),
        }
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| {
            self.at = end;
            value
        })
    }

    /// A string at the quote under the cursor, unescaped; `None` for a `\u` escape or a control character.
    fn string(&mut self) -> Option<String> {
        let start = self.at + 1;
        let at = find_json_escape(self.bytes, start)?;
        if self.bytes[at] == b'"' {
            self.at = at + 1;
            return self.text.get(start..at).map(str::to_owned);
        }
        let mut text = String::with_capacity(at - start + 16);
        self.at = unescape_rest(self.text, start, at, &mut text)? + 1;
        Some(text)
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        let mut map = Map::new();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Value::Object(map));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let value = self.value(depth)?;
            // A repeated key: the last value, as `serde_json` keeps it.
            map.insert(key, value);
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(Value::Object(map));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        let mut items = Vec::new();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(Value::Array(items));
                }
                _ => return None,
            }
        }
    }

    /// A whole number as `serde_json` keeps it: `u64` when not negative, `i64` when negative; `None` for a fraction,
    /// an exponent, a leading zero, `-0` or a number beyond both (those `serde_json` reads as floats or refuses).
    fn whole(&mut self) -> Option<Value> {
        let start = self.at;
        let negative = self.bytes.get(self.at) == Some(&b'-');
        if negative {
            self.at += 1;
        }
        let digits = self.at;
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
        let count = self.at - digits;
        if count == 0 || (count > 1 && self.bytes[digits] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes.get(self.at) {
            return None;
        }
        let text = self.text.get(start..self.at)?;
        if negative {
            let n: i64 = text.parse().ok()?;
            (n != 0).then(|| Value::Number(Number::from(n)))
        } else {
            text.parse::<u64>().ok().map(|n| Value::Number(Number::from(n)))
        }
    }
}

thread_local! {
    /// The texts this thread noted last as JSON. Each is kept alive here, so a text at the same address and of the
    /// same length is the same text.
    static NOTED_JSON: std::cell::RefCell<crate::sync::Recent> = const { std::cell::RefCell::new(crate::sync::Recent::new()) };
}

/// Notes that `text` was read as one JSON value (a tool call's arguments, parsed before its tool ran), so that a
/// writer about to check the same text again on this thread — an encoder putting the call back into the next
/// request — may skip the check ([`is_noted_json`]). The thread keeps the last four texts noted.
pub fn note_json(text: &std::sync::Arc<str>) {
    NOTED_JSON.with(|noted| noted.borrow_mut().keep(text.clone(), None));
}

/// Whether `text` is — the very string, not an equal one — among the last texts this thread noted as JSON
/// ([`note_json`]). `false` says nothing: the caller checks the text itself.
///
/// ```
/// use std::sync::Arc;
/// use noetic_core::json::{is_noted_json, note_json};
///
/// let arguments: Arc<str> = Arc::from(r#"{"path": "src/lib.rs"}"#);
/// note_json(&arguments);
/// assert!(is_noted_json(&arguments));
/// assert!(!is_noted_json(r#"{"path": "src/lib.rs"}"#), "an equal text elsewhere is not the one noted");
/// ```
pub fn is_noted_json(text: &str) -> bool {
    NOTED_JSON.with(|noted| {
        noted.borrow().position(|kept| std::ptr::eq(kept.as_ptr(), text.as_ptr()) && kept.len() == text.len()).is_some()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The first byte from `from` on that JSON must escape, one byte at a time.
    fn first_escape_bytewise(bytes: &[u8], from: usize) -> Option<usize> {
        (from..bytes.len()).find(|&i| matches!(bytes[i], b'"' | b'\\' | 0x00..=0x1f))
    }

    #[test]
    fn every_byte_value_is_told_apart_in_every_lane_of_sixteen() {
        for byte in 0..=u8::MAX {
            let needs = matches!(byte, b'"' | b'\\' | 0x00..=0x1f);
            for lane in 0..16 {
                let mut sixteen = [b'a'; 16];
                sixteen[lane] = byte;
                let expected = needs.then_some(lane);
                assert_eq!(first_escape_of_sixteen(&sixteen), expected, "byte {byte:#x} in lane {lane}");
                assert_eq!(first_escape_in_words(&sixteen), expected, "words: byte {byte:#x} in lane {lane}");
            }
        }
    }

    proptest! {
        #[test]
        fn blank_is_what_trimming_leaves_empty(
            text in proptest::collection::vec(
                prop_oneof![Just(' '), Just('\t'), Just('\n'), Just('\u{b}'), Just('\u{a0}'), Just('\u{3000}'), Just('{'), Just('x'), any::<char>()],
                0..6,
            ).prop_map(|chars| chars.into_iter().collect::<String>()),
        ) {
            prop_assert_eq!(blank(&text), text.trim().is_empty());
        }

        #[test]
        fn whitespace_is_passed_over_to_the_first_byte_that_is_not(
            text in "[ \t\n\r]{0,4}[a-z{\"\u{a0}]?[ ]{0,2}",
            from in 0usize..8,
        ) {
            let bytes = text.as_bytes();
            let mut at = from;
            let found = peek_past_ws(bytes, &mut at);
            let expected = skip_ws(bytes, from);
            prop_assert_eq!(found, bytes.get(expected).copied());
            prop_assert_eq!(at, expected);
        }

        #[test]
        fn the_first_escape_is_found_wherever_the_search_starts(
            bytes in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'a'), Just(b'"'), Just(b'\\')], 0..80),
            from in 0usize..90,
        ) {
            prop_assert_eq!(find_json_escape(&bytes, from), first_escape_bytewise(&bytes, from));
            if let Some(sixteen) = bytes.get(from..from + 16).and_then(|s| <&[u8; 16]>::try_from(s).ok()) {
                prop_assert_eq!(first_escape_in_words(sixteen), first_escape_of_sixteen(sixteen));
            }
        }
    }

    #[test]
    fn a_noted_text_stays_known_while_it_is_among_the_last_four_noted_even_after_its_owner_dropped_it() {
        let first: std::sync::Arc<str> = std::sync::Arc::from(r#"{"q": 0}"#);
        let (at, len) = (first.as_ptr(), first.len());
        note_json(&first);
        drop(first);
        // The text is kept alive by the note: nothing else can be allocated at its address meanwhile.
        let kept = NOTED_JSON.with(|noted| noted.borrow().get(0).cloned().unwrap());
        assert!(std::ptr::eq(kept.as_ptr(), at) && kept.len() == len);
        assert!(is_noted_json(&kept));
        assert!(!is_noted_json(&kept[..len - 1]), "a part of it is not the text noted");
        for n in 1..=4 {
            note_json(&std::sync::Arc::from(format!(r#"{{"q": {n}}}"#)));
            assert_eq!(is_noted_json(&kept), n < 4, "after {n} newer notes");
        }
    }

    /// Any JSON value, floats and every kind of character in strings included.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1.0e6f64..1.0e6).prop_map(Value::from),
            "(?s).{0,24}".prop_map(Value::String),
            "[a-z \"\\\\/\n\t]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("[a-z_\"\\\\]{0,8}", inner), 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_value_the_hand_parse_reads_is_read_as_serde_json_reads_it(value in any_value(), pretty in any::<bool>()) {
            let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) }.unwrap();
            let serde: Value = serde_json::from_str(&text).unwrap();
            if let Some(parsed) = parse_value(&text) {
                prop_assert_eq!(parsed, serde);
            }
        }

        #[test]
        fn text_the_hand_parse_reads_is_json_that_serde_json_reads_the_same(
            text in "[ \\[\\]{}\":,0-9.eE+\\-tfrulnsa\\\\/\u{e9}\t\n]{0,24}",
        ) {
            if let Some(parsed) = parse_value(&text) {
                let serde: Result<Value, _> = serde_json::from_str(&text);
                prop_assert!(serde.is_ok(), "parsed {text:?}, which serde_json refuses");
                prop_assert_eq!(parsed, serde.unwrap());
            }
        }

        #[test]
        fn values_without_floats_or_unicode_escapes_are_read_by_hand(value in hand_value(), pretty in any::<bool>()) {
            let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) }.unwrap();
            prop_assert_eq!(parse_value(&text), Some(value));
        }
    }

    /// Values the hand parse reads whole: no floats, and no character `serde_json` writes as a `\u` escape.
    fn hand_value() -> impl Strategy<Value = Value> {
        let text = "[^\\x00-\\x07\\x0b\\x0e-\\x1f]{0,16}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((text, inner), 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn usual_tool_arguments_are_read_by_hand() {
        for text in [
            r#"{"path": "src/lib.rs", "query": "where is \"retry\" configured?", "limit": 20}"#,
            r#"{"command":"ls -la","cwd":"/tmp","env":{"A":"1"},"args":["-v",true,null,-3]}"#,
            "{}",
            " [ ] ",
        ] {
            assert_eq!(parse_value(text), Some(serde_json::from_str::<Value>(text).unwrap()), "{text}");
        }
    }

    #[test]
    fn what_the_hand_parse_is_not_sure_of_is_left_to_serde_json() {
        for text in [
            r#"{"a": "\u00e9"}"#,
            r#"{"a": 1.5}"#,
            r#"{"a": 1e3}"#,
            r#"{"a": -0}"#,
            r#"{"a": 18446744073709551616}"#,
            r#"{"a": -9223372036854775809}"#,
            r#"{"a": 01}"#,
            "{\"a\": \"tab\there\"}",
            r#"{"a": 1,}"#,
            r#"{"a" 1}"#,
            r#"{"a": tru}"#,
            r#"{"a": 1} x"#,
            r#"{"a": "open"#,
            "",
        ] {
            assert_eq!(parse_value(text), None, "{text}");
        }
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(parse_value(&deep), None, "nesting deeper than 64");
        assert_eq!(parse_value(r#"{"a": 1, "a": 2}"#), Some(json!({"a": 2})), "the last of a repeated key");
        assert_eq!(parse_value("-7"), Some(json!(-7)));
    }
}
