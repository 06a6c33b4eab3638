//! One row per append, for stores that keep a session's log in a table: the row's text is the append's entries'
//! stored forms ([`super::encode`]) one per line, its position the first entry's. A JSON text written compactly
//! holds no line break, so a row of one entry (a store's older rows) reads the same. One row per append instead of
//! one per entry: a tool call's seven entries cost a database one row and one index entry instead of seven.
//!
//! A row says once what two of its entries both hold. A turn appends a call's result to the conversation
//! ([`Entry::Appended`]) and gives the same result to its core ([`Entry::Core`]) in one append, and likewise a model
//! response's items: the `core` line then leaves the result (or the items) out and names what it shares with the
//! last `appended` line before it (`"shared"`, entry version 2). A tool call's row on the bench's turns is 2,669 →
//! 1,895 bytes: less to encode, to write and to keep (and under the ~2 KB past which PostgreSQL compresses a row).

use std::sync::{Arc, LazyLock};
use std::time::SystemTime;

use super::entry::{Shared, decode_line, encode_line};
use super::{DecodeError, Entry, Record, StoreError};
use crate::model::{Item, ToolResult};
use crate::turn::Input;

/// The stored form of one append of session `key`: its entries, one per line, all stamped `at`; refused (naming
/// the entry) when one cannot be encoded.
pub fn encode_row(key: &str, entries: &[Entry], at: SystemTime) -> Result<String, StoreError> {
    let refused = |i: usize, why: String| StoreError::Refused {
        message: format!("session '{key}': entry {} of the append cannot be stored: {why}", i + 1),
    };
    // About what a tool call's entries take, so that the row rarely grows.
    let mut row = Vec::with_capacity(320 * entries.len());
    let mut appended: Option<&[Item]> = None;
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            row.push(b'\n');
        }
        let start = row.len();
        let written = match sharing(entry, appended) {
            Some((stripped, shared)) => encode_line(&stripped, Some(shared), at, &mut row),
            None => encode_line(entry, None, at, &mut row),
        };
        written.map_err(|e| refused(i, e.to_string()))?;
        if row[start..].contains(&b'\n') {
            return Err(refused(i, "its stored form has a line break".into()));
        }
        if let Entry::Appended { items, .. } = entry {
            appended = Some(items);
        }
    }
    String::from_utf8(row).map_err(|e| refused(0, format!("its stored form is not UTF-8 ({e})")))
}

/// The text a stripped tool outcome carries in place of the result's.
static LEFT_OUT: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

/// `entry` without what it shares with `appended` (the items of the row's last `appended` entry before it), and
/// what that is; `None` when it shares nothing.
fn sharing(entry: &Entry, appended: Option<&[Item]>) -> Option<(Entry, Shared)> {
    let (Entry::Core { turn, step, input }, Some(items)) = (entry, appended) else { return None };
    let (input, shared) = match input {
        Input::ToolDone(result) => {
            let at = items.iter().position(|item| matches!(item, Item::ToolResult(r) if r == result))?;
            let kept = ToolResult {
                call_id: result.call_id.clone(),
                content: LEFT_OUT.clone(),
                is_error: result.is_error,
                blocks: Vec::new(),
                structured: None,
            };
            (Input::ToolDone(kept), Shared::Item(u32::try_from(at).ok()?))
        }
        Input::Response(response) if !response.items.is_empty() && response.items == items => {
            let mut kept = (**response).clone();
            kept.items.clear();
            (Input::Response(Box::new(kept)), Shared::Items)
        }
        _ => return None,
    };
    Some((Entry::Core { turn: *turn, step: step.clone(), input }, shared))
}

/// Puts back into `entry` what it shares with `items` (the row's last `appended` entry before it).
fn restore(entry: &mut Entry, shared: Shared, items: &[Item]) -> Result<(), DecodeError> {
    let unreadable = |why: &str| DecodeError::Unreadable { message: format!("the entry's shared content: {why}") };
    match (entry, shared) {
        (Entry::Core { input: Input::ToolDone(result), .. }, Shared::Item(at)) => {
            match usize::try_from(at).ok().and_then(|at| items.get(at)) {
                Some(Item::ToolResult(whole)) if whole.call_id == result.call_id => {
                    *result = whole.clone();
                    Ok(())
                }
                Some(_) => Err(unreadable(&format!("item {at} of the appended entry is not this call's result"))),
                None => Err(unreadable(&format!("the appended entry has no item {at}"))),
            }
        }
        (Entry::Core { input: Input::Response(response), .. }, Shared::Items) if response.items.is_empty() => {
            response.items = items.to_vec();
            Ok(())
        }
        _ => Err(unreadable("it is not what a tool outcome or a model response shares")),
    }
}

