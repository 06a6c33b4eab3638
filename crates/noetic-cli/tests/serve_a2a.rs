//! `noetic serve`'s A2A endpoint driven by the official A2A client (`@a2a-js/sdk`, from `scripts/a2a-sdk.sh
//! setup`): the card, a streamed task whose approvals are `TASK_STATE_INPUT_REQUIRED` answered by replies, a
//! steering message to the working task, a blocking send, a cancel, the errors — and the task read back after the
//! server restarted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::served::{Served, raw, serve_command};
use common::skip;
use serde_json::{Value, json};

const TOKEN: &str = "a2a-e2e-token";

/// The A2A SDK's directory (`scripts/a2a-sdk.sh setup`), or a printed reason to skip (a failure with
/// `NOETIC_E2E_REQUIRED=1`).
fn a2a_sdk() -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_A2A_SDK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-a2a"));
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules/@a2a-js/sdk").exists() {
        return Some(dir);
    }
    skip(&format!("@a2a-js/sdk in {} or node is missing: run scripts/a2a-sdk.sh setup", dir.display()))
}

/// Runs tests/a2a/`script` with node and `args`, and returns the JSON line it printed last; fails with what the
/// script and the server said when the script fails.
fn client_test(dir: &Path, served: Served, script: &str, args: &[&str]) -> (Value, Served) {
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a").join(script))
        .args(args)
        .env("NOETIC_A2A_SDK_DIR", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let (_, server_stderr) = served.terminate();
        panic!("{script} failed:\n{}\nseen: {stdout}\nserver: {server_stderr}", String::from_utf8_lossy(&out.stderr));
    }
    (serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap(), served)
}

/// A JSON-RPC request to `/a2a` with the token, over a raw connection.
fn rpc(served: &Served, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let request = format!(
        "POST /a2a HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        served.authority(),
        body.len()
    );
    let answer = raw(served.authority(), &request).expect("no answer");
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body
}

