//! The SSE framer against the WHATWG event-stream rules, cut at every possible place.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use noetic_http::{SseError, SseEvent, SseFramer, SseStreamError, sse_events};
use proptest::prelude::*;

fn event(kind: &str, data: &str, id: &str) -> SseEvent {
    SseEvent { event: kind.into(), data: data.into(), id: id.into() }
}

fn message(data: &str) -> SseEvent {
    event("message", data, "")
}

/// Every event the framer gives for `chunks`, in order.
fn frame(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let (events, error) = frame_limited(chunks, usize::MAX);
    assert_eq!(error, None);
    events
}

/// The events a framer limited to `max` gives for `chunks`, and the error it stopped with.
fn frame_limited(chunks: &[&[u8]], max: usize) -> (Vec<SseEvent>, Option<SseError>) {
    let mut framer = SseFramer::with_max_event_bytes(max);
    let mut events = Vec::new();
    for chunk in chunks {
        if let Err(e) = framer.push(chunk, &mut events) {
            return (events, Some(e));
        }
    }
    (events, None)
}

fn whole(text: &str) -> Vec<SseEvent> {
    frame(&[text.as_bytes()])
}

#[test]
fn data_lines_are_joined_with_newlines_and_a_blank_line_dispatches() {
    assert_eq!(whole("data: one\ndata: two\n\ndata: three\n\n"), vec![message("one\ntwo"), message("three")]);
}

#[test]
fn lf_crlf_and_cr_line_endings_are_all_line_ends() {
    let expected = vec![message("a\nb"), message("c")];
    assert_eq!(whole("data: a\ndata: b\n\ndata: c\n\n"), expected);
    assert_eq!(whole("data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"), expected);
    assert_eq!(whole("data: a\rdata: b\r\rdata: c\r\r"), expected);
    assert_eq!(whole("data: a\rdata: b\n\r\ndata: c\r\n\r"), expected, "mixed in one stream");
}

#[test]
fn a_cr_ending_one_chunk_and_an_lf_starting_the_next_are_one_line_end() {
    // Were the LF taken as a second line end, "a" would be dispatched alone before "b" arrives.
    assert_eq!(frame(&[b"data: a\r", b"\ndata: b\r\n\r\n"]), vec![message("a\nb")]);
    assert_eq!(
        frame(&[b"data: a\r", b"", b"\ndata: b\r", b"\n\r", b"\n"]),
        vec![message("a\nb")],
        "empty chunks between"
    );
    assert_eq!(frame(&[b"data: a\r", b"data: b\r\r"]), vec![message("a\nb")], "a CR then a non-LF");
}

#[test]
fn comments_are_ignored_and_an_event_without_data_is_not_dispatched() {
    assert_eq!(whole(": keep-alive\n\n:\n\ndata: x\n: inside\n\n"), vec![message("x")]);
    assert_eq!(whole("event: ping\n\ndata: y\n\n"), vec![message("y")], "the event type resets at a blank line");
    assert!(whole("id: 1\nretry: 5\n\n").is_empty());
}

#[test]
fn event_types_ids_and_field_syntax_follow_the_standard() {
    assert_eq!(whole("event: add\ndata: 1\n\n"), vec![event("add", "1", "")]);
    // One leading space is stripped from a value, no more; a line without a colon is a field with an empty value.
    assert_eq!(whole("data:x\ndata:  y\ndata\n\n"), vec![message("x\n y\n")]);
    assert_eq!(whole("data\n\n"), vec![message("")], "an empty data field still dispatches");
    // The id persists to later events; an id containing NUL is ignored; unknown fields are ignored.
    assert_eq!(
        whole("id: 7\ndata: a\n\ndata: b\n\nid: x\0y\nfoo: bar\ndata: c\n\nid\ndata: d\n\n"),
        vec![event("message", "a", "7"), event("message", "b", "7"), event("message", "c", "7"), message("d")]
    );
}

#[test]
fn retry_takes_digits_only() {
    let mut framer = SseFramer::new();
    let mut events = Vec::new();
    framer.push(b"retry: 1500\n\n", &mut events).unwrap();
    assert_eq!(framer.retry(), Some(Duration::from_millis(1500)));
    framer.push(b"retry: 2s\nretry: -1\nretry:\nretry: 99999999999999999999999\n\n", &mut events).unwrap();
    assert_eq!(framer.retry(), Some(Duration::from_millis(1500)), "invalid values leave it unchanged");
    assert!(events.is_empty());
}

#[test]
fn a_leading_bom_is_skipped_even_when_split_and_a_later_one_is_not() {
    assert_eq!(whole("\u{feff}data: a\n\n"), vec![message("a")]);
    assert_eq!(frame(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]), vec![message("a")]);
    // Only one BOM is skipped: the second one makes the field name unknown.
    assert!(whole("\u{feff}\u{feff}data: a\n\n").is_empty());
    assert_eq!(whole("data: a\n\n\u{feff}data: b\n\n"), vec![message("a")]);
    assert_eq!(frame(&[b"\xEF\xBB", b"X\n\n"]), Vec::<SseEvent>::new(), "a partial BOM is data, not skipped");
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    assert_eq!(frame(&[b"data: a\xFFb\n\n"]), vec![message("a\u{fffd}b")]);
    // A multi-byte character cut across chunks survives.
    let text = "data: h\u{e9}\u{1f600}\n\n".as_bytes();
    for cut in 0..=text.len() {
        assert_eq!(frame(&[&text[..cut], &text[cut..]]), vec![message("h\u{e9}\u{1f600}")], "cut at {cut}");
    }
}

