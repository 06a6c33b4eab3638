//! What `noetic serve` refuses and withstands, against the binary: requests for another host name (DNS
//! rebinding), requests from pages on other sites (in a real browser), idle and trickling connections, more
//! connections than it may open files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::served::{STUCK, Served, browser, raw, serve_command};
use serde_json::{Value, json};

/// A request for `path` naming `host`, with a JSON body `{}` on the methods that change something.
fn request(method: &str, path: &str, host: &str) -> String {
    let body = if matches!(method, "GET" | "HEAD") { "" } else { "{}" };
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Every route: the page's files and the API its OpenAPI document lists, path parameters filled in.
fn every_route(served: &Served) -> Vec<(String, String)> {
    let doc = raw(served.authority(), &request("GET", "/openapi.json", served.authority())).unwrap().body;
    let mut routes: Vec<(String, String)> =
        ["/", "/app.js", "/app.css", "/openapi.json"].iter().map(|p| ("GET".to_owned(), (*p).to_owned())).collect();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for method in methods.as_object().unwrap().keys().filter(|m| *m != "parameters") {
            routes.push((method.to_ascii_uppercase(), path.replace("{key}", "k").replace("{call_id}", "c1")));
        }
    }
    assert!(routes.len() >= 17, "{routes:?}");
    routes
}

fn port_of(served: &Served) -> u16 {
    served.authority().rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn serve_refuses_a_forged_host_on_every_route_and_answers_the_hosts_it_is_told_to_allow() {
    let dir = tempfile::tempdir().unwrap();
    let (workspace, db) = (dir.path().to_owned(), dir.path().join("noetic.db"));
    let served = Served::start(&workspace, &db);
    let port = port_of(&served);
    for (method, path) in every_route(&served) {
        for host in ["evil.example".to_owned(), format!("evil.example:{port}"), format!("localhost:{}", port + 1)] {
            let r = raw(served.authority(), &request(&method, &path, &host)).unwrap();
            if path == "/healthz" || path == "/readyz" {
                assert_eq!(r.status, 200, "{method} {path} for {host}: {r:?}");
            } else {
                assert_eq!((r.status, r.code()), (403, "host_not_allowed"), "{method} {path} for {host}: {r:?}");
            }
        }
    }
    served.terminate();

    // Hosts allowed by flag and by the environment; an entry with a port allows that port only.
    let mut cmd =
        serve_command(&workspace, &db, &["--allowed-host", "noetic.test", "--allowed-host", "proxy.test:8443"]);
    cmd.env("NOETIC_SERVER_ALLOWED_HOSTS", "other.test, third.test");
    let served = Served::spawn(cmd);
    let port = port_of(&served);
    for host in ["noetic.test".to_owned(), format!("noetic.test:{port}"), "proxy.test:8443".into(), "other.test".into()]
    {
        let r = raw(served.authority(), &request("GET", "/api/sessions", &host)).unwrap();
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    for host in ["proxy.test:8444", "evil.example"] {
        let r = raw(served.authority(), &request("GET", "/api/sessions", host)).unwrap();
        assert_eq!((r.status, r.code()), (403, "host_not_allowed"), "{host}: {r:?}");
    }
    served.terminate();
    let bad = common::run(&mut serve_command(&workspace, &db, &["--allowed-host", "http://noetic.test/"]));
    assert!(!bad.status.success() && bad.stderr.contains("--allowed-host"), "{}", bad.stderr);
}

#[cfg(unix)]
#[test]
fn serve_stays_reachable_with_more_idle_connections_than_it_may_open_files() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = common::served::under_ulimit(&serve_command(dir.path(), &dir.path().join("noetic.db"), &[]), "-n 128");
    let served = Served::spawn(cmd);
    // Connections that never send a byte, more than the process may have files open.
    let idle: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(served.authority()).unwrap()).collect();
    let health = raw(served.authority(), &request("GET", "/healthz", served.authority()));
    assert_eq!(health.map(|r| r.status), Some(200), "/healthz answers with 200 idle connections open");
    drop(idle);
    let (_, stderr) = served.terminate();
    assert_eq!(stderr.matches("reached the connection cap").count(), 1, "said once per burst: {stderr}");
}