#[test]
fn an_a2a_client_streams_a_task_answers_its_approvals_steers_it_cancels_another_and_reads_it_after_a_restart() {
    let Some(dir) = a2a_sdk() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let db = tmp.path().join("noetic.db");
    let served = Served::spawn(serve_command(&workspace, &db, &["--token", TOKEN]));
    let base = served.base.clone();
    let (seen, served) = client_test(&dir, served, "a2a_client.mjs", &[&base, workspace.to_str().unwrap(), TOKEN]);

    assert_eq!(
        seen["card"],
        json!({
            "name": "serve", "interface": [["JSONRPC", "1.0", "/a2a"]], "streaming": true,
            "extension": ["urn:noetic:a2a:steering:v1"], "skills": 1, "bearer": "Bearer",
        })
    );
    // The first stream: the task, the model's text, then the command's approval as input-required.
    let first: Vec<&str> = seen["first"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(first[0].starts_with("task:"), "{first:?}");
    assert!(first.contains(&"artifact"), "{first:?}");
    assert_eq!(first.last(), Some(&"status:TASK_STATE_INPUT_REQUIRED"));
    assert_eq!(seen["asked"], json!([["c1", "run_command"]]));
    assert_eq!(seen["blocked"], "interrupts_pending");
    // The reply approved it; the steering message was queued for the working task, landed when the command ended,
    // the rest of the batch was skipped, and the model answered it with a write that needs approval.
    assert_eq!(seen["steered"], json!({ "state": "TASK_STATE_WORKING", "routed": "steered", "hasId": true }));
    assert_eq!(
        seen["resumed"],
        json!([
            "task:TASK_STATE_WORKING",
            "approval_decided",
            "steering_queued",
            "tool_call_completed",
            "tool_skipped",
            "tool_skipped",
            "steering_injected",
            "artifact",
            "tool_call_started",
            "status:TASK_STATE_INPUT_REQUIRED",
        ])
    );
    assert_eq!(seen["resumedText"], "Understood: no more checks, writing notes.txt instead.");
    // A blocking reply approving the write answered with the finished task.
    let answer = "Wrote notes.txt, as you asked.";
    assert_eq!(seen["done"], json!({ "state": "TASK_STATE_COMPLETED", "answer": answer, "status": answer }));
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "Steered from the page.\n");
    assert_eq!(seen["got"], "TASK_STATE_COMPLETED");
    assert_eq!(seen["ended"], "task_ended");
    assert_eq!(seen["unknown"], "TaskNotFoundError");
    // The other task, canceled while it waited for approval.
    assert_eq!(seen["otherBefore"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(seen["subscribed"], json!(["task:TASK_STATE_INPUT_REQUIRED"]));
    assert_eq!(seen["subscribedEnded"], "UnsupportedOperationError");
    assert_eq!(seen["canceled"], "TASK_STATE_CANCELED");
    assert_eq!(seen["canceledAgain"], "TaskNotCancelableError");
    assert_eq!(seen["anonymous"], 401);
    assert_eq!(seen["unknownMethod"], -32601);

    // After a restart the task is found again, from the session in the store.
    let (status, _) = served.terminate();
    assert!(status.success(), "{status:?}");
    let served = Served::spawn(serve_command(&workspace, &db, &["--token", TOKEN]));
    let task = rpc(&served, "GetTask", json!({ "id": seen["taskId"] }));
    assert_eq!(task["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["result"]["artifacts"][0]["parts"][0]["text"], answer, "{task}");
    let (status, stderr) = served.terminate();
    assert!(status.success(), "{stderr}");
}

#[test]
fn the_agent_card_lists_the_workflows_skills_with_their_names_and_descriptions() {
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let flow = tmp.path().join("reviewer.toml");
    std::fs::write(
        &flow,
        "model = \"scripted\"\ndescription = \"Reviews code and writes release notes.\"\n\
         [[scripted.response]]\ntext = \"ok\"\n\n\
         [[skill]]\nid = \"review-code\"\nname = \"Review code\"\ndescription = \"Reviews a diff and lists the problems.\"\n\
         tags = [\"code\", \"review\"]\nexamples = [\"Review the last commit\"]\n\n\
         [[skill]]\nid = \"release-notes\"\ndescription = \"Writes release notes from the commits since a tag.\"\n",
    )
    .unwrap();
    let served = Served::spawn(common::served::workflow_command(&flow, &workspace, &tmp.path().join("noetic.db"), &[]));
    let request = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        served.authority()
    );
    let card = raw(served.authority(), &request).expect("no answer");
    served.terminate();
    assert_eq!(card.status, 200, "{:?}", card.body);
    assert_eq!(card.body["name"], "reviewer");
    assert_eq!(card.body["description"], "Reviews code and writes release notes.");
    let skills: Vec<Value> = card.body["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["id"], s["name"], s["description"], s["tags"], s["examples"]]))
        .collect();
    assert_eq!(
        skills,
        [
            json!([
                "review-code",
                "Review code",
                "Reviews a diff and lists the problems.",
                ["code", "review"],
                ["Review the last commit"]
            ]),
            json!(["release-notes", "release-notes", "Writes release notes from the commits since a tag.", [], null]),
        ]
    );
}

#[test]
fn a_workflow_skill_without_a_description_or_with_a_repeated_id_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (skills, says) in [
        ("[[skill]]\nid = \"a\"\ndescription = \"\"\n", "skill 'a' needs a description"),
        (
            "[[skill]]\nid = \"a\"\ndescription = \"x\"\n[[skill]]\nid = \"a\"\ndescription = \"y\"\n",
            "skill id 'a' is given twice",
        ),
        ("[[skill]]\nid = \"a b\"\ndescription = \"x\"\n", "skill id 'a b' must be letters"),
    ] {
        let flow = tmp.path().join("flow.toml");
        std::fs::write(&flow, format!("model = \"scripted\"\n[[scripted.response]]\ntext = \"ok\"\n\n{skills}"))
            .unwrap();
        let out = common::run(common::noetic().arg("run").arg(&flow).args(["--prompt", "hi", "--no-store"]));
        assert!(!out.status.success(), "{skills}");
        assert!(out.stderr.contains(says), "{skills}: {}", out.stderr);
    }
}
