//! The OpenAPI document against what a running server sends: every documented route is driven through a success
//! and at least one error, and each JSON body is validated against the schema the document gives for that route
//! and status (`$ref`s resolved into its components). The schemas are strict, so a field a handler sends that its
//! type does not name, or a required one it leaves out, fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::{ScriptedModel, gated_tool, transcript};
use noetic::tool::{FnTool, Tool};
use noetic_server::ServerConfig;
use serde_json::{Value, json};
use support::Running;

const LONG: Duration = Duration::from_secs(300);

/// "build" runs the gated tool, "delete" calls a tool that needs approval, anything else is answered "ok".
fn model() -> ScriptedModel {
    ScriptedModel::new([]).with_responder(|request| {
        let last = transcript(request.history.as_slice()).pop().unwrap_or_default();
        Ok(match last.as_str() {
            "User: build" => ModelResponse::tool_calls([("b1", "build", json!({}))]),
            "User: delete" => ModelResponse::tool_calls([("d1", "delete", json!({ "path": "old.txt" }))]),
            _ => ModelResponse::text("ok"),
        })
    })
}

fn approval_tool() -> Arc<dyn Tool> {
    let tool = FnTool::builder("delete", "Deletes a file (needs approval).")
        .needs_approval(true)
        .handler(|_, _| async { Ok(json!("deleted")) })
        .build()
        .unwrap();
    Arc::new(tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_answers_bodies_its_schema_allows_on_success_and_on_error() {
    let (build, gate) = gated_tool("build").unwrap();
    let runtime = Runtime::builder().model(Arc::new(model())).tool(build).tool(approval_tool());
    let s = Running::start(runtime, ServerConfig::default(), LONG).await;
    let mut c = Conformance::new(&s);

    c.json("GET", "/healthz", "/healthz", None, 200).await;
    c.json("GET", "/readyz", "/readyz", None, 200).await;

    // An idle session with one finished turn.
    let messages = "/api/sessions/{key}/messages";
    let mut events = s.events("idle", 0, false).await;
    c.json("POST", messages, "/api/sessions/idle/messages", Some(json!({ "text": "hello" })), 202).await;
    events.until("turn_completed").await;
    c.json("POST", messages, "/api/sessions/idle/messages", Some(json!({ "text": "  " })), 400).await;

    // A busy session: steered, listed, refused.
    s.say("busy", "build").await;
    gate.started().await;
    let steered = c.json("POST", messages, "/api/sessions/busy/messages", Some(json!({ "text": "also docs" })), 202);
    assert_eq!(steered.await["routed"], "steered");
    let sessions = c.json("GET", "/api/sessions", "/api/sessions", None, 200).await;
    assert!(sessions["sessions"].as_array().unwrap().iter().any(|l| l["running"] == true), "{sessions}");
    let busy = c.json("GET", "/api/sessions/{key}", "/api/sessions/busy", None, 200).await;
    assert_eq!(busy["queued"][0]["text"], "also docs");
    c.json("POST", "/api/sessions/{key}/compact", "/api/sessions/busy/compact", Some(json!({})), 409).await;
    c.marked("DELETE", "/api/sessions/{key}", "/api/sessions/busy", 409).await;
    let stopped = c.marked("POST", "/api/sessions/{key}/stop", "/api/sessions/busy/stop", 200).await;
    assert_eq!(stopped["cancelled"], true);
    gate.release();

    // A call waiting for approval.
    let mut events = s.events("ap", 0, false).await;
    s.say("ap", "delete").await;
    events.until("approval_requested").await;
    let listed = c.json("GET", "/api/approvals", "/api/approvals", None, 200).await;
    assert_eq!(listed["approvals"][0]["call_id"], "d1");
    c.json("GET", "/api/approvals", "/api/approvals?bogus=1", None, 400).await;
    let waiting = c.json("GET", "/api/sessions/{key}", "/api/sessions/ap", None, 200).await;
    assert_eq!(waiting["pending_approvals"][0]["tool"], "delete");
    let decide = "/api/approvals/{call_id}";
    c.json("POST", decide, "/api/approvals/nope", Some(json!({ "approve": true })), 404).await;
    c.json("POST", decide, "/api/approvals/d1", Some(json!({ "approve": "yes" })), 400).await;
    c.json("POST", decide, "/api/approvals/d1", Some(json!({ "approve": true, "session": "ap" })), 200).await;
    events.until("turn_completed").await;
    c.json("GET", "/api/sessions/{key}/ledger", "/api/sessions/ap/ledger", None, 200).await;
    c.json("GET", "/api/sessions/{key}/ledger", "/api/sessions/a%20b/ledger", None, 400).await;

    // The idle session's reads and changes.
    c.json("GET", "/api/sessions/{key}", "/api/sessions/idle", None, 200).await;
    c.json("GET", "/api/sessions/{key}", "/api/sessions/a%20b", None, 400).await;
    let rename = "/api/sessions/{key}";
    c.json("PATCH", rename, "/api/sessions/idle", Some(json!({ "title": "Notes" })), 200).await;
    c.json("PATCH", rename, "/api/sessions/idle", Some(json!({ "title": 5 })), 400).await;
    c.json("PATCH", rename, "/api/sessions/nobody", Some(json!({ "title": "Notes" })), 404).await;
    let mode = "/api/sessions/{key}/mode";
    c.json("PUT", mode, "/api/sessions/idle/mode", Some(json!({ "mode": "all" })), 200).await;
    c.json("PUT", mode, "/api/sessions/idle/mode", Some(json!({ "mode": "some" })), 400).await;
    let budget = "/api/sessions/{key}/budget";
    let limits = json!({ "session": { "cost": 2.5 }, "turn": { "tool_calls": 5, "wall_time": "10m" } });
    c.json("PUT", budget, "/api/sessions/idle/budget", Some(limits), 200).await;
    c.json("PUT", budget, "/api/sessions/idle/budget", Some(json!({ "turn": { "tool_calls": 0 } })), 400).await;
    let shown = c.json("GET", budget, "/api/sessions/idle/budget", None, 200).await;
    assert_eq!(shown["budget"]["turn"]["wall_time"], "10m");
    c.json("GET", budget, "/api/sessions/a%20b/budget", None, 400).await;
    c.marked("POST", "/api/sessions/{key}/continue", "/api/sessions/idle/continue", 200).await;
    c.marked("POST", "/api/sessions/{key}/resume", "/api/sessions/idle/resume", 200).await;
    for action in ["stop", "continue", "resume", "compact"] {
        let path = format!("/api/sessions/idle/{action}");
        c.send("POST", &format!("/api/sessions/{{key}}/{action}"), &path, None, &[], 415).await;
    }
    c.json("POST", "/api/sessions/{key}/compact", "/api/sessions/idle/compact", Some(json!({})), 200).await;
    c.marked("DELETE", "/api/sessions/{key}", "/api/sessions/idle", 200).await;
    c.marked("DELETE", "/api/sessions/{key}", "/api/sessions/idle", 404).await;

    // The event streams: their success is a stream, their errors JSON.
    let follow = "/api/sessions/{key}/events";
    c.send("GET", follow, "/api/sessions/ap/events", None, &[], 200).await;
    c.send("GET", follow, "/api/sessions/ap/events", None, &[("Last-Event-ID", "x")], 400).await;
    let input =
        json!({ "threadId": "ui", "runId": "r1", "messages": [{ "id": "m1", "role": "user", "content": "hi" }] });
    c.json("POST", "/ag-ui/{agent}", "/ag-ui/default", Some(input.clone()), 200).await;
    c.json("POST", "/ag-ui/{agent}", "/ag-ui/someone-else", Some(input), 404).await;

    // A2A: the card, and JSON-RPC answers (an error is a JSON-RPC body with status 200).
    let card = c.json("GET", "/.well-known/agent-card.json", "/.well-known/agent-card.json", None, 200).await;
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    let foreign = [("Host", "rebound.example")];
    c.send("GET", "/.well-known/agent-card.json", "/.well-known/agent-card.json", None, &foreign, 403).await;
    let send = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": { "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": "hello" }] },
        "configuration": { "returnImmediately": true },
    } });
    let sent = c.json("POST", "/a2a", "/a2a", Some(send), 200).await;
    assert!(sent["result"]["task"]["id"].is_string(), "{sent}");
    let missing = json!({ "jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": { "id": "nobody:1" } });
    assert_eq!(c.json("POST", "/a2a", "/a2a", Some(missing), 200).await["error"]["code"], -32001);
    c.send("POST", "/a2a", "/a2a", None, &[], 415).await;
    // Past the cross-site guard (marked), but not JSON by its type: the refusal is a JSON-RPC error.
    let not_json = [("X-Noetic-Request", "1"), ("Content-Type", "text/plain")];
    assert_eq!(c.send("POST", "/a2a", "/a2a", None, &not_json, 415).await["error"]["code"], -32600);

    // With an access token, every route that needs it answers 401 without it.
    let t = Running::start(Runtime::builder().model(Arc::new(model())), with_token(), LONG).await;
    let mut guarded = Conformance { s: &t, doc: c.doc.clone(), seen: BTreeSet::new() };
    for (method, template) in c.operations() {
        if !c.needs_token(&method, &template) {
            continue;
        }
        let path = template.replace("{key}", "k").replace("{call_id}", "c1").replace("{agent}", "default");
        guarded.send(&method, &template, &path, None, &[("X-Noetic-Request", "1")], 401).await;
    }
    c.seen.extend(guarded.seen);
    c.assert_every_route_was_seen_succeeding_and_failing();
}

