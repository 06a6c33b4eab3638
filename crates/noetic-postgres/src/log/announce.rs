//! What a notification on `noetic_log` says: which sessions an append statement moved on, and to where.
//!
//! A statement announces all the sessions it wrote in as few notifications as their payloads fit (PostgreSQL
//! refuses a payload of 8000 bytes or more): `<id>\t+` — the writing store object's id and a mark — then, per
//! session, `\t<last>\t<key length in bytes>\t<key>`. The length lets a key hold any character but NUL (a tab, a
//! line break). One notification per session cost the server a queue entry and a message to every listener, and
//! each listener a message to parse, for each append of a batch of hundreds; now a batch costs a few.
//!
//! A payload without the mark is the one-session form of builds before it, `<id>\t<last>\t<key>`, still read.

/// The most bytes of one payload: under PostgreSQL's limit of 8000 with room to spare.
pub(crate) const PAYLOAD_BYTES: usize = 7_900;

/// The payloads announcing `sessions` (each key with its new last position), written by the store object `id`: as
/// few as hold them within [`PAYLOAD_BYTES`] each (a key is at most [`super::MAX_KEY_BYTES`], so one always fits).
pub(crate) fn payloads<'a>(id: &str, sessions: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut part = String::new();
    for (key, last) in sessions {
        part.clear();
        push_session(&mut part, key, last);
        if !current.is_empty() && current.len() + part.len() > PAYLOAD_BYTES {
            out.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            push_header(&mut current, id);
        }
        current.push_str(&part);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The payload announcing one session (what [`payloads`] makes of it alone).
pub(crate) fn payload(id: &str, key: &str, last: u64) -> String {
    let mut out = String::new();
    push_header(&mut out, id);
    push_session(&mut out, key, last);
    out
}

fn push_header(out: &mut String, id: &str) {
    out.push_str(id);
    out.push_str("\t+");
}

fn push_session(out: &mut String, key: &str, last: u64) {
    use std::fmt::Write as _;
    // Writing to a `String` cannot fail.
    let _ = write!(out, "\t{last}\t{}\t{key}", key.len());
}

/// What a payload says: the writer's id and each session with its new last position; `None` when it is not a
/// payload of either form (it is then ignored).
pub(crate) fn parse(payload: &str) -> Option<(&str, Vec<(&str, u64)>)> {
    let (id, rest) = payload.split_once('\t')?;
    let Some(mut rest) = rest.strip_prefix('+') else {
        // The one-session form.
        let (last, key) = rest.split_once('\t')?;
        return Some((id, vec![(key, last.parse().ok()?)]));
    };
    let mut sessions = Vec::new();
    while !rest.is_empty() {
        let (last, after) = rest.strip_prefix('\t')?.split_once('\t')?;
        let (length, after) = after.split_once('\t')?;
        let length: usize = length.parse().ok()?;
        let key = after.get(..length)?;
        sessions.push((key, last.parse().ok()?));
        rest = &after[length..];
    }
    Some((id, sessions))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sessions_read_back_as_written_whatever_their_keys_hold() {
        let keys = ["plain", "tab\there", "line\nbreak", "\t+\t3\t", "ünïcödé", ""];
        let sessions: Vec<(&str, u64)> = keys.iter().enumerate().map(|(i, k)| (*k, i as u64 * 1000 + 7)).collect();
        let payloads = payloads("writer-1", sessions.iter().copied());
        assert_eq!(payloads.len(), 1);
        let (id, read) = parse(&payloads[0]).unwrap();
        assert_eq!(id, "writer-1");
        assert_eq!(read, sessions);
    }

    #[test]
    fn many_sessions_are_split_into_payloads_under_the_limit_in_order() {
        let keys: Vec<String> = (0..3000).map(|i| format!("bench-rt-{i:05}-{}", "k".repeat(i % 40))).collect();
        let sessions: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 42)).collect();
        let split = payloads("w", sessions.iter().copied());
        assert!(split.len() > 1, "3000 sessions do not fit one payload");
        assert!(split.iter().all(|p| p.len() <= PAYLOAD_BYTES));
        let read: Vec<(&str, u64)> = split.iter().flat_map(|p| parse(p).unwrap().1).collect();
        assert_eq!(read, sessions);
        // The largest key fits a payload alone.
        let long = "x".repeat(super::super::MAX_KEY_BYTES);
        let one = payloads("some-writer-id", [(long.as_str(), u64::MAX)]);
        assert!(one.len() == 1 && one[0].len() <= PAYLOAD_BYTES);
        assert_eq!(parse(&one[0]).unwrap().1, vec![(long.as_str(), u64::MAX)]);
    }

    #[test]
    fn the_one_session_form_of_earlier_builds_is_read() {
        assert_eq!(parse("w9\t12\tkey\twith tab"), Some(("w9", vec![("key\twith tab", 12)])));
    }

    #[test]
    fn a_payload_of_neither_form_is_ignored() {
        for bad in ["", "no tabs", "w\tnot-a-number\tkey", "w\t+\t5\t10\tshort", "w\t+\t5\tx\tkey", "w\t+5\t1\tk"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        // A length that cuts a character in two.
        assert_eq!(parse("w\t+\t5\t1\tü"), None);
    }

    #[test]
    fn one_sessions_payload_is_what_the_many_form_makes_of_it_alone() {
        let key = "k\tey";
        assert_eq!(vec![payload("w", key, 9)], payloads("w", [(key, 9)]));
        assert_eq!(parse(&payload("w", key, 9)), Some(("w", vec![(key, 9)])));
    }

    #[test]
    fn no_sessions_make_no_payload() {
        assert!(payloads("w", std::iter::empty()).is_empty());
    }
}