/// Reads rows (`pos`, text) of session `key` in position order — the first one the row holding the entry after
/// `after` —, keeping the entries after `after`, at most `limit`. A row whose first position does not follow the
/// previous row's last (rows that overlap or leave a gap), or an entry that does not read, is reported as corrupt at
/// its position; entries before `after` are not decoded, unless an entry kept shares content with one of them.
#[derive(Debug)]
pub struct RowReader<'a> {
    key: &'a str,
    after: u64,
    limit: usize,
    next: Option<u64>,
    records: Vec<Record>,
}

impl<'a> RowReader<'a> {
    /// A reader of `key`'s entries after `after`, at most `limit`.
    pub fn new(key: &'a str, after: u64, limit: usize) -> RowReader<'a> {
        RowReader { key, after, limit, next: None, records: Vec::new() }
    }

    /// The entries kept.
    pub fn into_records(self) -> Vec<Record> {
        self.records
    }

    /// Takes the row at `pos`; false once `limit` entries are kept (the rows after it are not needed).
    pub fn take(&mut self, pos: u64, text: &str) -> Result<bool, StoreError> {
        let corrupt = |pos, source| StoreError::Corrupt { key: self.key.to_owned(), pos, source };
        if let Some(expected) = self.next
            && expected != pos
        {
            let message =
                format!("the row holding entries from {pos} on does not follow the one before (next is {expected})");
            return Err(corrupt(pos.min(expected), DecodeError::Unreadable { message }));
        }
        let first = self.records.len();
        // The row's lines before `after`, not decoded unless a line kept shares content with one of them.
        let mut skipped: Vec<&str> = Vec::new();
        let mut at = pos;
        for line in text.split('\n') {
            if at > self.after {
                if self.records.len() == self.limit {
                    return Ok(false);
                }
                let record = match decode_line(at, line) {
                    Ok((mut record, Some(shared))) => {
                        self.restore_shared(&mut record.entry, shared, first, &skipped, pos).map(|()| record)
                    }
                    Ok((record, None)) => Ok(record),
                    Err(e) => Err(e),
                };
                self.records.push(record.map_err(|e| corrupt(at, e))?);
            } else {
                skipped.push(line);
            }
            at += 1;
        }
        self.next = Some(at);
        Ok(self.records.len() < self.limit)
    }

    /// Puts back into `entry` what it shares with the last `appended` entry of the row so far: among the entries
    /// kept from it (those after `first`), else among its `skipped` lines (at `pos` on), read for this.
    fn restore_shared(
        &self,
        entry: &mut Entry,
        shared: Shared,
        first: usize,
        skipped: &[&str],
        pos: u64,
    ) -> Result<(), DecodeError> {
        fn appended(entry: &Entry) -> Option<&[Item]> {
            match entry {
                Entry::Appended { items, .. } => Some(items),
                _ => None,
            }
        }
        if let Some(items) = self.records[first..].iter().rev().find_map(|r| appended(&r.entry)) {
            return restore(entry, shared, items);
        }
        for (i, line) in skipped.iter().enumerate().rev() {
            // A line that shares content is no `appended` entry; any other is read whole.
            if let Ok((record, None)) = decode_line(pos + i as u64, line)
                && let Some(items) = appended(&record.entry)
            {
                return restore(entry, shared, items);
            }
        }
        Err(DecodeError::Unreadable {
            message: "it shares content, but no appended entry is before it in its row".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::time::UNIX_EPOCH;

    use super::*;

    fn stop(reason: &str) -> Entry {
        Entry::StopRequested { reason: reason.into() }
    }

    fn reasons(records: &[Record]) -> Vec<(u64, String)> {
        records
            .iter()
            .map(|r| match &r.entry {
                Entry::StopRequested { reason } => (r.pos, reason.clone()),
                other => (r.pos, format!("{other:?}")),
            })
            .collect()
    }

    /// A tool call's append as a turn makes it (the result joins, then reaches the core; the next response's
    /// items join, then the response reaches the core), with a second result that joined beside the first.
    fn tool_call_append() -> Vec<Entry> {
        use crate::agent::log::StepPath;
        use crate::model::ModelResponse;
        let step = StepPath("agent#0".into());
        let result = ToolResult::ok("c1", format!("src/config.rs:42: retry = 3\n{}", "y".repeat(300)));
        let other = ToolResult::error("c2", "denied");
        let response = ModelResponse::tool_calls([("c3", "search", serde_json::json!({"context": "x".repeat(300)}))]);
        let core = |input| Entry::Core { turn: 1, step: step.clone(), input };
        vec![
            Entry::Appended { turn: 1, items: vec![Item::ToolResult(other.clone()), Item::ToolResult(result.clone())] },
            core(Input::ToolDone(result)),
            core(Input::ToolDone(other)),
            Entry::Appended { turn: 1, items: response.items.clone() },
            core(Input::response(response)),
            Entry::ToolStarted { turn: 1, step, call_id: "c3".into(), tool: "search".into() },
        ]
    }

    fn shown(records: &[Record]) -> Vec<String> {
        records.iter().map(|r| serde_json::to_string(&r.entry).unwrap()).collect()
    }

    #[test]
    fn a_row_says_once_what_a_result_and_a_response_share_with_the_conversation_and_reads_back_whole() {
        let entries = tool_call_append();
        let row = encode_row("k", &entries, UNIX_EPOCH).unwrap();
        assert_eq!(row.matches(&"y".repeat(300)).count(), 1, "the result once: {row}");
        assert_eq!(row.matches(&"x".repeat(300)).count(), 1, "the call's arguments once: {row}");
        let lines: Vec<&str> = row.lines().collect();
        assert!(lines[1].starts_with(r#"{"v":2,"at_ms":0,"shared":{"item":1},"type":"core""#), "{}", lines[1]);
        assert!(lines[2].starts_with(r#"{"v":2,"at_ms":0,"shared":{"item":0},"type":"core""#), "{}", lines[2]);
        assert!(lines[4].starts_with(r#"{"v":2,"at_ms":0,"shared":"items","type":"core""#), "{}", lines[4]);
        assert!(lines[4].contains(r#""finish_reason":"tool_calls""#), "the rest of the response stays: {}", lines[4]);
        for line in [lines[0], lines[3], lines[5]] {
            assert!(line.starts_with(r#"{"v":1,"#), "an entry that shares nothing is written whole: {line}");
        }
        let written: Vec<String> = entries.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        for after in 0..entries.len() as u64 {
            for limit in 1..=entries.len() {
                let mut reader = RowReader::new("k", after, limit);
                reader.take(1, &row).unwrap();
                let from = after as usize;
                let want = &written[from..(from + limit).min(written.len())];
                assert_eq!(shown(&reader.into_records()), want, "after {after}, at most {limit}");
            }
        }
    }

    #[test]
    fn a_result_that_differs_from_what_joined_or_a_response_with_other_items_is_written_whole() {
        use crate::agent::log::StepPath;
        use crate::model::ModelResponse;
        let step = StepPath("agent#0".into());
        let joined = ToolResult::ok("c1", "joined");
        let entries = vec![
            Entry::Appended { turn: 1, items: vec![Item::ToolResult(joined.clone())] },
            Entry::Core { turn: 1, step: step.clone(), input: Input::ToolDone(ToolResult::ok("c1", "changed")) },
            Entry::Core { turn: 1, step, input: Input::response(ModelResponse::text("more than joined")) },
            Entry::Core { turn: 1, step: StepPath("agent#0".into()), input: Input::response(ModelResponse::default()) },
        ];
        let row = encode_row("k", &entries, UNIX_EPOCH).unwrap();
        assert!(!row.contains("shared"), "{row}");
        let mut reader = RowReader::new("k", 0, 10);
        reader.take(1, &row).unwrap();
        let written: Vec<String> = entries.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        assert_eq!(shown(&reader.into_records()), written);
    }

    #[test]
    fn a_line_that_shares_content_is_refused_on_its_own_and_corrupt_without_what_it_shares() {
        let row = encode_row("k", &tool_call_append(), UNIX_EPOCH).unwrap();
        let lines: Vec<&str> = row.lines().collect();
        let alone = super::super::decode(2, lines[1]).unwrap_err();
        assert!(alone.to_string().contains("read it with its row"), "{alone}");
        // The line without the `appended` line before it.
        let mut reader = RowReader::new("k", 0, 10);
        assert!(matches!(reader.take(2, lines[1]), Err(StoreError::Corrupt { pos: 2, .. })));
        // An index past the `appended` entry's items, and one naming another call's result.
        for (from, to) in
            [(r#""shared":{"item":1}"#, r#""shared":{"item":7}"#), (r#""shared":{"item":1}"#, r#""shared":{"item":0}"#)]
        {
            let damaged = format!("{}\n{}", lines[0], lines[1].replace(from, to));
            let mut reader = RowReader::new("k", 0, 10);
            assert!(matches!(reader.take(1, &damaged), Err(StoreError::Corrupt { pos: 2, .. })), "{to}");
        }
        // Version 1 never shared anything.
        let old = format!("{}\n{}", lines[0], lines[1].replace(r#"{"v":2,"#, r#"{"v":1,"#));
        let mut reader = RowReader::new("k", 0, 10);
        assert!(matches!(reader.take(1, &old), Err(StoreError::Corrupt { pos: 2, .. })));
    }

    #[test]
    fn a_row_holds_its_entries_one_per_line_and_reads_back_from_any_position() {
        let row = encode_row("k", &[stop("a"), stop("b"), stop("c")], UNIX_EPOCH).unwrap();
        assert_eq!(row.lines().count(), 3);
        let single = encode_row("k", &[stop("d")], UNIX_EPOCH).unwrap();
        for (after, limit, want) in
            [(0, 10, vec!["a", "b", "c", "d"]), (1, 10, vec!["b", "c", "d"]), (2, 1, vec!["c"]), (3, 5, vec!["d"])]
        {
            let mut reader = RowReader::new("k", after, limit);
            let rows = [(1, row.as_str()), (4, single.as_str())];
            for (pos, text) in rows.into_iter().filter(|(pos, text)| pos + text.lines().count() as u64 > after) {
                if !reader.take(pos, text).unwrap() {
                    break;
                }
            }
            let got: Vec<String> = reasons(&reader.into_records()).into_iter().map(|(_, r)| r).collect();
            assert_eq!(got, want, "after {after}, at most {limit}");
        }
    }

    #[test]
    fn a_row_that_does_not_start_where_the_last_one_ended_is_corrupt_at_the_first_position_missing_or_doubled() {
        let row = encode_row("k", &[stop("a"), stop("b")], UNIX_EPOCH).unwrap();
        let mut gap = RowReader::new("k", 0, 10);
        assert!(gap.take(1, &row).unwrap());
        assert!(matches!(gap.take(4, &row), Err(StoreError::Corrupt { pos: 3, .. })));
        let mut overlap = RowReader::new("k", 0, 10);
        assert!(overlap.take(1, &row).unwrap());
        assert!(matches!(overlap.take(2, &row), Err(StoreError::Corrupt { pos: 2, .. })));
    }

    #[test]
    fn a_damaged_line_is_corrupt_at_its_own_position_and_lines_before_the_start_are_not_read() {
        let row = format!("{}\nnot json\n{}", encode_row("k", &[stop("a")], UNIX_EPOCH).unwrap(), {
            encode_row("k", &[stop("c")], UNIX_EPOCH).unwrap()
        });
        let mut all = RowReader::new("k", 0, 10);
        assert!(matches!(all.take(1, &row), Err(StoreError::Corrupt { pos: 2, .. })));
        let mut after = RowReader::new("k", 2, 10);
        assert!(after.take(1, &row).unwrap());
        assert_eq!(reasons(&after.into_records()), [(3, "c".to_owned())]);
    }

    #[test]
    fn a_line_break_inside_a_value_is_escaped_so_each_entry_keeps_its_line() {
        let row = encode_row("k", &[stop("a"), stop("line\nbreak"), stop("c")], UNIX_EPOCH).unwrap();
        assert_eq!(row.lines().count(), 3);
        let mut reader = RowReader::new("k", 0, 10);
        assert!(reader.take(1, &row).unwrap());
        let got = reasons(&reader.into_records());
        assert_eq!(got, [(1, "a".to_owned()), (2, "line\nbreak".to_owned()), (3, "c".to_owned())]);
    }
}