fn with_token() -> ServerConfig {
    ServerConfig { token: Some("conformance-token".into()), ..ServerConfig::default() }
}

/// Sends requests to a server and checks each answer against the document.
struct Conformance<'a> {
    s: &'a Running,
    doc: Value,
    /// `(METHOD, path template, status)` of every answer checked.
    seen: BTreeSet<(String, String, u16)>,
}

impl<'a> Conformance<'a> {
    fn new(s: &'a Running) -> Self {
        Conformance { s, doc: serde_json::from_str(noetic_server::api_document()).unwrap(), seen: BTreeSet::new() }
    }

    /// A request with a JSON body (or none), checked; its body.
    async fn json(&mut self, method: &str, template: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        self.send(method, template, path, body, &[], status).await
    }

    /// A request without a body, marked `X-Noetic-Request: 1`, checked.
    async fn marked(&mut self, method: &str, template: &str, path: &str, status: u16) -> Value {
        self.send(method, template, path, None, &[("X-Noetic-Request", "1")], status).await
    }

    /// Sends the request, expects `status`, and checks the body against the document's schema for the route and
    /// status (an event stream: that the document says the route answers one).
    async fn send(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
        status: u16,
    ) -> Value {
        let mut request = self.s.client.request(method.parse().unwrap(), self.s.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        let kind = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let text = if kind.starts_with("text/event-stream") { String::new() } else { response.text().await.unwrap() };
        assert_eq!(got, status, "{method} {path}: {text}");
        let answer = self.response(method, template, status);
        if kind.starts_with("text/event-stream") {
            assert!(answer["content"]["text/event-stream"].is_object(), "{method} {template} {status} is no stream");
            self.seen.insert((method.to_owned(), template.to_owned(), status));
            return Value::Null;
        }
        let value: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
        let schema = &answer["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{method} {template} {status} documents no JSON body, but one came: {text}");
        let mut root = schema.clone();
        root["components"] = self.doc["components"].clone();
        let validator = jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("{template}: schema: {e}"));
        let errors: Vec<String> =
            validator.iter_errors(&value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(
            errors.is_empty(),
            "{method} {template} {status} sent what its schema does not allow: {errors:#?}\n{value:#}"
        );
        self.seen.insert((method.to_owned(), template.to_owned(), status));
        value
    }

    /// The document's response for the operation and status, `$ref` resolved.
    fn response(&self, method: &str, template: &str, status: u16) -> Value {
        let operation = &self.doc["paths"][template][method.to_ascii_lowercase()];
        assert!(operation.is_object(), "{method} {template} is not documented");
        let answer = &operation["responses"][status.to_string()];
        assert!(answer.is_object(), "{method} {template} answered {status}, which the document does not list");
        match answer["$ref"].as_str() {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap();
                self.doc["components"]["responses"][name].clone()
            }
            None => answer.clone(),
        }
    }

