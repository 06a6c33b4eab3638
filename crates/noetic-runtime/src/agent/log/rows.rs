//! One row per append, for stores that keep a session's log in a table: the row's text is the append's entries'
//! stored forms ([`super::encode`]) one per line, its position the first entry's. A JSON text written compactly
//! holds no line break, so a row of one entry (a store's older rows) reads the same. One row per append instead of
//! one per entry: a tool call's seven entries cost a database one row and one index entry instead of seven.

use std::time::SystemTime;

use super::{DecodeError, Entry, Record, StoreError, decode, encode_into};

/// The stored form of one append of session `key`: its entries, one per line, all stamped `at`; refused (naming
/// the entry) when one cannot be encoded.
pub fn encode_row(key: &str, entries: &[Entry], at: SystemTime) -> Result<String, StoreError> {
    let refused = |i: usize, why: String| StoreError::Refused {
        message: format!("session '{key}': entry {} of the append cannot be stored: {why}", i + 1),
    };
    // About what a tool call's entries take, so that the row rarely grows.
    let mut row = Vec::with_capacity(512 * entries.len());
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            row.push(b'\n');
        }
        let start = row.len();
        encode_into(entry, at, &mut row).map_err(|e| refused(i, e.to_string()))?;
        if row[start..].contains(&b'\n') {
            return Err(refused(i, "its stored form has a line break".into()));
        }
    }
    String::from_utf8(row).map_err(|e| refused(0, format!("its stored form is not UTF-8 ({e})")))
}

/// Reads rows (`pos`, text) of session `key` in position order — the first one the row holding the entry after
/// `after` —, keeping the entries after `after`, at most `limit`. A row whose first position does not follow the
/// previous row's last (rows that overlap or leave a gap), or an entry that does not read, is reported as corrupt at
/// its position; entries before `after` are not decoded.
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
        let mut at = pos;
        for line in text.split('\n') {
            if at > self.after {
                if self.records.len() == self.limit {
                    return Ok(false);
                }
                self.records.push(decode(at, line).map_err(|e| corrupt(at, e))?);
            }
            at += 1;
        }
        self.next = Some(at);
        Ok(self.records.len() < self.limit)
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
