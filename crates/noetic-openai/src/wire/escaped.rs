//! Tool-call arguments as the server escaped them in an answer, kept until the call is sent back.
//!
//! A call's arguments arrive as a JSON string inside the answer (`"arguments":"{\"path\":…}"`) and go back the same way
//! in the next request's history. Where the server escaped them as the encoder would (the escapes `serde_json` writes:
//! no `\/`, no `\u`), the answer's bytes are the bytes the request needs: the parser keeps them — in the buffer it
//! unescaped the text into, which would otherwise be freed, so keeping them allocates nothing — and the encoder copies
//! them instead of escaping the text again (the suite's real path, arguments of about 400 bytes with a dozen quotes:
//! about 1,000 instructions a call). Entries are found by the arguments' shared string (its address; the entry keeps
//! the string alive, so no other text can take that address), and taken when used: a call goes back once, after which
//! its message is part of the encoded history. Bounded: when full, everything kept is dropped (answers whose calls were
//! never sent back — a cancelled turn — would otherwise stay), and calls then noted or sent are escaped as before.

use std::sync::{Arc, Mutex, PoisonError};

use noetic_http::IdMap;

/// Most answers' arguments kept at once (about the tool calls in flight between an answer and the next request).
pub(crate) const ESCAPED_ENTRIES: usize = 4096;

/// Most bytes kept at once (the buffers' capacity, which may be the rest of an answer's body).
pub(crate) const ESCAPED_BYTES: usize = 8 << 20;

/// See the module docs. Not a `noetic_http::LogCache`: that one finds its least recently used entry by walking all
/// of them, fine for the logs it keeps, but entries here that are never taken (a cancelled turn's) fill the map for
/// good, and every note would then pay that walk; dropping everything at once costs nothing per note.
#[derive(Default)]
pub(crate) struct EscapedArguments {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_text: IdMap<(Arc<str>, String)>,
    bytes: usize,
}

impl std::fmt::Debug for EscapedArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EscapedArguments").field("kept", &self.len()).finish()
    }
}

/// The key of a shared string: its address past the alignment every `Arc<str>`'s text has (so the low bits,
/// which pick the hash bucket, vary).
fn key(text: &Arc<str>) -> u64 {
    (Arc::as_ptr(text).cast::<u8>() as usize as u64) >> 3
}

/// True when `escaped` (a JSON string's text between its quotes, valid and without `\u`) is surely what the encoder
/// writes for its unescaped text: every escape it may hold but `\/` is one `serde_json` writes too. (A `/` after
/// an escaped backslash counts as `\/` too: such arguments are escaped again, as before.)
pub(crate) fn escaped_as_encoded(escaped: &str) -> bool {
    let bytes = escaped.as_bytes();
    memchr::memchr_iter(b'/', bytes).all(|at| at == 0 || bytes[at - 1] != b'\\')
}

impl EscapedArguments {
    /// Keeps `escaped` (the text between the quotes) as `arguments`' wire form; `buffer` is the buffer to keep it
    /// in (its capacity counts against the bound).
    pub(crate) fn note(&self, arguments: &Arc<str>, escaped: &str, mut buffer: String) {
        if buffer.capacity().max(escaped.len()) > ESCAPED_BYTES {
            return;
        }
        buffer.clear();
        buffer.push_str(escaped);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.by_text.len() >= ESCAPED_ENTRIES || kept.bytes + buffer.capacity() > ESCAPED_BYTES {
            kept.by_text.clear();
            kept.bytes = 0;
        }
        kept.bytes += buffer.capacity();
        if let Some((_, old)) = kept.by_text.insert(key(arguments), (arguments.clone(), buffer)) {
            kept.bytes -= old.capacity();
        }
    }

    /// `arguments`' wire form when one was kept for this very string, taken.
    pub(crate) fn take(&self, arguments: &Arc<str>) -> Option<String> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.by_text.is_empty() {
            return None;
        }
        let (text, escaped) = kept.by_text.remove(&key(arguments))?;
        kept.bytes -= escaped.capacity();
        // Another string at the same address cannot be: the entry held this one alive. Checked all the same.
        Arc::ptr_eq(&text, arguments).then_some(escaped)
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).by_text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_wire_form_is_found_by_its_very_string_once_and_never_by_equal_text_elsewhere() {
        let kept = EscapedArguments::default();
        let arguments: Arc<str> = Arc::from(r#"{"a":"b"}"#);
        kept.note(&arguments, r#"{\"a\":\"b\"}"#, String::with_capacity(64));
        let equal: Arc<str> = Arc::from(r#"{"a":"b"}"#);
        assert_eq!(kept.take(&equal), None, "equal text at another address is another call's");
        assert_eq!(kept.take(&arguments).as_deref(), Some(r#"{\"a\":\"b\"}"#));
        assert_eq!(kept.take(&arguments), None, "taken when used");
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn the_store_stays_within_its_entries_and_bytes() {
        let kept = EscapedArguments::default();
        let mut strings = Vec::new();
        for i in 0..ESCAPED_ENTRIES + 10 {
            let arguments: Arc<str> = Arc::from(format!("{{\"i\":{i}}}"));
            kept.note(&arguments, &format!("{{\\\"i\\\":{i}}}"), String::new());
            strings.push(arguments);
            assert!(kept.len() <= ESCAPED_ENTRIES);
        }
        assert!(kept.take(strings.last().unwrap_or(&Arc::from(""))).is_some(), "the last one noted is kept");
        let big: Arc<str> = Arc::from("{}");
        kept.note(&big, "{}", String::with_capacity(ESCAPED_BYTES / 2 + 1));
        let bigger: Arc<str> = Arc::from("{}");
        kept.note(&bigger, "{}", String::with_capacity(ESCAPED_BYTES / 2 + 1));
        assert_eq!(kept.len(), 1, "the second half of the bytes bound dropped what was kept");
        assert!(kept.take(&bigger).is_some() && kept.take(&big).is_none());
        let huge: Arc<str> = Arc::from("{}");
        kept.note(&huge, "{}", String::with_capacity(ESCAPED_BYTES + 1));
        assert!(kept.take(&huge).is_none(), "a buffer larger than the whole bound is not kept");
    }

    #[test]
    fn only_escapes_the_encoder_writes_itself_count_as_encoded() {
        assert!(escaped_as_encoded(r#"{\"p\":\"a\\b\nc\"}"#));
        assert!(!escaped_as_encoded(r#"{\"p\":\"a\/b\"}"#), "serde writes '/' unescaped");
        assert!(!escaped_as_encoded(r#"\/"#) && escaped_as_encoded("/a/b/") && escaped_as_encoded(""));
    }
}