    /// Every documented `(METHOD, path template)`.
    fn operations(&self) -> Vec<(String, String)> {
        let mut operations = Vec::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                operations.push((method.to_ascii_uppercase(), path.clone()));
            }
        }
        operations
    }

    /// True unless the operation says it needs no token (`security: [{}]`).
    fn needs_token(&self, method: &str, template: &str) -> bool {
        let security = &self.doc["paths"][template][method.to_ascii_lowercase()]["security"];
        security != &json!([{}])
    }

    fn assert_every_route_was_seen_succeeding_and_failing(&self) {
        // Readiness fails only while the server shuts down or its store fails: nothing a live test server does.
        let untestable_errors = [("GET", "/readyz")];
        for (method, template) in self.operations() {
            let statuses: Vec<u16> =
                self.seen.iter().filter(|(m, t, _)| *m == method && *t == template).map(|(_, _, s)| *s).collect();
            assert!(statuses.iter().any(|s| *s < 300), "{method} {template} was never checked succeeding");
            let documents_errors = self.doc["paths"][&template][method.to_ascii_lowercase()]["responses"]
                .as_object()
                .unwrap()
                .keys()
                .any(|s| s.starts_with('4') || s.starts_with('5'));
            if documents_errors && !untestable_errors.contains(&(method.as_str(), template.as_str())) {
                assert!(statuses.iter().any(|s| *s >= 400), "{method} {template} was never checked failing");
            }
        }
    }
}
