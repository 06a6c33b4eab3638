//! `noetic serve` as users run it: the binary on a loopback port, driven over HTTP and from a real browser.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::served::{Served, browser, until_event};
use common::{example, noetic, run};
use serde_json::{Value, json};

#[test]
fn serve_refuses_a_public_address_without_a_token_and_says_how_to_fix_it() {
    let out = run(noetic()
        .args(["serve", "--bind", "0.0.0.0:0", "--no-store", "--workflow"])
        .arg(example("serve.toml"))
        .env_remove("NOETIC_SERVER_TOKEN"));
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("without an access token") && out.stderr.contains("NOETIC_SERVER_TOKEN"),
        "{}",
        out.stderr
    );
    let bad = run(noetic().args(["serve", "--bind", "localhost-ish", "--no-store"]));
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("is not an address"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_a_turn_over_http_with_an_api_approval_keeps_it_in_the_database_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    // The first check ends at once.
    std::fs::write(workspace.join("release"), "").unwrap();
    let served = Served::start(&workspace, &dir.path().join("noetic.db"));
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{}", served.base, p);
    let mut events = client.get(url("/api/sessions/api-1/events")).send().await.unwrap();
    assert_eq!(events.status().as_u16(), 200);
    let started: Value = client
        .post(url("/api/sessions/api-1/messages"))
        .json(&json!({ "text": "run the checks" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(started, json!({ "routed": "started", "turn": 1 }));
    let mut buffer = String::new();
    // run_command always needs approval; then the write does (a rule of the workflow).
    let asked = until_event(&mut events, &mut buffer, "approval_requested").await;
    assert_eq!((asked["tool"].clone(), asked["call_id"].clone()), (json!("run_command"), json!("c1")));
    let pending: Value = client.get(url("/api/approvals?session=api-1")).send().await.unwrap().json().await.unwrap();
    assert_eq!(pending["approvals"][0]["arguments"]["command"].as_str().map(|c| c.contains("lint passed")), Some(true));
    let approved = client.post(url("/api/approvals/c1")).json(&json!({ "approve": true })).send().await.unwrap();
    assert_eq!(approved.status().as_u16(), 200);
    // The other two checks are rejected with a reason the model reads.
    for id in ["c2", "c3"] {
        let asked = until_event(&mut events, &mut buffer, "approval_requested").await;
        assert_eq!(asked["call_id"], id);
        let rejected = client
            .post(url(&format!("/api/approvals/{id}")))
            .json(&json!({ "approve": false, "reason": "one check is enough" }))
            .send()
            .await
            .unwrap();
        assert_eq!(rejected.status().as_u16(), 200);
    }
    let asked = until_event(&mut events, &mut buffer, "approval_requested").await;
    assert_eq!((asked["tool"].clone(), asked["call_id"].clone()), (json!("write_file"), json!("w1")));
    let approved = client.post(url("/api/approvals/w1")).json(&json!({ "approve": true })).send().await.unwrap();
    assert_eq!(approved.status().as_u16(), 200);
    until_event(&mut events, &mut buffer, "turn_completed").await;
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "Steered from the page.\n");
    let session: Value = client.get(url("/api/sessions/api-1")).send().await.unwrap().json().await.unwrap();
    let history = session["history"].as_array().unwrap();
    assert_eq!(history.last().unwrap()["content"], "Wrote notes.txt, as you asked.");
    let list: Value = client.get(url("/api/sessions")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["sessions"][0]["key"], "api-1", "kept in the SQLite database");
    let ledger: Value = client.get(url("/api/sessions/api-1/ledger")).send().await.unwrap().json().await.unwrap();
    assert!(!ledger["entries"].as_array().unwrap().is_empty());
    let results: Vec<String> =
        history.iter().filter(|i| i["type"] == "tool_result").map(|i| i["content"].to_string()).collect();
    assert!(results[0].contains("lint passed") && results[1].contains("one check is enough"), "{results:?}");
    drop(events);
    let (status, stderr) = served.terminate();
    assert!(status.success(), "a SIGTERM is a clean stop: {stderr}");
    assert!(stderr.contains("noetic serve: stopped"), "{stderr}");
}

#[test]
fn the_page_in_a_real_browser_shows_tools_live_steers_between_them_approves_a_call_and_shows_the_ledger() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let served = Served::start(&workspace, &dir.path().join("noetic.db"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shots = root.join("test-artefacts/browser");
    let _ = std::fs::remove_dir_all(&shots);
    let out = std::process::Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/steer_page.mjs"))
        .arg(&served.base)
        .arg(&workspace)
        .arg(&shots)
        .env("NOETIC_BROWSER_DIR", &browser_dir)
        .output()
        .unwrap();
    let (_, server_stderr) = served.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the page test failed:\n{stderr}\nseen: {stdout}\nserver: {server_stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    eprintln!("screenshots: {}", shots.display());
    assert_eq!(seen["busyWhileToolRuns"], true, "Stop is offered while the tool runs");
    assert_eq!(seen["queuedShown"], true);
    assert_eq!(seen["firstApproval"], true, "the command waiting for approval is shown with its arguments");
    assert_eq!(seen["skipped"], 2, "the two checks after the running one were skipped");
    assert!(seen["approvalTool"].as_str().unwrap().contains("write_file"));
    assert_eq!(seen["notes"], "Steered from the page.\n");
    let chat: Vec<&str> = seen["chat"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let steer = chat.iter().position(|l| l.contains("skip the remaining checks")).expect("the steering message");
    let answer = chat.iter().position(|l| l.contains("Wrote notes.txt")).expect("the answer");
    assert!(steer < answer, "{chat:?}");
    assert!(seen["ledgerRows"].as_u64().unwrap() > 0);
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
    let timeline: Vec<&str> = seen["timeline"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for kind in [
        "turn_started",
        "tool_call_started",
        "steering_queued",
        "steering_injected",
        "approval_requested",
        "approval_decided",
        "turn_completed",
    ] {
        assert!(timeline.contains(&kind), "{kind} in the timeline: {timeline:?}");
    }
    assert_eq!(std::fs::read_dir(&shots).unwrap().count(), 8, "a screenshot per step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_steers_a_turn_that_serve_runs_through_the_shared_database() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let db = dir.path().join("noetic.db");
    let served = Served::start(&workspace, &db);
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{}", served.base, p);
    let mut events = client.get(url("/api/sessions/xp/events")).send().await.unwrap();
    client.post(url("/api/sessions/xp/messages")).json(&json!({ "text": "run the checks" })).send().await.unwrap();
    let mut buffer = String::new();
    until_event(&mut events, &mut buffer, "approval_requested").await;
    client.post(url("/api/approvals/c1")).json(&json!({ "approve": true })).send().await.unwrap();
    let decided = until_event(&mut events, &mut buffer, "approval_decided").await;
    assert_eq!((decided["call_id"].clone(), decided["approved"].clone()), (json!("c1"), json!(true)));
    // The first check is running in the server process: steer it from a separate process.
    let steer = run(noetic().arg("sessions").arg("--db").arg(&db).args([
        "steer",
        "xp",
        "skip the remaining checks and write notes.txt instead",
    ]));
    assert!(steer.status.success(), "{}", steer.stderr);
    assert!(steer.stdout.contains("queued for session xp"), "{}", steer.stdout);
    std::fs::write(workspace.join("release"), "").unwrap();
    let injected = until_event(&mut events, &mut buffer, "steering_injected").await;
    assert_eq!(injected["count"], 1);
    let asked = until_event(&mut events, &mut buffer, "approval_requested").await;
    assert_eq!(asked["call_id"], "w1", "c2 and c3 were skipped; the steered instruction is answered");
    client.post(url("/api/approvals/w1")).json(&json!({ "approve": true })).send().await.unwrap();
    until_event(&mut events, &mut buffer, "turn_completed").await;
    let session: Value = client.get(url("/api/sessions/xp")).send().await.unwrap().json().await.unwrap();
    let history = session["history"].as_array().unwrap();
    let steered = history.iter().filter(|i| i["content"] == "skip the remaining checks and write notes.txt instead");
    assert_eq!(steered.count(), 1, "shown to the model exactly once");
    let skipped = history.iter().filter(|i| i["type"] == "tool_result" && i["content"].to_string().contains("Skipped"));
    assert_eq!(skipped.count(), 2);
    // A message another process queues for the idle session: the server finds it (it looks every 2 s) and runs it.
    let later = run(noetic().arg("sessions").arg("--db").arg(&db).args(["steer", "xp", "and then tidy up"]));
    assert!(later.status.success(), "{}", later.stderr);
    let started = until_event(&mut events, &mut buffer, "turn_started").await;
    assert_eq!(started["turn"], 2);
    // However the script answers it (it is over), the turn ends.
    until_event(&mut events, &mut buffer, "turn_completed|turn_failed").await;
    let session: Value = client.get(url("/api/sessions/xp")).send().await.unwrap().json().await.unwrap();
    let history = session["history"].as_array().unwrap();
    assert_eq!(history.iter().filter(|i| i["content"] == "and then tidy up").count(), 1, "{history:?}");
    // A stop from another process, for an idle session, clears its queue and says so.
    let stop = run(noetic().arg("sessions").arg("--db").arg(&db).args(["stop", "xp"]));
    assert!(stop.status.success() && stop.stdout.contains("asked session xp to stop"), "{}", stop.stderr);
    let missing = run(noetic().arg("sessions").arg("--db").arg(&db).args(["stop", "nobody"]));
    assert!(!missing.status.success() && missing.stderr.contains("no session 'nobody'"), "{}", missing.stderr);
    drop(events);
    served.terminate();
}
