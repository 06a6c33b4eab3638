//! DNS rebinding: a page whose name resolves to the server's address reaches it with its own name in `Host`. Only
//! the server's own names (its address, `localhost`, loopback literals, with its port) and the hosts the operator
//! lists are answered; the health checks answer any name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::testing::ScriptedModel;
use noetic_server::ServerConfig;
use support::{Running, changes_state, every_route, raw};

const LONG: Duration = Duration::from_secs(300);

/// A request with this `Host` line (none for `None`), a JSON body `{}` on the methods that change something, and
/// `extra` header lines.
fn request(method: &str, path: &str, host: Option<&str>, extra: &str) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\n");
    if let Some(host) = host {
        r.push_str(&format!("Host: {host}\r\n"));
    }
    let body = if changes_state(method) { "{}" } else { "" };
    if changes_state(method) {
        r.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    r.push_str(&format!("Connection: close\r\n{extra}\r\n{body}"));
    r
}

async fn server(config: ServerConfig) -> Running {
    Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), config, LONG).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_host_is_refused_on_every_route_and_only_the_health_checks_answer_it() {
    let s = server(ServerConfig::default()).await;
    let port = s.addr.port();
    let forged = [
        Some("evil.example".to_owned()),
        Some(format!("evil.example:{port}")),
        Some(format!("127.0.0.1.nip.io:{port}")),
        Some(format!("localhost:{}", port + 1)),
        Some(format!("127.0.0.1:{}", port + 1)),
        Some("localhost".to_owned()),
        Some(format!("localhost.:{port}")),
        None,
    ];
    for (method, path) in every_route() {
        for host in &forged {
            let r = raw(s.addr, &request(&method, &path, host.as_deref(), "")).await;
            if path == "/healthz" || path == "/readyz" {
                assert_eq!(r.status, 200, "{method} {path} with Host {host:?}: {r:?}");
                continue;
            }
            assert_eq!((r.status, r.code()), (403, "host_not_allowed"), "{method} {path} with Host {host:?}: {r:?}");
            let message = r.body["error"]["message"].as_str().unwrap();
            let fix = if host.is_some() { "--allowed-host" } else { "send one naming this server" };
            assert!(message.contains(fix), "the refusal says what to do: {message}");
        }
    }
    // The server's own names pass (the route then answers as it does).
    for host in
        [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LocalHost:{port}"), format!("[::1]:{port}")]
    {
        for (method, path) in every_route() {
            let r = raw(s.addr, &request(&method, &path, Some(&host), "")).await;
            assert_ne!(r.code(), "host_not_allowed", "{method} {path} with Host {host}: {r:?}");
            assert!(r.status != 403, "{method} {path} with Host {host}: {r:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_host_is_answered_and_a_token_does_not_replace_the_host_check() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        allowed_hosts: vec!["Noetic.Example".parse().unwrap(), "proxy.example:8443".parse().unwrap()],
        ..ServerConfig::default()
    };
    let s = server(config).await;
    let with_token = "Authorization: Bearer s3cret\r\n";
    for host in ["noetic.example", "noetic.example:9999", "NOETIC.example:443", "proxy.example:8443"] {
        let r = raw(s.addr, &request("GET", "/api/sessions", Some(host), with_token)).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    for host in ["proxy.example:8444", "proxy.example", "evil.example", "sub.noetic.example"] {
        let r = raw(s.addr, &request("GET", "/api/sessions", Some(host), with_token)).await;
        assert_eq!((r.status, r.code()), (403, "host_not_allowed"), "{host}: {r:?}");
    }
    // A request line naming another host is refused too, whatever the Host header says.
    let absolute = format!(
        "GET http://evil.example/api/sessions HTTP/1.1\r\nHost: {}\r\n{with_token}Connection: close\r\n\r\n",
        s.addr
    );
    assert_eq!(raw(s.addr, &absolute).await.code(), "host_not_allowed");
    // Bad entries say how to write one.
    for bad in ["https://noetic.example/", "", "a b", "[::1", "host:99999", "*"] {
        let err = bad.parse::<noetic_server::AllowedHost>().unwrap_err();
        assert!(err.contains("HOST:PORT"), "{bad:?}: {err}");
    }
}
