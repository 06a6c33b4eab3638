//! The HTTP API over real HTTP on loopback: claim-or-steer, resumable events, approvals, stop, auth, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::{Counter, ScriptedModel, gated_tool, transcript};
use noetic::tool::{FnTool, Tool};
use noetic_server::{ServerConfig, check_bind};
use serde_json::json;
use support::Running;

const LONG: Duration = Duration::from_secs(300);

fn approval_tool(name: &str) -> Arc<dyn Tool> {
    let tool = FnTool::builder(name, "Deletes a file (needs approval).")
        .needs_approval(true)
        .handler(|_, _| async { Ok(json!("deleted")) })
        .build()
        .unwrap();
    Arc::new(tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_an_idle_session_starts_a_turn_and_one_sent_while_it_works_steers_it() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("ok, building only the docs"),
    ]);
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())).tool(tool), ServerConfig::default(), LONG)
        .await;
    let mut events = s.events("s1", 0, false).await;

    let (status, started) = s.say("s1", "build everything").await;
    assert_eq!(status, 202);
    assert_eq!(started, json!({ "routed": "started", "turn": 1 }));

    gate.started().await;
    let (status, steered) = s.say("s1", "only the docs").await;
    assert_eq!(status, 202);
    assert_eq!(steered["routed"], "steered");
    assert_eq!(steered["turn"], 1);
    assert!(steered["message_id"].as_str().is_some_and(|id| !id.is_empty()));
    let (_, session) = s.get("/api/sessions/s1").await;
    assert_eq!(session["busy"], true);
    assert_eq!(session["queued"][0]["text"], "only the docs");
    gate.release();

    let seen = events.until("turn_completed").await;
    let kinds: Vec<&str> = seen.iter().map(|e| e.kind()).collect();
    assert!(
        kinds.contains(&"steering_queued") && kinds.contains(&"steering_injected") && kinds.contains(&"tool_skipped")
    );
    assert_eq!(gate.runs(), 1, "the second call of the batch was skipped");
    let second = transcript(model.requests()[1].history.as_slice());
    assert_eq!(second.last().map(String::as_str), Some("User: only the docs"));
    let (_, session) = s.get("/api/sessions/s1").await;
    assert_eq!(session["busy"], false);
    assert_eq!(session["history"].as_array().unwrap().last().unwrap()["content"], "ok, building only the docs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_messages_to_one_idle_session_start_exactly_one_turn() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))])]);
    // Later requests (the steered messages, in one or more rounds or continuation turns) get a plain answer.
    let model = model.with_responder(|_| Ok(ModelResponse::text("noted")));
    let s = Running::start(
        Runtime::builder().model(Arc::new(model)).tool(tool).steering_capacity(64),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let posts = (0..24).map(|i| {
        let client = s.client.clone();
        let url = s.url("/api/sessions/race/messages");
        tokio::spawn(async move {
            let r = client.post(url).json(&json!({ "text": format!("message {i}") })).send().await.unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        })
    });
    let answers: Vec<_> = futures::future::join_all(posts).await.into_iter().map(Result::unwrap).collect();
    gate.release();
    assert!(answers.iter().all(|(status, _)| *status == 202), "{answers:?}");
    let started = answers.iter().filter(|(_, a)| a["routed"] == "started").count();
    let steered = answers.iter().filter(|(_, a)| a["routed"] == "steered").count();
    assert_eq!((started, steered), (1, 23), "one turn claims the session, every other message steers it");
    let mut events = s.events("race", 0, false).await;
    // Every steered message reaches the model: in the turn, or in a continuation turn of queued leftovers.
    loop {
        let (_, session) = s.get("/api/sessions/race").await;
        if session["busy"] == false && session["queued"].as_array().unwrap().is_empty() {
            let users = session["history"].as_array().unwrap().iter().filter(|i| i["role"] == "user").count();
            assert_eq!(users, 24, "all 24 messages are in the conversation, none twice");
            break;
        }
        events.next().await.expect("the session still has work, so events keep coming");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_steering_queue_answers_429_with_a_typed_error() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("ok")]);
    let s = Running::start(
        Runtime::builder().model(Arc::new(model)).tool(tool).steering_capacity(1),
        ServerConfig::default(),
        LONG,
    )
    .await;
    s.say("full", "go").await;
    gate.started().await;
    assert_eq!(s.say("full", "first").await.0, 202);
    let (status, body) = s.say("full", "second").await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "queue_full");
    assert!(body["error"]["message"].as_str().unwrap().contains("full"));
    gate.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_with_last_event_id_misses_nothing_and_sees_nothing_twice() {
    let counter = Counter::new();
    let calls: Vec<(String, &str, serde_json::Value)> =
        (0..20).map(|i| (format!("c{i}"), "count", json!({ "i": i }))).collect();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls(calls.iter().map(|(id, name, args)| (id.as_str(), *name, args.clone()))),
        ModelResponse::text("counted"),
    ]);
    let s = Running::start(
        Runtime::builder().model(Arc::new(model)).tool(counter.tool("count", json!("one")).unwrap()),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let mut first = s.events("r", 0, false).await;
    s.say("r", "count to twenty").await;
    // Read a few events, then drop the connection mid-stream.
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(first.next().await.unwrap());
    }
    drop(first);
    let last = seen.last().unwrap().seq();
    let mut again = s.events("r", last, true).await;
    seen.extend(again.until("turn_completed").await);
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq()).collect();
    // Event numbers follow the session log's positions (SPEC 7.1): increasing, not consecutive. The reconnected
    // client saw exactly what one that never disconnected sees.
    let mut whole = s.events("r", 0, false).await;
    let expected: Vec<u64> = whole.until("turn_completed").await.iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, expected, "every event once, in order, across the reconnect");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(seen.iter().filter(|e| e.kind() == "tool_call_completed").count(), 20);
    assert_eq!(counter.count(), 20);
    // The same holds for ?after= (what a page's first connection uses).
    let mut replay = s.events("r", seqs[2], false).await;
    assert_eq!(replay.next().await.unwrap().seq(), seqs[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_behind_what_the_log_holds_gets_an_explicit_gap_event_first() {
    let counter = Counter::new();
    // Enough calls that the turn's events overflow the session's log (4096 events).
    let calls: Vec<String> = (0..2100).map(|i| format!("c{i}")).collect();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls(calls.iter().map(|id| (id.as_str(), "count", json!({})))),
        ModelResponse::text("done"),
    ]);
    let s = Running::start(
        Runtime::builder().model(Arc::new(model)).tool(counter.tool("count", json!(1)).unwrap()),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let mut watcher = s.events("g", 0, false).await;
    s.say("g", "go").await;
    // Following switched the session's log on; this reader may itself already be behind (a gap), which is fine.
    watcher.next().await.unwrap();
    drop(watcher);
    // Wait for the end through a fresh follower from the newest event on.
    let (_, session) = s.get("/api/sessions/g").await;
    let mut tail = s.events("g", session["last_event_seq"].as_u64().unwrap(), false).await;
    if session["busy"] == true {
        tail.until("turn_completed").await;
    }
    let mut late = s.events("g", 1, true).await;
    let gap = late.next().await.unwrap();
    assert_eq!(gap.event.as_deref(), Some("gap"));
    assert_eq!(gap.data["from"], 2);
    let to = gap.data["to"].as_u64().unwrap();
    assert!(to > 2);
    // Then the durable events of the range the gap names, read back from the session log (numbered by their
    // entries' positions, `pos << 20`), then what the in-memory event log holds: all in increasing order.
    let after: Vec<u64> = late.until("turn_completed").await.iter().map(|e| e.seq()).collect();
    assert!(after[0] >= 2 && after[0] <= to && after[0].is_multiple_of(1 << 20), "a durable event first: {}", after[0]);
    assert!(after.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    assert!(after.iter().any(|&seq| seq > to), "the in-memory events follow the gap's range");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_and_a_rejected_one_does_not_and_the_model_reads_the_reason() {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("a1", "delete", json!({ "path": "old.txt" }))]),
        ModelResponse::tool_calls([("a2", "delete", json!({ "path": "<img src=x onerror=alert(1)>" }))]),
        ModelResponse::text("done"),
    ]);
    let s = Running::start(
        Runtime::builder().model(Arc::new(model.clone())).tool(approval_tool("delete")),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let mut events = s.events("ap", 0, false).await;
    s.say("ap", "clean up").await;
    let requested = events.until("approval_requested").await.pop().unwrap();
    assert_eq!(requested.data["call_id"], "a1");
    let (_, list) = s.get("/api/approvals?session=ap").await;
    assert_eq!(list["approvals"][0]["call_id"], "a1");
    assert_eq!(list["approvals"][0]["arguments"]["path"], "old.txt");
    assert_eq!(s.get("/api/approvals?session=other").await.1["approvals"], json!([]));
    let (status, decided) = s.post("/api/approvals/a1", json!({ "approve": true })).await;
    assert_eq!((status, decided["approved"].clone()), (200, json!(true)));
    let (status, again) = s.post("/api/approvals/a1", json!({ "approve": true })).await;
    assert_eq!((status, again["error"]["code"].clone()), (404, json!("no_such_approval")));

    let second = events.until("approval_requested").await.pop().unwrap();
    assert_eq!(second.data["arguments"]["path"], "<img src=x onerror=alert(1)>");
    s.post("/api/approvals/a2", json!({ "approve": false, "reason": "keep that file" })).await;
    events.until("turn_completed").await;
    let last = transcript(model.requests()[2].history.as_slice());
    assert!(last.iter().any(|l| l.contains("a1") && l.contains("deleted")), "{last:?}");
    assert!(
        last.iter().any(|l| l.contains("a2") && l.contains("rejected") && l.contains("keep that file")),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_sent_with_the_hash_of_other_arguments_is_refused_and_the_call_keeps_waiting() {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("a1", "delete", json!({ "path": "old.txt" }))]),
        ModelResponse::text("done"),
    ]);
    let s = Running::start(
        Runtime::builder().model(Arc::new(model.clone())).tool(approval_tool("delete")),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let mut events = s.events("bound", 0, false).await;
    s.say("bound", "clean up").await;
    let requested = events.until("approval_requested").await.pop().unwrap();
    let (_, list) = s.get("/api/approvals?session=bound").await;
    let listed = list["approvals"][0]["arguments_sha256"].clone();
    assert_eq!(listed, json!(noetic::digest::json_sha256(&json!({ "path": "old.txt" }))));
    assert_eq!(requested.data["arguments_sha256"], listed, "the event records the same hash");
    let other = noetic::digest::json_sha256(&json!({ "path": "precious.txt" }));
    let body = json!({ "approve": true, "session": "bound", "arguments_sha256": other });
    let (status, refused) = s.post("/api/approvals/a1", body).await;
    assert_eq!((status, refused["error"]["code"].clone()), (409, json!("arguments_changed")));
    assert_eq!(s.get("/api/approvals?session=bound").await.1["approvals"][0]["call_id"], "a1", "still waiting");
    let (status, _) = s.post("/api/approvals/a1", json!({ "approve": true, "arguments_sha256": listed })).await;
    assert_eq!(status, 200);
    let decided = events.until("approval_decided").await.pop().unwrap();
    assert_eq!((decided.data["approved"].clone(), decided.data["arguments_sha256"].clone()), (json!(true), listed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_approves_in_time_is_rejected_and_does_not_run() {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("t1", "delete", json!({ "path": "x" }))]),
        ModelResponse::text("left it"),
    ]);
    // A short decision window; the test waits for the outcome, it measures no time.
    let s = Running::start(
        Runtime::builder().model(Arc::new(model.clone())).tool(approval_tool("delete")),
        ServerConfig::default(),
        Duration::from_millis(50),
    )
    .await;
    let mut events = s.events("to", 0, false).await;
    s.say("to", "delete x").await;
    let decided = events.until("approval_decided").await.pop().unwrap();
    assert_eq!(decided.data["approved"], false);
    assert!(decided.data["reason"].as_str().unwrap().contains("nobody approved"));
    events.until("turn_completed").await;
    let completed = transcript(model.requests()[1].history.as_slice());
    assert!(completed.iter().any(|l| l.contains("t1") && l.contains("nobody approved")), "{completed:?}");
    assert_eq!(s.get("/api/approvals").await.1["approvals"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cancels_the_running_turn_and_clears_the_queue() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("never")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())).tool(tool), ServerConfig::default(), LONG)
        .await;
    let mut events = s.events("st", 0, false).await;
    s.say("st", "build").await;
    gate.started().await;
    s.say("st", "queued one").await;
    let (status, stopped) = s.post("/api/sessions/st/stop", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(stopped, json!({ "cleared": 1, "cancelled": true }));
    gate.release();
    let failed = events.until("turn_failed").await.pop().unwrap();
    assert!(failed.data["error"].to_string().contains("stopped through the API"), "{}", failed.data);
    assert_eq!(model.calls(), 1, "the model is not asked again after a stop");
    let (_, session) = s.get("/api/sessions/st").await;
    assert_eq!((session["busy"].clone(), session["queued"].clone()), (json!(false), json!([])));
    // An idle session: stop cancels nothing.
    assert_eq!(s.post("/api/sessions/st/stop", json!({})).await.1, json!({ "cleared": 0, "cancelled": false }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_runs_the_messages_queued_while_idle_and_mode_is_set_per_session() {
    let model = ScriptedModel::new([ModelResponse::text("both read")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())), ServerConfig::default(), LONG).await;
    let (status, mode) = s.put("/api/sessions/q/mode", json!({ "mode": "all" })).await;
    assert_eq!((status, mode), (200, json!({ "mode": "all" })));
    let (status, bad) = s.put("/api/sessions/q/mode", json!({ "mode": "sometimes" })).await;
    assert_eq!((status, bad["error"]["code"].clone()), (400, json!("invalid_mode")));
    assert_eq!(s.get("/api/sessions/other").await.1["steering_mode"], "one-at-a-time");
    assert_eq!(s.post("/api/sessions/q/continue", json!({})).await.1, json!({ "started": false }));
    // Queue two messages on the idle session through the library handle the server shares.
    let (_, session) = s.get("/api/sessions/q").await;
    assert_eq!(session["turns"], 0);
    let mut events = s.events("q", 0, false).await;
    let runtime_session = s.server.runtime().session("q");
    runtime_session.steer("first").await.unwrap();
    runtime_session.steer("second").await.unwrap();
    let (status, started) = s.post("/api/sessions/q/continue", json!({})).await;
    assert_eq!((status, started), (200, json!({ "started": true, "turn": 1 })));
    events.until("turn_completed").await;
    let users: Vec<String> = transcript(model.requests()[0].history.as_slice());
    assert_eq!(users, ["User: first", "User: second"], "mode all: one checkpoint takes both");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_api_call_needs_it_but_the_page_and_health_do_not() {
    let model = ScriptedModel::new([ModelResponse::text("hi")]);
    let config = ServerConfig { token: Some("s3cret".into()), ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(model)), config, LONG).await;
    let plain = reqwest::Client::new();
    let r = plain.get(s.url("/api/sessions")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let wrong = plain.get(s.url("/api/sessions")).bearer_auth("s3cres").send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let by_query = plain.get(s.url("/api/sessions/x/events?access_token=s3cret")).send().await.unwrap();
    assert_eq!(by_query.status().as_u16(), 200, "an EventSource carries the token in the query");
    assert_eq!(s.get("/api/sessions").await.0, 200, "the bearer token opens the API");
    for open in ["/", "/app.js", "/healthz", "/readyz"] {
        assert_eq!(plain.get(s.url(open)).send().await.unwrap().status().as_u16(), 200, "{open}");
    }
    // Binding beyond loopback needs a token.
    let public: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap();
    assert!(check_bind(&public, None).unwrap_err().contains("NOETIC_SERVER_TOKEN"));
    assert!(check_bind(&public, Some("t")).is_ok());
    assert!(check_bind(&"127.0.0.1:8080".parse().unwrap(), None).is_ok());
    assert!(check_bind(&"[::1]:8080".parse().unwrap(), None).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_typed_json_errors_and_never_reaches_the_agent() {
    let model = ScriptedModel::new([]);
    let config = ServerConfig { max_body_bytes: 4096, max_message_chars: 100, ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())), config, LONG).await;
    let code = |v: &serde_json::Value| v["error"]["code"].as_str().unwrap_or("").to_owned();

    let raw = s
        .client
        .post(s.url("/api/sessions/b/messages"))
        .header("content-type", "application/json")
        .body("{\"text\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 400);
    assert_eq!(code(&raw.json().await.unwrap()), "invalid_json");

    let (status, body) = s.post("/api/sessions/b/messages", json!({ "txt": "typo" })).await;
    assert_eq!((status, code(&body)), (400, "invalid_json".into()));
    let (status, body) = s.post("/api/sessions/b/messages", json!({ "text": "x".repeat(5000) })).await;
    assert_eq!((status, code(&body)), (413, "body_too_large".into()));
    let (status, body) = s.post("/api/sessions/b/messages", json!({ "text": "y".repeat(101) })).await;
    assert_eq!((status, code(&body)), (413, "message_too_long".into()));
    let (status, body) = s.post("/api/sessions/b/messages", json!({ "text": "   " })).await;
    assert_eq!((status, code(&body)), (400, "empty_message".into()));
    let (status, body) = s.post("/api/sessions/..%2Fetc/messages", json!({ "text": "hi" })).await;
    assert_eq!((status, code(&body)), (400, "invalid_session_key".into()));
    let (status, body) = s.get("/api/nothing-here").await;
    assert_eq!((status, code(&body)), (404, "no_such_route".into()));
    let (status, body) = s.get("/../../etc/passwd").await;
    assert_eq!((status, code(&body)), (404, "no_such_route".into()));
    let text = s.client.post(s.url("/api/sessions/b/messages")).body("text=hi").send().await.unwrap();
    assert_eq!(text.status().as_u16(), 415);
    let r = s.client.get(s.url("/api/sessions/b/events")).header("Last-Event-ID", "banana").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(model.calls(), 0, "nothing reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_the_api_document_are_served_from_the_binary() {
    let s =
        Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), ServerConfig::default(), LONG).await;
    let page = s.client.get(s.url("/")).send().await.unwrap();
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("/app.js") && html.contains("id=\"composer\""));
    for path in support::PAGE_FILES.iter().filter(|p| p.ends_with(".js")) {
        let js = s.client.get(s.url(path)).send().await.unwrap();
        assert!(js.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"), "{path}");
        let text = js.text().await.unwrap();
        for parser in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!text.contains(parser), "{path} uses {parser}: the page never parses agent text as HTML or code");
        }
    }
    let (status, doc) = s.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    for path in ["/api/sessions/{key}/messages", "/api/sessions/{key}/events", "/api/approvals/{call_id}"] {
        assert!(doc["paths"][path].is_object(), "{path} is documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_ends_event_streams_refuses_new_turns_and_waits_for_running_ones() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("built")]);
    let mut s = Running::start(
        Runtime::builder().model(Arc::new(model)).tool(tool),
        ServerConfig { shutdown_grace: LONG, ..ServerConfig::default() },
        LONG,
    )
    .await;
    let mut events = s.events("sd", 0, false).await;
    s.say("sd", "build").await;
    gate.started().await;
    s.server.shutdown();
    // The stream ends once the server shuts down (events already sent may still arrive first).
    while events.next().await.is_some() {}
    let served = tokio::spawn(async move { s.shut_down().await.map(|()| s) });
    gate.release();
    let s = served.await.unwrap().unwrap();
    let history = s.server.runtime().session("sd").history();
    assert_eq!(transcript(&history).last().map(String::as_str), Some("Assistant: built"), "the turn finished");
}
