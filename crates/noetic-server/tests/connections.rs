//! Connections that do nothing useful cannot hold the server: a request head must arrive in time, a connection
//! with no request in progress is closed once idle, and at the connection cap the longest-idle connection makes
//! room for a new one. Event streams are requests in progress: they outlive every timeout. Time is tokio's paused
//! clock, so the timeouts are exact and nothing waits for real.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::ScriptedModel;
use noetic_server::ServerConfig;
use support::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(300);
/// Longer than any timeout of the server: a connection still open after it was never going to close.
const HOUR: Duration = Duration::from_secs(3600);
const IDLE: Duration = Duration::from_secs(60);
const HEADER: Duration = Duration::from_secs(10);
const BODY: Duration = Duration::from_secs(30);
/// A guard against a hang in the one test on the real clock (never a measurement).
const STUCK: Duration = Duration::from_secs(60);

async fn server() -> Running {
    let model = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ok")));
    let config = ServerConfig {
        idle_timeout: IDLE,
        header_read_timeout: HEADER,
        body_read_timeout: BODY,
        ..ServerConfig::default()
    };
    Running::start(Runtime::builder().model(Arc::new(model)), config, LONG).await
}

/// Reads until the server closes the connection; `None` when it is still open after an hour.
async fn until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(HOUR, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .ok()?;
    Some(seen)
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let s = server().await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let opened = Instant::now();
    let seen = until_closed(&mut stream).await.expect("a silent connection is closed");
    assert!(seen.is_empty(), "{seen:?}");
    let after = opened.elapsed();
    assert!(after >= IDLE && after < IDLE + Duration::from_secs(1), "closed after {after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_head_trickled_a_byte_a_second_is_closed_after_the_header_read_timeout() {
    let s = server().await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let started = Instant::now();
    stream.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Slow: ", s.addr).as_bytes()).await.unwrap();
    let mut chunk = [0u8; 1024];
    loop {
        assert!(started.elapsed() < HOUR, "still open after an hour of trickling");
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut chunk)).await {
            // A second passed: one more byte of a header that never ends.
            Err(_) => {
                if stream.write_all(b"a").await.is_err() {
                    break;
                }
            }
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => panic!("an answer to a head that never ended: {:?}", String::from_utf8_lossy(&chunk[..n])),
        }
    }
    let after = started.elapsed();
    assert!(after >= HEADER && after < HEADER + Duration::from_secs(2), "closed after {after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_keep_alive_connection_is_closed_once_idle_but_an_event_stream_outlives_the_idle_timeout() {
    let s = server().await;
    let mut events = s.events("long", 0, false).await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr);
    let mut chunk = [0u8; 1024];
    for _ in 0..2 {
        stream.write_all(request.as_bytes()).await.unwrap();
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(String::from_utf8_lossy(&chunk[..n]).starts_with("HTTP/1.1 200"), "kept alive between requests");
    }
    let idle_from = Instant::now();
    assert!(until_closed(&mut stream).await.expect("an idle keep-alive connection is closed").is_empty());
    let after = idle_from.elapsed();
    assert!(after >= IDLE && after < IDLE + Duration::from_secs(1), "closed after {after:?}");
    // Ten idle timeouts later the event stream still delivers (its keep-alive comments are not requests).
    tokio::time::sleep(IDLE * 10).await;
    assert_eq!(s.say("long", "still there?").await.0, 202);
    let started = events.next().await.expect("the stream is open");
    assert_eq!(started.kind(), "turn_started");
}

#[tokio::test(start_paused = true)]
async fn a_request_body_slower_than_the_body_read_timeout_is_answered_408() {
    let s = server().await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /api/sessions/slow/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"text\":",
        s.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let sent = Instant::now();
    let answer = String::from_utf8(until_closed(&mut stream).await.expect("answered and closed")).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let within = format!("did not arrive within {} ms", BODY.as_millis());
    assert!(answer.contains("body_timeout") && answer.contains(&within), "{answer}");
    assert!(sent.elapsed() >= BODY, "after {:?}", sent.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_a_new_connection_closes_the_longest_idle_one_and_event_streams_stay_open() {
    let model = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ok")));
    // Timeouts far beyond the test: only closing the longest-idle connection can make room.
    let config =
        ServerConfig { max_connections: 20, idle_timeout: HOUR, header_read_timeout: HOUR, ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(model)), config, LONG).await;
    let mut events = s.events("busy", 0, false).await;
    // Twice the cap of connections that send nothing, opened one after the other.
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(s.addr).await.unwrap());
    }
    // A guard against a hang, not a measurement: the answer comes as soon as the oldest idle connection closed.
    let health = tokio::time::timeout(
        STUCK,
        support::raw(s.addr, &format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", s.addr)),
    )
    .await
    .expect("/healthz answers at the cap");
    assert_eq!(health.status, 200);
    // 19 places were free (the event stream has one); each of the 22 later connections closed the longest-idle
    // one before it was served, so the first 22 are closed (a read sees their end at once) and the rest open.
    let closed: Vec<bool> = idle
        .into_iter()
        .map(|stream| {
            let stream = stream.into_std().unwrap();
            matches!(std::io::Read::read(&mut &stream, &mut [0u8; 16]), Ok(0))
        })
        .collect();
    assert_eq!(closed.iter().filter(|c| **c).count(), 22, "{closed:?}");
    assert!(closed[..22].iter().all(|c| *c), "the longest-idle ones went first: {closed:?}");
    // The event stream was never idle: it still delivers.
    assert_eq!(s.say("busy", "still there?").await.0, 202);
    assert_eq!(events.next().await.expect("the stream is open").kind(), "turn_started");
}
