//! Body caps and idle limits, on streams of chunks (tokio's clock is paused: no test waits in real time).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use noetic_http::{BodyError, first_chunk, guard_body, read_body};

type Chunk = Result<Vec<u8>, String>;

fn chunks(sizes: &[usize]) -> impl Stream<Item = Chunk> + Send + 'static {
    futures::stream::iter(sizes.iter().map(|&n| Ok(vec![b'x'; n])).collect::<Vec<_>>())
}

/// A stream of `count` one-byte chunks, `gap` apart on tokio's clock.
fn paced(count: usize, gap: Duration) -> impl Stream<Item = Chunk> + Send + 'static {
    futures::stream::unfold(0, move |sent| async move {
        if sent == count {
            return None;
        }
        tokio::time::sleep(gap).await;
        Some((Ok(vec![b'x']), sent + 1))
    })
}

#[tokio::test]
async fn a_body_up_to_the_cap_is_read_and_one_byte_more_is_too_large() {
    assert_eq!(read_body(chunks(&[4, 4, 2]), 10, None).await, Ok(vec![b'x'; 10]));
    assert_eq!(read_body(chunks(&[4, 4, 3]), 10, None).await, Err(BodyError::TooLarge { limit: 10 }));
    assert_eq!(read_body(chunks(&[]), 0, None).await, Ok(vec![]));
    assert_eq!(read_body(chunks(&[1]), 0, None).await, Err(BodyError::TooLarge { limit: 0 }));
    assert_eq!(
        BodyError::<String>::TooLarge { limit: 32 << 20 }.to_string(),
        "the response body is larger than the limit of 32 MiB (33554432 bytes)"
    );
}

#[tokio::test]
async fn reading_stops_at_the_chunk_that_passes_the_cap() {
    let polled = Arc::new(AtomicUsize::new(0));
    let counter = polled.clone();
    let endless = futures::stream::repeat_with(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, String>(vec![b'x'; 1000])
    });
    assert_eq!(read_body(endless, 4500, None).await, Err(BodyError::TooLarge { limit: 4500 }));
    assert_eq!(polled.load(Ordering::SeqCst), 5, "four chunks fit, the fifth passes the cap, nothing more is read");
}

#[tokio::test]
async fn an_announced_length_over_the_cap_fails_before_reading() {
    let polled = Arc::new(AtomicUsize::new(0));
    let counter = polled.clone();
    let body = futures::stream::repeat_with(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, String>(vec![b'x'])
    });
    assert_eq!(read_body(body, 10, Some(11)).await, Err(BodyError::TooLarge { limit: 10 }));
    assert_eq!(polled.load(Ordering::SeqCst), 0);
    assert_eq!(read_body(chunks(&[10]), 10, Some(10)).await, Ok(vec![b'x'; 10]));
}

#[tokio::test]
async fn a_transport_error_ends_the_body() {
    let body = futures::stream::iter([Ok(vec![1u8]), Err("reset".to_owned()), Ok(vec![2])]);
    assert_eq!(read_body(body, 10, None).await, Err(BodyError::Transport("reset".to_owned())));
}

#[tokio::test]
async fn the_guard_passes_chunks_through_and_ends_after_too_large() {
    let got: Vec<_> = guard_body(chunks(&[3, 3, 3, 3]), 7, None).collect().await;
    assert_eq!(got, vec![Ok(vec![b'x'; 3]), Ok(vec![b'x'; 3]), Err(BodyError::TooLarge { limit: 7 })]);
}

#[tokio::test(start_paused = true)]
async fn silence_longer_than_the_idle_limit_ends_the_stream_with_idle() {
    let start = tokio::time::Instant::now();
    let stalls = futures::stream::iter([Ok::<_, String>(vec![b'a'])]).chain(futures::stream::pending());
    let got: Vec<_> = guard_body(stalls, 100, Some(Duration::from_millis(50))).collect().await;
    assert_eq!(got, vec![Ok(vec![b'a']), Err(BodyError::Idle { after: Duration::from_millis(50) })]);
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert_eq!(BodyError::<String>::Idle { after: Duration::from_millis(50) }.to_string(), "no data arrived for 50 ms");
}

#[tokio::test(start_paused = true)]
async fn a_slow_but_steady_body_is_not_idle() {
    // 40 ms between chunks, 50 ms allowed: 400 ms in all, far beyond the idle limit, and fine.
    let got: Vec<_> =
        guard_body(paced(10, Duration::from_millis(40)), 100, Some(Duration::from_millis(50))).collect().await;
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(Result::is_ok), "{got:?}");
    let late: Vec<_> =
        guard_body(paced(3, Duration::from_millis(60)), 100, Some(Duration::from_millis(50))).collect().await;
    assert_eq!(late, vec![Err(BodyError::Idle { after: Duration::from_millis(50) })]);
}

#[tokio::test(start_paused = true)]
async fn a_stall_before_the_first_chunk_is_an_error_of_the_start_not_of_the_stream() {
    let idle = Some(Duration::from_millis(50));
    let stalled = first_chunk(futures::stream::pending::<Chunk>(), 100, idle).await;
    assert_eq!(stalled.err(), Some(BodyError::Idle { after: Duration::from_millis(50) }));
    let failed = first_chunk(futures::stream::iter([Err::<Vec<u8>, _>("refused".to_owned())]), 100, idle).await;
    assert_eq!(failed.err(), Some(BodyError::Transport("refused".to_owned())));
    let started = first_chunk(paced(3, Duration::from_millis(10)), 100, idle).await.unwrap();
    assert_eq!(started.collect::<Vec<_>>().await, vec![Ok(vec![b'x']), Ok(vec![b'x']), Ok(vec![b'x'])]);
    let empty = first_chunk(chunks(&[]), 100, idle).await.unwrap();
    assert_eq!(empty.collect::<Vec<_>>().await, vec![]);
    // After the start, the guard goes on: the cap counts the first chunk too.
    let capped = first_chunk(chunks(&[6, 6]), 10, idle).await.unwrap();
    assert_eq!(capped.collect::<Vec<_>>().await, vec![Ok(vec![b'x'; 6]), Err(BodyError::TooLarge { limit: 10 })]);
}
