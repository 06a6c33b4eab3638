//! What a second AG-UI run input does while its thread's turn runs, for each `--agui-busy` policy: the reply says
//! which happened (the `X-Noetic-Routed` header and the first `noetic.run_routed` event).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::served::{Served, serve_command};
use serde_json::{Value, json};

/// An AG-UI run's response, read event by event.
struct Run {
    response: reqwest::Response,
    buffer: String,
    routed: String,
}

impl Run {
    async fn post(base: &str, thread: &str, body: Value) -> Run {
        let mut body = body;
        body["threadId"] = json!(thread);
        body["runId"] = json!(format!("r-{}", fastrand_id()));
        let response = reqwest::Client::new()
            .post(format!("{base}/ag-ui/serve"))
            .header("Accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let routed = response.headers()["x-noetic-routed"].to_str().unwrap().to_owned();
        Run { response, buffer: String::new(), routed }
    }

    /// The next event; `None` when the run's stream ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return Some(serde_json::from_str(data).unwrap());
                }
                continue;
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Events up to and including the first that `stop` accepts (panics if the stream ends first).
    async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await.unwrap_or_else(|| panic!("the run ended before the event: {seen:?}"));
            let done = stop(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// Every event to the end of the stream.
    async fn rest(&mut self) -> Vec<Value> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await {
            seen.push(event);
        }
        seen
    }
}

/// Stops thread `t`'s turn (so the shutdown has none to wait for), then the server.
async fn stop(served: Served) {
    let stopped = reqwest::Client::new()
        .post(format!("{}/api/sessions/t/stop", served.base))
        .header("X-Noetic-Request", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 200);
    served.terminate();
}

fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn user(id: &str, text: &str) -> Value {
    json!({ "messages": [{ "id": id, "role": "user", "content": text }] })
}

fn is(kind: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["type"] == kind
}

fn custom<'a>(events: &'a [Value], name: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["type"] == "CUSTOM" && e["name"] == name).map(|e| &e["value"])
}

/// A server with `policy` whose thread `t` runs its first command (approved through an interrupt): the resumed
/// run, read up to the approval.
async fn busy_thread(workspace: &Path, db: &Path, policy: &str) -> (Served, Run) {
    let served = Served::spawn(serve_command(workspace, db, &["--agui-busy", policy]));
    let mut first = Run::post(&served.base, "t", user("u1", "run the checks")).await;
    assert_eq!(first.routed, "started");
    let events = first.rest().await;
    let end = events.last().unwrap();
    assert_eq!(end["outcome"]["type"], "interrupt", "{events:?}");
    let id = end["outcome"]["interrupts"][0]["id"].clone();
    let resume = json!({ "messages": [], "resume": [{ "interruptId": id, "status": "resolved", "payload": { "approved": true } }] });
    let mut resumed = Run::post(&served.base, "t", resume).await;
    assert_eq!(resumed.routed, "attached");
    resumed.until(|e| e["name"] == "noetic.approval_decided").await;
    (served, resumed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_agui_message_while_the_turn_runs_is_rejected_under_the_reject_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, db) = (dir.path().join("ws"), dir.path().join("n.db"));
    std::fs::create_dir(&ws).unwrap();
    let (served, _resumed) = busy_thread(&ws, &db, "reject").await;
    let mut second = Run::post(&served.base, "t", user("u2", "skip the checks")).await;
    assert_eq!(second.routed, "rejected");
    let events = second.rest().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0]["type"].clone(), events[0]["code"].clone()), (json!("RUN_ERROR"), json!("thread_busy")));
    std::fs::write(ws.join("release"), "").unwrap();
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_agui_message_under_the_restart_policy_cancels_the_running_turn_and_starts_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, db) = (dir.path().join("ws"), dir.path().join("n.db"));
    std::fs::create_dir(&ws).unwrap();
    let (served, mut resumed) = busy_thread(&ws, &db, "restart").await;
    let mut second = Run::post(&served.base, "t", user("u2", "skip the checks and write notes.txt instead")).await;
    assert_eq!(second.routed, "restarted");
    // The interrupted turn's run ends as cancelled; the new one plays on (to the write's approval).
    let old = resumed.rest().await;
    assert_eq!(old.last().unwrap()["outcome"], json!({ "type": "cancelled" }), "{old:?}");
    let new = second.rest().await;
    assert_eq!(custom(&new, "noetic.run_routed").unwrap()["routed"], "restarted");
    assert!(
        new.iter().any(|e| e["type"] == "TEXT_MESSAGE_CONTENT"
            && e["delta"] == "Understood: no more checks, writing notes.txt instead."),
        "{new:?}"
    );
    let end = new.last().unwrap();
    assert_eq!(end["outcome"]["interrupts"][0]["toolCallId"], "w1", "{new:?}");
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_agui_message_under_the_queue_policy_waits_for_the_turn_to_end_then_runs_as_its_own_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, db) = (dir.path().join("ws"), dir.path().join("n.db"));
    std::fs::create_dir(&ws).unwrap();
    let (served, mut resumed) = busy_thread(&ws, &db, "queue").await;
    let mut second = Run::post(&served.base, "t", user("u2", "then write notes.txt")).await;
    assert_eq!(second.routed, "queued");
    let opening = second.until(is("STATE_SNAPSHOT")).await;
    assert_eq!(custom(&opening, "noetic.run_routed").unwrap()["routed"], "queued");
    assert_eq!(opening[2]["snapshot"]["queued"], json!([]), "a follow-up is not steering: the turn never sees it");
    // The running turn goes on untouched: its next command asks for approval.
    std::fs::write(ws.join("release"), "").unwrap();
    let old = resumed.rest().await;
    assert!(custom(&old, "noetic.tool_skipped").is_none(), "{old:?}");
    assert_eq!(old.last().unwrap()["outcome"]["interrupts"][0]["toolCallId"], "c2", "{old:?}");
    // Once that turn ends (stopped here), the follow-up starts a turn of its own, which this run streams.
    let stopped = reqwest::Client::new()
        .post(format!("{}/api/sessions/t/stop", served.base))
        .header("X-Noetic-Request", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 200);
    let rest = second.rest().await;
    assert_eq!(custom(&rest, "noetic.run_routed").unwrap(), &json!({ "routed": "started", "after": "queued" }));
    assert_eq!(rest.last().unwrap()["outcome"]["interrupts"][0]["toolCallId"], "w1", "{rest:?}");
    stop(served).await;
}
