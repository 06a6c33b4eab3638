//! `noetic serve` as users run it: the binary on a loopback port, driven over HTTP and from a real browser.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::served::{Served, browser, page_test, screenshots, until_event};
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
    let shots = screenshots("steer");
    let seen = page_test(&browser_dir, served, "steer_page.mjs", &[&workspace, &shots]);
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
    an_open_session_invites_a_message_and_says_it_is_idle(&seen);
    a_running_turn_shows_in_the_order_the_agent_saw_it_and_is_labelled_running(&seen);
    a_running_call_shows_a_running_indicator_with_its_time(&seen);
    an_approval_counts_down_to_its_deadline_and_a_write_shows_its_diff(&seen);
    the_ledger_names_rule_evaluator_decision_and_guidance_and_lists_approvals(&seen);
    a_second_session_plays_the_example_s_script_from_its_start_and_esc_stops_it(&seen);
    a_session_is_deleted_after_a_second_click_also_the_open_one_the_page_follows(&seen);
    assert_eq!(std::fs::read_dir(&shots).unwrap().count(), 13, "a screenshot per step, at 1400 and 390 px");
}

fn lines(seen: &Value, field: &str) -> Vec<String> {
    seen[field].as_array().unwrap().iter().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The first 7 items of the conversation once the steering message was answered.
const STEERED: [&str; 7] = [
    "user: run the checks",
    "assistant: Running the three checks one by one.",
    "tool done: run_command for i in $(seq 1 200); do [ -e release ] && brea",
    "tool skipped: run_command call c2",
    "tool skipped: run_command call c3",
    "user: skip the remaining checks and write notes.txt instead",
    "assistant: Understood: no more checks, writing notes.txt instead.",
];

fn an_open_session_invites_a_message_and_says_it_is_idle(seen: &Value) {
    assert_eq!(seen["placeholderBefore"], "Open or create a session first");
    let opened = json!({
        "placeholder": "Message the agent (Enter sends, Shift+Enter adds a line)",
        "state": "idle",
        "hint": "Nothing here yet: send a message to start."
    });
    assert_eq!(seen["opened"], opened, "an open session no longer asks to open one");
}

fn a_running_turn_shows_in_the_order_the_agent_saw_it_and_is_labelled_running(seen: &Value) {
    let first = [
        "user: run the checks",
        "assistant: Running the three checks one by one.",
        "tool waiting: run_command for i in $(seq 1 200); do [ -e release ] && brea",
    ];
    assert_eq!(lines(seen, "orderAtFirstApproval"), first, "the message above the reply, the call below it");
    assert!(seen["runningLabel"].as_str().unwrap().starts_with("running"), "not 'unfinished': {seen}");
    assert_eq!(seen["queuedIsLast"], true, "a queued message waits at the bottom");
    let reopened = &seen["reopened"];
    assert!(reopened["status"].as_str().unwrap().starts_with("running "), "a page opened mid-turn: {reopened}");
    assert_eq!(reopened["queued"], json!(["skip the remaining checks and write notes.txt instead"]), "{reopened}");
    assert_eq!(reopened["state"], "running", "{reopened}");
    assert_eq!(reopened["list"], "1 turn · running · 1 queued", "the list says running, not unfinished: {reopened}");
    // Before the turn ends the steering message stands where the agent read it: after the skipped calls, before
    // the answer to it; the skipped calls name their tool.
    let before_the_end = lines(seen, "orderBeforeTheEnd");
    assert_eq!(before_the_end[..7], STEERED, "{before_the_end:?}");
    assert_eq!(before_the_end[7], "tool waiting: write_file notes.txt");
    assert_eq!(lines(seen, "skippedBlocks"), ["run_command call c2", "run_command call c3"]);
    let at_the_end = lines(seen, "orderAtTheEnd");
    assert_eq!(at_the_end[..7], STEERED, "the order does not change when the turn ends");
    assert_eq!(at_the_end[7..], ["tool done: write_file notes.txt", "assistant: Wrote notes.txt, as you asked."]);
}

fn a_running_call_shows_a_running_indicator_with_its_time(seen: &Value) {
    let status = seen["runningStatus"].as_str().unwrap();
    assert!(status.starts_with("running ") && status.ends_with(" s"), "the running call counts its time: {status}");
}

fn an_approval_counts_down_to_its_deadline_and_a_write_shows_its_diff(seen: &Value) {
    let deadline = seen["deadline"].as_str().unwrap();
    assert!(deadline.starts_with("Decide within ") && deadline.contains(": rejected automatically at "), "{deadline}");
    assert!(deadline.ends_with("unless you decide."), "a deadline ahead, not one that passed: {deadline}");
    assert_eq!(seen["inlineCard"], 1, "the card also shows in the call's block");
    assert_eq!(seen["diff"], json!(["+Steered from the page.\n"]));
}

fn the_ledger_names_rule_evaluator_decision_and_guidance_and_lists_approvals(seen: &Value) {
    assert_eq!(lines(seen, "ledgerHeaders"), ["time", "decision", "rule · evaluator", "call · guidance"]);
    let approvals = lines(seen, "ledgerApprovals");
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    assert!(approvals[0].contains("approved") && approvals[0].contains("run_command (call c1)"), "{approvals:?}");
    assert!(approvals[1].contains("write_file (call w1)"), "{approvals:?}");
}

fn a_second_session_plays_the_example_s_script_from_its_start_and_esc_stops_it(seen: &Value) {
    let second = [
        "user: run the checks",
        "assistant: Running the three checks one by one.",
        "tool waiting: run_command for i in $(seq 1 200); do [ -e release ] && brea",
    ];
    assert_eq!(lines(seen, "secondSession"), second, "at 390 px");
    assert_eq!(seen["secondApproveInView"], true, "its Approve button is on the screen");
    assert_eq!(seen["stopped"], "Stopped: the turn was cancelled before it finished.");
    assert_eq!(seen["stoppedFailures"], 0, "a stop, not a failure");
}

fn a_session_is_deleted_after_a_second_click_also_the_open_one_the_page_follows(seen: &Value) {
    assert_eq!(seen["confirmLabel"], "Delete? Click again");
    assert_eq!(seen["deletedStatus"], "Deleted session old-one.");
    assert_eq!(lines(seen, "sessionsLeft"), ["browser-second", "browser-steer"]);
    assert_eq!(seen["openDeletedStatus"], "Deleted session browser-second.", "{seen}");
    assert_eq!(lines(seen, "sessionsAfter"), ["browser-steer"]);
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
    // The server hears of the other process's append (within ~100 ms on SQLite) and queues it for the turn.
    until_event(&mut events, &mut buffer, "steering_queued").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_of_the_serve_example_plays_its_script_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("release"), "").unwrap();
    let served = Served::start(&workspace, &dir.path().join("noetic.db"));
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{}", served.base, p);
    for key in ["first", "second"] {
        let mut events = client.get(url(&format!("/api/sessions/{key}/events"))).send().await.unwrap();
        let mut buffer = String::new();
        client
            .post(url(&format!("/api/sessions/{key}/messages")))
            .json(&json!({ "text": "run the checks" }))
            .send()
            .await
            .unwrap();
        let asked = until_event(&mut events, &mut buffer, "approval_requested|turn_failed").await;
        assert_eq!(
            (asked["type"].clone(), asked["call_id"].clone()),
            (json!("approval_requested"), json!("c1")),
            "{key}: {asked}"
        );
        let stop = client
            .post(url(&format!("/api/sessions/{key}/stop")))
            .header("X-Noetic-Request", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(stop.status().as_u16(), 200);
        until_event(&mut events, &mut buffer, "turn_failed").await;
    }
    served.terminate();
}
