//! The usual whole answer read by hand, in one pass over the text: keys compared in place, strings without
//! escapes borrowed, an escaped string (a call's arguments) unescaped into one allocation. Serde's
//! generic machinery spent about 15,000 instructions on a 500-byte tool-call answer, most of it per key and per
//! string. The scan takes only what it is sure of: anything it does not know to read exactly as the typed view
//! reads it — a `\u` escape, a number that is not a plain whole number where one is read (a count, an index), a
//! cost, a duplicated field, a streamed `delta`, an error field, content parts, nesting deeper than
//! [`MAX_DEPTH`], invalid JSON — gives up, and the typed view decides as before. So wherever it answers, it answers
//! what the typed view would.

use std::borrow::Cow;

use noetic_core::json::{peek_past_ws, skip_ws, unescape_rest};
use noetic_http::find_json_escape;

use super::{Answer, Call, Choice, Content, Count, Details, First, Function, Message, WireUsage};

/// Deeper values are left to the typed view.
const MAX_DEPTH: usize = 64;

/// An escaped string is unescaped into room for the rest of the body when the rest is at most this long.
const SMALL_REST: usize = 4096;

/// The whole answer `text` as the typed view reads it, or `None` where the scan gives up.
pub(super) fn answer(text: &str) -> Option<Answer<'_>> {
    let mut scan = Scan { text, bytes: text.as_bytes(), at: 0 };
    let mut answer = Answer { error: None, object: None, choices: None, usage: None, model: None };
    let mut seen = [false; 5];
    scan.object(0, |scan, key| {
        match key {
            // `null` is no error; an error object is the tolerant reading's to tell.
            "error" => scan.field(&mut seen[0], Scan::null)?,
            "object" => {
                answer.object =
                    scan.field(&mut seen[1], |scan| scan.optional(|scan| scan.string().filter(|o| o != "error")))?
            }
            "choices" => {
                answer.choices =
                    scan.field(&mut seen[2], |scan| scan.optional(|scan| scan.first(1, Scan::choice).map(First)))?
            }
            "usage" => answer.usage = scan.field(&mut seen[3], |scan| scan.optional(|scan| scan.usage(1)))?,
            "model" => answer.model = scan.field(&mut seen[4], Scan::text_ref)?,
            _ => scan.skip(1)?,
        }
        Some(())
    })?;
    scan.ws();
    (scan.at == scan.bytes.len()).then_some(answer)
}

/// True when `text` is surely one JSON value (whitespace around it allowed); `false` when the scan is not sure —
/// it may still be JSON (a `\u` escape, deep nesting), for `serde_json` to tell.
pub(in crate::wire) fn surely_json(text: &str) -> bool {
    let mut scan = Scan { text, bytes: text.as_bytes(), at: 0 };
    scan.skip(0).is_some() && {
        scan.ws();
        scan.at == scan.bytes.len()
    }
}

/// A string the answer keeps: no more room than its text (an unescaped one was given room for the rest of the body;
/// it shrinks in place).
fn kept(text: Cow<'_, str>) -> String {
    let mut text = text.into_owned();
    text.shrink_to_fit();
    text
}

