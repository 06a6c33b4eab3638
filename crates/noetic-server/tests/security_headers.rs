//! Every response, the refusals included, tells the browser not to sniff types, not to frame the page and to load
//! only the page's own scripts and styles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::testing::ScriptedModel;
use noetic_server::ServerConfig;
use support::{Running, raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers_the_refusals_too() {
    let config = ServerConfig { token: Some("s3cret".into()), ..ServerConfig::default() };
    let runtime = Runtime::builder().model(Arc::new(ScriptedModel::new([])));
    let s = Running::start(runtime, config, Duration::from_secs(300)).await;
    let own = format!("127.0.0.1:{}", s.addr.port());
    let requests = [
        ("the page", format!("GET / HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n")),
        ("a health check", format!("GET /healthz HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n")),
        ("no such route", format!("GET /nowhere HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n")),
        ("no token", format!("GET /api/sessions HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n")),
        ("a forged host", "GET /api/sessions HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned()),
    ];
    for (what, request) in requests {
        let r = raw(s.addr, &request).await;
        let head = r.head.to_ascii_lowercase();
        for line in [
            "x-content-type-options: nosniff",
            "x-frame-options: deny",
            "content-security-policy: default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ] {
            assert!(head.contains(line), "{what} ({}) lacks '{line}':\n{}", r.status, r.head);
        }
    }
}