#[test]
fn a_chunk_boundary_at_every_position_or_pair_of_positions_gives_the_same_events() {
    let text = "\u{feff}: hi\r\nevent: e\rid: 4\ndata: a\r\ndata:\u{e9}\n\r\ndata: b\r\r".as_bytes();
    let expected = vec![event("e", "a\n\u{e9}", "4"), event("message", "b", "4")];
    assert_eq!(frame(&[text]), expected);
    for i in 0..=text.len() {
        for j in i..=text.len() {
            assert_eq!(frame(&[&text[..i], &text[i..j], &text[j..]]), expected, "cut at {i} and {j}");
        }
    }
    let bytes: Vec<&[u8]> = text.chunks(1).collect();
    assert_eq!(frame(&bytes), expected);
}

#[test]
fn an_event_over_the_limit_is_a_typed_error_whatever_the_chunking() {
    let too_large = Some(SseError::EventTooLarge { limit: 16 });
    // A line counts as received, field name included: 16 bytes pass, 17 do not, whole or byte by byte.
    let at_limit = b"data: 0123456789\n\n";
    let over = b"data: 0123456789a\n\n";
    let one_by_one = |text: &'static [u8]| text.chunks(1).collect::<Vec<_>>();
    assert_eq!(frame_limited(&[at_limit], 16), (vec![message("0123456789")], None));
    assert_eq!(frame_limited(&one_by_one(at_limit), 16), (vec![message("0123456789")], None));
    assert_eq!(frame_limited(&[over], 16), (vec![], too_large.clone()));
    assert_eq!(frame_limited(&one_by_one(over), 16), (vec![], too_large.clone()));
    // The data so far counts with the next line; a new event starts the count afresh.
    assert_eq!(frame_limited(&[b"data: 01234\ndata: 012345678\n\n"], 16), (vec![], too_large.clone()));
    let two = b"data: 0123456789\n\ndata: 0123456789\n\n";
    assert_eq!(frame_limited(&[two], 16).0.len(), 2);
    // Events completed before the error are kept; the framer is spent afterwards.
    let mut framer = SseFramer::with_max_event_bytes(16);
    let mut events = Vec::new();
    assert_eq!(framer.push(b"data: a\n\ndata: 0123456789", &mut events), Ok(()), "16 bytes still being read");
    assert_eq!(framer.push(b"abc", &mut events).err(), too_large, "an endless line cannot grow memory");
    assert_eq!(framer.push(b"\n\n", &mut events).err(), too_large);
    assert_eq!(events, vec![message("a")]);
    assert_eq!(
        SseError::EventTooLarge { limit: 16 }.to_string(),
        "a server-sent event is larger than the limit of 16 bytes"
    );
}

#[test]
fn a_large_event_in_small_chunks_frames_whole() {
    let mut text = b"data: ".to_vec();
    text.extend(std::iter::repeat_n(b'x', 100_000));
    text.extend_from_slice(b"\n\n");
    let chunks: Vec<&[u8]> = text.chunks(16).collect();
    let events = frame(&chunks);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data.len(), 100_000);
}

#[test]
fn the_event_stream_ends_at_the_first_error_and_drops_an_unterminated_last_event() {
    let chunks = futures::stream::iter([Ok("data: a\n\ndata: b\n\ndata: never"), Err("reset"), Ok("\n\n")]);
    let got: Vec<_> = futures::executor::block_on(sse_events(chunks, 1024).collect());
    assert_eq!(got, vec![Ok(message("a")), Ok(message("b")), Err(SseStreamError::Transport("reset"))]);
    let unterminated = futures::stream::iter([Ok::<_, String>("data: a\n\ndata: b\n")]);
    let got: Vec<_> = futures::executor::block_on(sse_events(unterminated, 1024).collect());
    assert_eq!(got, vec![Ok(message("a"))]);
    let large = futures::stream::iter([Ok::<_, String>("data: a\n\n"), Ok("data: 0123456789"), Ok("data: b\n\n")]);
    let got: Vec<_> = futures::executor::block_on(sse_events(large, 8).collect());
    assert_eq!(got, vec![Ok(message("a")), Err(SseStreamError::Sse(SseError::EventTooLarge { limit: 8 }))]);
}

const SAMPLE: &str = "\u{feff}retry: 10\nevent: start\ndata: {\"a\":1}\n\n: ping\r\n\r\ndata: x\r\ndata: y\r\rid: 9\n\
                      data: \u{1f600}\n\nevent: stop\ndata\n\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn framing_is_the_same_however_the_bytes_are_split(
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        crlf in any::<bool>(),
    ) {
        let text = if crlf { SAMPLE.replace('\n', "\r\n") } else { SAMPLE.to_owned() };
        let bytes = text.as_bytes();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.push(bytes.len());
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for p in points {
            chunks.push(&bytes[start..p]);
            start = p;
        }
        prop_assert_eq!(frame(&chunks), frame(&[bytes]));
        // SAMPLE's own CRs turn into extra blank lines with `crlf`, so the count is checked on the plain text.
        prop_assert_eq!(frame(&[SAMPLE.as_bytes()]).len(), 4);
    }

    #[test]
    fn the_event_limit_gives_the_same_events_and_error_however_the_bytes_are_split(
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        max in 0usize..40,
    ) {
        let bytes = SAMPLE.as_bytes();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.push(bytes.len());
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for p in points {
            chunks.push(&bytes[start..p]);
            start = p;
        }
        prop_assert_eq!(frame_limited(&chunks, max), frame_limited(&[bytes], max));
    }
}
