//! Several `noetic serve` workers on one PostgreSQL database for the multi-worker tests: a database of the test's
//! own, the workflow the workers run, the worker processes, and reading approvals and the stored session.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use noetic::agent::log::{LogStore, Projection};
use noetic::model::Item;
use serde_json::{Value, json};

use super::{noetic, served_address, skip};

pub const DEFAULT_URL: &str = "postgres://noetic:noetic@127.0.0.1:54329/noetic";

pub fn database() -> Option<String> {
    let url = std::env::var("NOETIC_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let probe = url.clone();
    match std::thread::spawn(move || postgres::Client::connect(&probe, postgres::NoTls).map(drop)).join().unwrap() {
        Ok(()) => Some(url),
        Err(e) => {
            skip(&format!("no PostgreSQL at {url} ({e}); run scripts/postgres.sh setup && scripts/postgres.sh start"))
        }
    }
}

/// A database of one test's own: the workers of tests running side by side would otherwise take over each other's
/// orphaned turns (as they should in production) with their own scripts and workspaces. Dropped with the guard.
pub struct Database {
    admin: String,
    name: String,
    pub url: String,
}

impl Database {
    pub fn new(url: &str, tag: &str) -> Database {
        let name = format!("noetic_t_{tag}_{}", std::process::id());
        let (admin, statement_name) = (url.to_owned(), name.clone());
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
            client.batch_execute(&format!("DROP DATABASE IF EXISTS {statement_name} WITH (FORCE)")).unwrap();
            client.batch_execute(&format!("CREATE DATABASE {statement_name}")).unwrap();
        })
        .join()
        .unwrap();
        let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
        Database { admin: url.to_owned(), url: format!("{base}/{name}"), name }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept database {} for inspection (the test failed)", self.name);
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            if let Ok(mut client) = postgres::Client::connect(&admin, postgres::NoTls) {
                let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        })
        .join();
    }
}

/// A workflow whose first answer runs three commands (each needs approval, answered over the API), then answers
/// every later round with text.
pub const WORKFLOW: &str = r#"
instructions = "You run commands."
model = "scripted"
tools = ["run_command"]
max_rounds = 30
max_iterations = 30

[[scripted.response]]
text = "Running three commands."
tool_calls = [
  { id = "c1", name = "run_command", args = { command = "echo c1 >> runs.txt; for i in $(seq 1 600); do [ -e release ] && break; sleep 0.05; done; echo c1-end >> runs.txt" } },
  { id = "c2", name = "run_command", args = { command = "echo c2 >> runs.txt" } },
  { id = "c3", name = "run_command", args = { command = "echo c3 >> runs.txt" } },
]
"#;

/// The workflow, or (`answers_only`) one whose scripted model only answers with text: a worker that takes a turn
/// over never asks for the journaled response again, so its script starts after it (each process has its own
/// script, counted from its first call).
pub fn workflow_file(dir: &Path, answers_only: bool) -> std::path::PathBuf {
    let mut text = if answers_only {
        WORKFLOW.split("[[scripted.response]]").next().unwrap_or_default().to_owned()
    } else {
        WORKFLOW.to_owned()
    };
    for i in 0..30 {
        text.push_str(&format!("\n[[scripted.response]]\ntext = \"answer {i}\"\n"));
    }
    let path = dir.join(if answers_only { "answers.toml" } else { "workflow.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

pub fn workflow(dir: &Path) -> std::path::PathBuf {
    workflow_file(dir, false)
}

/// One `noetic serve` worker.
pub struct Worker {
    pub child: Child,
    pub base: String,
}

impl Worker {
    pub fn start(url: &str, workflow: &Path, workspace: &Path) -> Worker {
        let mut child = noetic()
            // An approval nobody answers (a test gone wrong) is declined after 20 s instead of 300.
            .args(["serve", "--bind", "127.0.0.1:0", "--lease", "2", "--approval-timeout", "20", "--workflow"])
            .arg(workflow)
            .arg("--workspace")
            .arg(workspace)
            .args(["--db", url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("NOETIC_TEST_WORKER_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let base = served_address(&mut child);
        Worker { child, base }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn post(client: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The call ids with an approval pending on the worker at `base` (in `session`, or all); none when it does not
/// answer (a killed worker).
pub async fn pending_calls(client: &reqwest::Client, base: &str, session: Option<&str>) -> Vec<(String, Value)> {
    let url = match session {
        Some(session) => format!("{base}/api/approvals?session={session}"),
        None => format!("{base}/api/approvals"),
    };
    let Ok(response) = client.get(url).send().await else { return Vec::new() };
    let pending: Value = response.json().await.unwrap_or(Value::Null);
    let approvals = pending["approvals"].as_array().cloned().unwrap_or_default();
    approvals.into_iter().map(|p| (p["call_id"].as_str().unwrap_or("").to_owned(), p["session"].clone())).collect()
}

/// Waits (30 s at most) until `worker` has an approval pending for `call` in `session`, and answers it.
pub async fn approve_on(client: &reqwest::Client, worker: &Worker, session: &str, call: &str, approve: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if pending_calls(client, &worker.base, Some(session)).await.iter().any(|(id, _)| id == call) {
            let body = json!({ "approve": approve, "session": session, "reason": "not this one" });
            let (status, _) = post(client, worker.url(&format!("/api/approvals/{call}")), body).await;
            assert_eq!(status, 200);
            return;
        }
        assert!(Instant::now() < deadline, "no approval for {call} on {} within 30 s", worker.base);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which worker (index) has an approval pending for `call` in `session`, waiting up to 30 s.
pub async fn who_asks(client: &reqwest::Client, workers: &[Worker], session: &str, call: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, w) in workers.iter().enumerate() {
            if pending_calls(client, &w.base, Some(session)).await.iter().any(|(id, _)| id == call) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no worker asks for {call} within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The session as its log holds it, and the worker holding its lease.
pub async fn view(store: &noetic_postgres::PgLogStore, key: &str) -> (Projection, Option<String>) {
    let holder = store.leases().unwrap().holder(key).await.unwrap();
    (Projection::load(store, key).await.unwrap(), holder)
}

/// The session as its log holds it, once no turn holds it and nothing is queued (30 s at most).
pub async fn settled(url: &str, key: &str) -> Projection {
    let store = noetic_postgres::PgLogStore::connect(url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The lease before and after the read: a turn that ended between the two reads would otherwise pass off
        // the conversation as it was before that turn's last write.
        let (_, before) = view(&store, key).await;
        let (stored, after) = view(&store, key).await;
        let holder = after.or(before);
        if stored.last > 0 && holder.is_none() && stored.open_turn.is_none() && stored.queue.is_empty() {
            return stored;
        }
        assert!(Instant::now() < deadline, "session {key} did not settle within 30 s (lease: {holder:?})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn unique_key(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

pub fn tool_results(history: &[Item]) -> Vec<(String, String)> {
    history
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some((r.call_id.to_string(), r.content.to_string())),
            _ => None,
        })
        .collect()
}
