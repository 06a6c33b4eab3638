//! Where sessions go, from the command line: `--db` into a folder that does not exist is an error (not a new,
//! empty database), `run --no-store` writes nothing, and `sessions show` prints a message's lines as lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{example, noetic, run};

#[test]
fn a_db_in_a_folder_that_does_not_exist_is_an_error_naming_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("sesions").join("noetic.db");
    let ws = tempfile::tempdir().unwrap();
    let chat = run(noetic()
        .args(["chat", "--plain", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--db"])
        .arg(&typo)
        .arg("--workspace")
        .arg(ws.path()));
    let run_cmd = run(noetic()
        .arg("run")
        .arg(example("workflow.toml"))
        .args(["--prompt", "hi", "--session", "s", "--db"])
        .arg(&typo)
        .arg("--workspace")
        .arg(ws.path()));
    let steer = run(noetic().args(["sessions", "steer", "s", "hello", "--db"]).arg(&typo));
    for out in [chat, run_cmd, steer] {
        assert!(!out.status.success(), "{}", out.stdout);
        let expected = format!(
            "the session database {} is in a folder that does not exist ({}); check the path, or create the folder",
            typo.display(),
            typo.parent().unwrap().display()
        );
        assert!(out.stderr.contains(&expected), "{}", out.stderr);
    }
    assert!(!typo.parent().unwrap().exists(), "no folder, no database was made");
}

#[test]
fn run_with_no_store_keeps_nothing_even_for_a_named_session() {
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(ws.path().join("README.md"), "# project\n").unwrap();
    std::fs::write(ws.path().join("scratch.txt"), "junk\n").unwrap();
    let out = run(noetic()
        .env("XDG_DATA_HOME", data.path())
        .arg("run")
        .arg(example("workflow.toml"))
        .args(["--prompt", "Tidy up and write a note", "--session", "kept?", "--no-store", "--workspace"])
        .arg(ws.path()));
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!data.path().join("noetic").join("noetic.db").exists(), "nothing was written");
    let both = run(noetic().args(["run", "x.toml", "--prompt", "p", "--session", "s", "--no-store", "--db", "a.db"]));
    assert!(!both.status.success() && both.stderr.contains("cannot be used with"), "{}", both.stderr);
}

#[test]
fn sessions_show_prints_the_lines_of_a_message_as_lines() {
    let (ws, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(ws.path().join("README.md"), "# project\n").unwrap();
    std::fs::write(ws.path().join("scratch.txt"), "junk\n").unwrap();
    let db = dir.path().join("sessions.db");
    let out = run(noetic()
        .arg("run")
        .arg(example("workflow.toml"))
        .args(["--prompt", "first line\nsecond line\u{1b}[2J", "--session", "lines", "--db"])
        .arg(&db)
        .arg("--workspace")
        .arg(ws.path()));
    assert!(out.status.success(), "{}", out.stderr);
    let shown = run(noetic().args(["sessions", "show", "lines", "--db"]).arg(&db));
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("  User: first line\n    second line\\u001b[2J\n"),
        "real newlines, escape codes still escaped:\n{}",
        shown.stdout
    );
    assert!(!shown.stdout.contains("first line\\n"), "{}", shown.stdout);
}
