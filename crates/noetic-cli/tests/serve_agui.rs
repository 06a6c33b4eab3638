//! `noetic serve`'s AG-UI endpoint driven by the official AG-UI client (`@ag-ui/client`'s `HttpAgent`, from
//! `scripts/agui-client.sh setup`), every event checked against `@ag-ui/core`'s schemas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::served::{Served, serve_command};
use common::skip;
use serde_json::{Value, json};

/// The AG-UI client's directory (`scripts/agui-client.sh setup`), or a printed reason to skip (a failure with
/// `NOETIC_E2E_REQUIRED=1`).
fn agui_client() -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_AGUI_CLIENT_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-agui-client")
    });
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules/@ag-ui/client").exists() && dir.join("node_modules/@ag-ui/core").exists() {
        return Some(dir);
    }
    skip(&format!(
        "@ag-ui/client and @ag-ui/core in {} or node are missing: run scripts/agui-client.sh setup",
        dir.display()
    ))
}

/// Runs tests/agui/`script` with node against `served`, and returns the JSON line it printed last.
fn client_test(dir: &Path, served: Served, script: &str, args: &[&Path]) -> Value {
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agui").join(script))
        .arg(&served.base)
        .args(args)
        .env("NOETIC_AGUI_CLIENT_DIR", dir)
        .output()
        .unwrap();
    let (_, server_stderr) = served.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stderr}\nseen: {stdout}\nserver: {server_stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect()
}

#[test]
fn an_agui_client_runs_a_turn_answers_its_approval_interrupts_and_steers_it_mid_run_with_valid_events() {
    let Some(dir) = agui_client() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let served = Served::spawn(serve_command(&workspace, &tmp.path().join("noetic.db"), &[]));
    let seen = client_test(&dir, served, "agui_run.mjs", &[&workspace]);

    // Run 1: started, the text streamed, the first command announced, then the interrupt for its approval.
    let first = names(&seen["first"]);
    assert_eq!(&first[..3], ["RUN_STARTED", "CUSTOM:noetic.run_routed", "STATE_SNAPSHOT"], "{first:?}");
    for kind in ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS"]
    {
        assert!(first.contains(&kind), "{kind} missing from {first:?}");
    }
    assert_eq!(first.last(), Some(&"RUN_FINISHED"));
    assert_eq!(
        seen["interrupt"],
        json!({ "reason": "tool_approval", "toolCallId": "c1", "hasSchema": true, "hasExpiry": true })
    );
    // New input while the interrupt is open is refused.
    assert_eq!(seen["blocked"], "interrupts_pending");

    // The steering run says it steered, and ends at once (with a delta if the state changed meanwhile).
    let steer = names(&seen["steer"]);
    assert_eq!(&steer[..3], ["RUN_STARTED", "CUSTOM:noetic.run_routed", "STATE_SNAPSHOT"], "{steer:?}");
    assert_eq!(steer.last(), Some(&"RUN_FINISHED"), "{steer:?}");
    assert!(steer[3..steer.len() - 1].iter().all(|k| *k == "STATE_DELTA"), "{steer:?}");
    // The resumed run: the approved command ran, the rest of the batch was skipped for the steering message, which
    // the model read and answered with a write that needs approval (the next interrupt).
    let resumed = names(&seen["resumed"]);
    assert!(resumed.contains(&"CUSTOM:noetic.approval_decided") && resumed.contains(&"CUSTOM:noetic.steering_queued"));
    let results = seen["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0][0], "c1");
    assert!(results[0][1].as_str().unwrap().ends_with("lint passed"), "{results:?}");
    assert_eq!(seen["skipped"], json!(["c2", "c3"]));
    assert_eq!(seen["injected"], true);
    assert_eq!(seen["resumedText"], "Understood: no more checks, writing notes.txt instead.");

    // The write approved, the turn ends.
    assert!(names(&seen["finished"]).contains(&"TOOL_CALL_RESULT"));
    assert_eq!(seen["finishedText"], "Wrote notes.txt, as you asked.");
    assert_eq!(seen["finalState"], json!({ "busy": false, "queued": 0, "approvals": 0 }));
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "Steered from the page.\n");

    // The same resume again changes nothing and fails nothing.
    assert_eq!(names(&seen["again"]).last(), Some(&"RUN_FINISHED"));
    // Bad input: RUN_ERROR with the API's codes; an unknown agent is not a route.
    assert_eq!(seen["badThread"], "invalid_thread_id");
    assert_eq!(seen["badBody"], json!({ "status": 200, "events": ["RUN_ERROR"], "code": "invalid_run_input" }));
    assert_eq!(seen["unknownAgent"], 404);
    assert!(seen["checked"].as_u64().unwrap() > 40, "{seen}");
    // After a run's first snapshot, its state changes come as JSON Patch deltas; applied by the client, they give
    // the state a fresh snapshot gives.
    assert!(seen["deltas"].as_u64().unwrap() > 0, "{seen}");
    assert_eq!(seen["deltasMatchSnapshot"], true);
    assert_eq!(seen["warnings"], json!([]), "the client stripped or doubted something we sent");
}
