//! Cross-site requests: a page on another origin can make a browser send a POST (a form, a no-CORS fetch) without
//! reading the answer. Every state-changing route refuses a request whose `Origin` or `Sec-Fetch-Site` names
//! another origin, and one that is neither JSON nor marked with `X-Noetic-Request` (which such a page cannot send).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::{ScriptedModel, gated_tool, transcript};
use noetic_server::ServerConfig;
use serde_json::json;
use support::{Running, changes_state, every_route, raw};

const LONG: Duration = Duration::from_secs(300);

/// A request with the server's own `Host`, `headers` (whole lines) and `body`.
fn request(s: &Running, method: &str, path: &str, headers: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
        s.addr,
        body.len()
    )
}

/// The body a route would take from its own page.
fn body_for(path: &str) -> &'static str {
    if path.ends_with("/messages") {
        r#"{"text":"forged: stop everything"}"#
    } else if path.ends_with("/mode") {
        r#"{"mode":"all"}"#
    } else if path.starts_with("/api/approvals/") {
        r#"{"approve":true}"#
    } else {
        ""
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_request_changes_nothing_on_any_state_changing_route() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("built")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())).tool(tool), ServerConfig::default(), LONG)
        .await;
    let mut events = s.events("k", 0, false).await;
    s.say("k", "build").await;
    gate.started().await;
    let port = s.addr.port();
    let json = "Content-Type: application/json\r\n";
    let forged = [
        format!("{json}Origin: http://evil.example\r\n"),
        format!("{json}Origin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n"),
        format!("{json}Sec-Fetch-Site: cross-site\r\n"),
        // A page on another port of this machine: the same site, another origin.
        format!("{json}Origin: http://127.0.0.1:{}\r\nSec-Fetch-Site: same-site\r\n", port + 1),
        format!("{json}Origin: http://localhost:{port}\r\n"),
        format!("{json}Sec-Fetch-Site: same-site\r\n"),
        format!("{json}Origin: null\r\n"),
        // What a form or a no-CORS fetch can send: no JSON type and no custom header.
        "Content-Type: text/plain;charset=UTF-8\r\n".to_owned(),
        "Content-Type: application/x-www-form-urlencoded\r\n".to_owned(),
        String::new(),
    ];
    let mut refused = 0;
    for (method, path) in every_route().into_iter().filter(|(m, _)| changes_state(m)) {
        for headers in &forged {
            let r = raw(s.addr, &request(&s, &method, &path, headers, body_for(&path))).await;
            let expected =
                if headers.contains(json) { (403, "cross_site_request") } else { (415, "unsupported_media_type") };
            assert_eq!((r.status, r.code()), expected, "{method} {path} with {headers:?}: {r:?}");
            refused += 1;
        }
    }
    assert!(refused >= 60, "every state-changing route was tried ({refused} requests)");
    // Nothing changed: the turn still runs, nothing was queued, the mode is the same, the call was not decided.
    let (_, session) = s.get("/api/sessions/k").await;
    assert_eq!(session["busy"], true, "the turn was not stopped");
    assert_eq!(session["queued"], json!([]));
    assert_eq!(session["steering_mode"], "one-at-a-time");
    gate.release();
    let seen = events.until("turn_completed").await;
    assert!(!seen.iter().any(|e| e.kind() == "turn_failed" || e.kind() == "steering_queued"));
    let users = transcript(model.requests()[1].history.as_slice());
    assert!(!users.iter().any(|l| l.contains("forged")), "{users:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_itself_and_programs_still_change_state() {
    let s = Running::start(
        Runtime::builder().model(Arc::new(ScriptedModel::new([ModelResponse::text("hi")]))),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let own = format!("Origin: http://{}\r\nSec-Fetch-Site: same-origin\r\n", s.addr);
    // The page: same origin, marked (it sends X-Noetic-Request on every call) or JSON.
    let stop =
        raw(s.addr, &request(&s, "POST", "/api/sessions/p/stop", &format!("{own}X-Noetic-Request: 1\r\n"), "")).await;
    assert_eq!((stop.status, stop.body.clone()), (200, json!({ "cleared": 0, "cancelled": false })), "{stop:?}");
    let mode = raw(
        s.addr,
        &request(
            &s,
            "PUT",
            "/api/sessions/p/mode",
            &format!("{own}Content-Type: application/json\r\n"),
            r#"{"mode":"all"}"#,
        ),
    )
    .await;
    assert_eq!(mode.status, 200, "{mode:?}");
    // A program (curl): no Origin, no Sec-Fetch-Site; JSON or the header.
    for headers in [
        "Content-Type: application/json\r\n",
        "X-Noetic-Request: 1\r\n",
        "content-type: Application/JSON; charset=utf-8\r\n",
    ] {
        let r = raw(s.addr, &request(&s, "POST", "/api/sessions/p/continue", headers, "")).await;
        assert_eq!((r.status, r.body.clone()), (200, json!({ "started": false })), "{headers:?}: {r:?}");
    }
    // A navigation typed by the user (Sec-Fetch-Site: none) is the user's own.
    let r = raw(
        s.addr,
        &request(&s, "POST", "/api/sessions/p/resume", "Sec-Fetch-Site: none\r\nX-Noetic-Request: 1\r\n", ""),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
}