/// Marks a field seen; `None` the second time (a duplicated field is the typed view's to refuse).
fn once(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        self.at = skip_ws(self.bytes, self.at);
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        peek_past_ws(self.bytes, &mut self.at)
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.ws();
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    fn null(&mut self) -> Option<()> {
        self.literal("null")
    }

    /// A known field's value read by `read`; `None` (give up) for a field seen before: a duplicated field is the
    /// typed view's to refuse.
    fn field<T>(&mut self, seen: &mut bool, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        once(seen)?;
        read(self)
    }

    /// A string or `null`, owned.
    fn text(&mut self) -> Option<Option<String>> {
        self.optional(|scan| scan.string().map(kept))
    }

    /// A string or `null`, borrowed from the answer when it holds no escape.
    fn text_ref(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.optional(Scan::string)
    }

    /// A count or `null`.
    fn count(&mut self) -> Option<Option<Count>> {
        self.optional(|scan| scan.whole().map(Count))
    }

    /// `null` as `None`, else what `read` reads; `None` (give up) when that fails.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        read(self).map(Some)
    }

    /// A string: borrowed when it holds no escape, else unescaped into one allocation (of at least its size: see
    /// [`kept`]); `None` for a `\u` escape or a control character.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.at;
        let at = find_json_escape(self.bytes, start)?;
        if self.bytes[at] == b'"' {
            self.at = at + 1;
            return Some(Cow::Borrowed(&self.text[start..at]));
        }
        // The text is at most the rest of the body: sized by that when the rest is small (one pass, trimmed
        // after), else by where the string ends (found by a pass of its own).
        let rest = self.bytes.len() - start;
        let mut text = String::with_capacity(if rest <= SMALL_REST { rest } else { self.string_end(at)? - start });
        self.at = unescape_rest(self.text, start, at, &mut text)? + 1;
        // Room for the rest of the body, maybe: what keeps the text shrinks it ([`kept`]); what copies it (a call's
        // strings become shared ones) need not.
        Some(Cow::Owned(text))
    }

    /// Where the string whose first escape is at `at` ends (its closing quote).
    fn string_end(&self, mut at: usize) -> Option<usize> {
        while self.bytes[at] == b'\\' {
            at = find_json_escape(self.bytes, at + 2)?;
        }
        (self.bytes[at] == b'"').then_some(at)
    }

    /// A key: a string without escapes.
    fn key(&mut self) -> Option<&'a str> {
        match self.string()? {
            Cow::Borrowed(key) => Some(key),
            Cow::Owned(_) => None,
        }
    }

    /// An object, each member's key handed to `member`, which reads the value.
    fn object(&mut self, depth: usize, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array's first element read by `read`, the others checked and passed over; `None` inside for an empty
    /// array.
    fn first<T>(&mut self, depth: usize, read: impl FnOnce(&mut Self, usize) -> Option<T>) -> Option<Option<T>> {
        let (mut read, mut value) = (Some(read), None);
        self.elements(depth, |scan, depth| match read.take() {
            Some(read) => {
                value = Some(read(scan, depth)?);
                Some(())
            }
            None => scan.skip(depth),
        })?;
        Some(value)
    }

    /// An array, each element handed to `element`, which reads it.
    fn elements(&mut self, depth: usize, mut element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            element(self, depth + 1)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A whole number without sign, fraction or exponent that fits a `u64`.
    fn whole(&mut self) -> Option<u64> {
        let start = self.at;
        // Summed as read (one pass, no second parse); past `u64::MAX` the scan gives up, as the parse would.
        let mut value: u64 = 0;
        while let Some(&digit @ b'0'..=b'9') = self.bytes.get(self.at) {
            value = value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.bytes[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes.get(self.at) {
            return None;
        }
        Some(value)
    }

    /// Any value, checked and passed over (strings only without `\u`).
    fn skip(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth, |scan, _| scan.skip(depth + 1)),
            b'[' => self.elements(depth, |scan, depth| scan.skip(depth)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.null(),
            _ => self.number(),
        }
    }

    /// A number passed over: JSON's grammar, as the typed view checks an ignored one (no range).
    fn number(&mut self) -> Option<()> {
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.bytes.get(self.at).filter(|b| b.is_ascii_digit())?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.bytes.get(self.at).filter(|b| b.is_ascii_digit())?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn choice(&mut self, depth: usize) -> Option<Choice<'a>> {
        let mut choice = Choice { message: None, delta: None, finish_reason: None };
        let mut seen = [false; 2];
        self.object(depth, |scan, key| {
            match key {
                "message" => {
                    choice.message = scan.field(&mut seen[0], |scan| scan.optional(|scan| scan.message(depth + 1)))?
                }
                // A streamed chunk's: left to the typed view.
                "delta" => return None,
                "finish_reason" => {
                    choice.finish_reason = scan.field(&mut seen[1], |scan| scan.optional(Scan::string))?
                }
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(choice)
    }

    fn message(&mut self, depth: usize) -> Option<Message<'a>> {
        let mut message = Message { content: None, refusal: None, tool_calls: None };
        let mut seen = [false; 3];
        self.object(depth, |scan, key| {
            match key {
                // Content parts (an array) are the typed view's to join.
                "content" => {
                    message.content =
                        scan.field(&mut seen[0], |scan| scan.optional(|scan| scan.string().map(|c| Content(kept(c)))))?
                }
                "refusal" => message.refusal = scan.field(&mut seen[1], Scan::text)?,
                "tool_calls" => {
                    message.tool_calls = scan.field(&mut seen[2], |scan| scan.optional(|scan| scan.calls(depth + 1)))?
                }
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(message)
    }

    fn calls(&mut self, depth: usize) -> Option<Vec<Call<'a>>> {
        let mut calls = Vec::new();
        self.elements(depth, |scan, depth| {
            calls.push(scan.call(depth)?);
            Some(())
        })?;
        Some(calls)
    }

    fn call(&mut self, depth: usize) -> Option<Call<'a>> {
        let mut call = Call { index: None, id: None, function: None };
        let mut seen = [false; 3];
        self.object(depth, |scan, key| {
            match key {
                "index" => call.index = scan.field(&mut seen[0], |scan| scan.optional(Scan::whole))?,
                "id" => call.id = scan.field(&mut seen[1], Scan::text_ref)?,
                "function" => {
                    call.function = scan.field(&mut seen[2], |scan| scan.optional(|scan| scan.function(depth + 1)))?
                }
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(call)
    }

    fn function(&mut self, depth: usize) -> Option<Function<'a>> {
        let mut function = Function { name: None, arguments: None, escaped: None };
        let mut seen = [false; 2];
        self.object(depth, |scan, key| {
            match key {
                "name" => function.name = scan.field(&mut seen[0], Scan::text_ref)?,
                // Arguments sent as an object are the typed view's to refuse.
                "arguments" => {
                    scan.ws();
                    let open = scan.at;
                    function.arguments = scan.field(&mut seen[1], Scan::text_ref)?;
                    if let Some(Cow::Owned(_)) = function.arguments {
                        // Between the quotes: the string was read, so both lie where they were found.
                        function.escaped = scan.text.get(open + 1..scan.at - 1);
                    }
                }
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(function)
    }

    fn usage(&mut self, depth: usize) -> Option<WireUsage> {
        let mut usage =
            WireUsage { prompt_tokens: None, completion_tokens: None, prompt_tokens_details: None, cost: None };
        let mut seen = [false; 4];
        self.object(depth, |scan, key| {
            match key {
                "prompt_tokens" => usage.prompt_tokens = scan.field(&mut seen[0], Scan::count)?,
                "completion_tokens" => usage.completion_tokens = scan.field(&mut seen[1], Scan::count)?,
                "prompt_tokens_details" => {
                    usage.prompt_tokens_details =
                        scan.field(&mut seen[2], |scan| scan.optional(|scan| scan.details(depth + 1)))?
                }
                // A cost is a float: the typed view reads it.
                "cost" => scan.field(&mut seen[3], Scan::null)?,
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(usage)
    }

    fn details(&mut self, depth: usize) -> Option<Details> {
        let mut details = Details { cached_tokens: None };
        let mut seen = false;
        self.object(depth, |scan, key| {
            match key {
                "cached_tokens" => details.cached_tokens = scan.field(&mut seen, Scan::count)?,
                _ => scan.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(details)
    }
}