#[cfg(target_os = "linux")]
#[test]
fn serve_raises_its_soft_open_file_limit_to_the_hard_limit_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = serve_command(dir.path(), &dir.path().join("noetic.db"), &[]);
    let served = Served::spawn(common::served::under_ulimit(&cmd, "-Sn 256 && ulimit -Hn 4096"));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", served.child.id())).unwrap();
    let files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let (_, stderr) = served.terminate();
    assert_eq!(files.split_whitespace().skip(3).take(2).collect::<Vec<_>>(), ["4096", "4096"], "{files}");
    assert!(stderr.contains("open-file limit raised from 256 to 4096"), "{stderr}");
}

#[test]
fn serve_closes_a_trickling_request_and_an_idle_connection_after_the_timeouts_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::spawn(serve_command(
        dir.path(),
        &dir.path().join("noetic.db"),
        &["--header-read-timeout", "1", "--idle-timeout", "1"],
    ));
    // A header a byte at a time (paced by a short read wait), never finished.
    let mut trickle = TcpStream::connect(served.authority()).unwrap();
    trickle.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    trickle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Slow: ", served.authority()).as_bytes()).unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 1024];
    loop {
        assert!(started.elapsed() < STUCK, "a trickling request is still open");
        match trickle.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => panic!("an answer to a head that never ended: {:?}", String::from_utf8_lossy(&buffer[..n])),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if trickle.write_all(b"a").is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    // A kept-alive connection after its answer.
    let mut idle = TcpStream::connect(served.authority()).unwrap();
    idle.set_read_timeout(Some(STUCK)).unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", served.authority()).as_bytes()).unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains(r#"{"status":"ok"}"#) {
        let n = idle.read(&mut buffer).unwrap();
        assert!(n > 0, "closed before the answer");
        seen.extend_from_slice(&buffer[..n]);
    }
    assert_eq!(idle.read(&mut buffer).map_err(|e| e.kind()), Ok(0), "an idle connection is closed");
    served.terminate();
}

#[test]
fn a_page_on_another_site_cannot_stop_steer_or_approve_and_a_rebinding_name_is_refused_in_a_real_browser() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let served = Served::start(&workspace, &dir.path().join("noetic.db"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // A turn waits for the approval of its command: what a cross-site page would like to approve or stop.
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut events = client.get(format!("{}/api/sessions/victim/events", served.base)).send().await.unwrap();
        let url = format!("{}/api/sessions/victim/messages", served.base);
        client.post(url).json(&json!({ "text": "run the checks" })).send().await.unwrap();
        let asked = common::served::until_event(&mut events, &mut String::new(), "approval_requested").await;
        assert_eq!(asked["call_id"], "c1");
    });
    let out = std::process::Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/cross_site.mjs"))
        .arg(&served.base)
        .env("NOETIC_BROWSER_DIR", &browser_dir)
        .output()
        .unwrap();
    let (_, server_stderr) = served.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser script failed:\n{stderr}\nseen: {stdout}\nserver: {server_stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Every request the pages made reached the server and was refused there (the browser did not hold them back).
    for site in ["crossSite", "sameSite"] {
        let answers = seen[site].as_array().unwrap();
        assert!(answers.len() >= 6, "{site}: {answers:?}");
        for answer in answers {
            assert!([403, 415].contains(&answer["status"].as_u64().unwrap()), "{site}: {answer}");
        }
    }
    assert_eq!(seen["afterAttacks"]["busy"], true, "the turn was not stopped");
    assert_eq!(seen["afterAttacks"]["queued"], json!([]), "nothing was queued");
    assert_eq!(seen["afterAttacks"]["steering_mode"], "one-at-a-time");
    assert_eq!(seen["afterAttacks"]["pending"], json!(["c1"]), "the command still waits for a decision");
    // A name that resolves to the server (DNS rebinding): the page and the API refuse it.
    assert_eq!(seen["rebindPage"], 403);
    assert_eq!(seen["rebindApprove"], json!({ "status": 403, "code": "host_not_allowed" }));
    assert_eq!(seen["afterRebind"]["pending"], json!(["c1"]));
    // The page itself still stops the turn.
    assert_eq!(seen["stoppedByPage"], true);
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
}
