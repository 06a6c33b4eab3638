//! `noetic ledger keygen | export | verify` on the real binary (issue 31, item 3): a session run twice through
//! the scripted model into an SQLite database, its ledger exported and tampered with line by line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;

use common::{noetic, run};

const WORKFLOW: &str = r#"
model = "scripted"
tools = ["read_file", "write_file", "delete_file"]

[[rule]]
id = "keep-readme"
deny_arg = { tool = "delete_file", arg = "path", glob = "README*" }
guidance = "README files stay."

[[rule]]
id = "short-notes"
deny_arg = { tool = "write_file", arg = "path", glob = "notes/*" }
action = "guide"
guidance = "Keep notes short."

[[scripted.response]]
tool_calls = [
  { id = "r1", name = "read_file", args = { path = "README.md" } },
  { id = "d1", name = "delete_file", args = { path = "README.md" } },
  { id = "w1", name = "write_file", args = { path = "notes/a.md", content = "x" } },
]

[[scripted.response]]
text = "Done."
"#;

struct Audit {
    dir: tempfile::TempDir,
}

impl Audit {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Two runs of session "audit" (two processes) with a signing key, into `db.sqlite`; the ledger exported.
    fn new() -> Audit {
        let audit = Audit { dir: tempfile::tempdir().unwrap() };
        let ws = audit.path("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("README.md"), "# project\n").unwrap();
        std::fs::write(audit.path("flow.toml"), WORKFLOW).unwrap();
        let keygen = run(noetic().args(["ledger", "keygen", "--out"]).arg(audit.path("k")));
        assert!(keygen.status.success(), "{}", keygen.stderr);
        for prompt in ["tidy", "again"] {
            let out = run(noetic()
                .arg("run")
                .arg(audit.path("flow.toml"))
                .args(["--prompt", prompt, "--session", "audit", "--workspace"])
                .arg(&ws)
                .arg("--db")
                .arg(audit.path("db.sqlite"))
                .arg("--ledger-key")
                .arg(audit.path("k")));
            assert!(out.status.success(), "{}", out.stderr);
        }
        let export = run(noetic()
            .args(["ledger", "export"])
            .arg(audit.path("db.sqlite"))
            .arg("--out")
            .arg(audit.path("ledger.jsonl")));
        assert!(export.status.success(), "{}", export.stderr);
        audit
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("ledger.jsonl")).unwrap().lines().map(str::to_owned).collect()
    }

    /// `noetic ledger verify` on `lines` written to `name`, with the public key: (success, stdout, stderr).
    fn verify(&self, name: &str, lines: &[String]) -> (bool, String, String) {
        std::fs::write(self.path(name), lines.join("\n") + "\n").unwrap();
        let out = run(noetic().args(["ledger", "verify"]).arg(self.path(name)).arg("--key").arg(self.path("k.pub")));
        (out.status.success(), out.stdout, out.stderr)
    }
}

fn field(line: &str, name: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(line).unwrap()[name].clone()
}

fn assert_names(audit: &Audit, name: &str, lines: &[String], expected: &str) {
    let (ok, _, stderr) = audit.verify(name, lines);
    assert!(!ok, "{name} must not verify");
    let file = audit.path(name);
    assert!(stderr.contains(&format!("{}:{expected}", file.display())), "{name}: want {expected:?} in\n{stderr}");
}

#[test]
fn an_exported_ledger_of_two_runs_verifies_and_each_edit_delete_reorder_insert_or_cut_is_named() {
    let audit = Audit::new();
    let lines = audit.lines();
    let actions: Vec<String> = lines.iter().map(|l| field(l, "action").as_str().unwrap().to_owned()).collect();
    for action in ["allow", "deny", "guide"] {
        assert!(actions.iter().any(|a| a == action), "{action} in {actions:?}");
    }
    assert!(lines.iter().enumerate().all(|(i, l)| field(l, "index") == i && field(l, "session_key") == "audit"));
    let (ok, stdout, stderr) = audit.verify("intact.jsonl", &lines);
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("session \"audit\": {} entries, chain intact, 2 signature(s) checked", lines.len())
    );
    let db =
        run(noetic().args(["ledger", "verify"]).arg(audit.path("db.sqlite")).arg("--key").arg(audit.path("k.pub")));
    assert!(db.status.success() && db.stdout == stdout, "the database verifies as its export: {}", db.stderr);

    let deny = lines.iter().position(|l| field(l, "action") == "deny").unwrap();
    let mut edited = lines.clone();
    edited[deny] = edited[deny].replace("\"deny\"", "\"allow\"");
    let at = format!("{}: session \"audit\", entry {deny}: edited", deny + 1);
    assert_names(&audit, "edited.jsonl", &edited, &at);

    let mut deleted = lines.clone();
    deleted.remove(3);
    assert_names(&audit, "deleted.jsonl", &deleted, "4: session \"audit\", entry 3: removed");

    let mut reordered = lines.clone();
    reordered.swap(2, 3);
    assert_names(&audit, "reordered.jsonl", &reordered, "3: session \"audit\", entry 2: reordered");

    let mut inserted = lines.clone();
    inserted.insert(5, lines[1].clone());
    assert_names(&audit, "inserted.jsonl", &inserted, "6: session \"audit\", entry 5: inserted");

    let cut = lines[..lines.len() - 1].to_vec();
    let (ok, _, stderr) = audit.verify("cut.jsonl", &cut);
    assert!(!ok);
    let expected = format!("session \"audit\", entry {}: truncated", lines.len() - 1);
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn a_signed_ledger_fails_with_a_wrong_key_and_a_wrong_key_file_is_named() {
    let audit = Audit::new();
    let other = audit.path("other");
    assert!(run(noetic().args(["ledger", "keygen", "--out"]).arg(&other)).status.success());
    let out = run(noetic()
        .args(["ledger", "verify"])
        .arg(audit.path("ledger.jsonl"))
        .arg("--key")
        .arg(audit.path("other.pub")));
    assert!(!out.status.success());
    assert!(out.stderr.contains("wrong signature — its signature is not this key's"), "{}", out.stderr);

    let private = run(noetic().args(["ledger", "verify"]).arg(audit.path("ledger.jsonl")).arg("--key").arg(&other));
    assert!(!private.status.success());
    let expected = format!("'{}' is not a noetic ledger public key: it is the signing key of a pair", other.display());
    assert!(private.stderr.contains(&expected), "{}", private.stderr);

    let not_a_key = run(noetic()
        .arg("run")
        .arg(audit.path("flow.toml"))
        .args(["--prompt", "x", "--ledger-key"])
        .arg(audit.path("flow.toml")));
    assert!(!not_a_key.status.success());
    let expected =
        format!("'{}' is not a noetic ledger signing key: its first line is", audit.path("flow.toml").display());
    assert!(not_a_key.stderr.contains(&expected), "{}", not_a_key.stderr);
    assert!(not_a_key.stderr.contains("noetic ledger keygen"), "says what to do: {}", not_a_key.stderr);

    let again = run(noetic().args(["ledger", "keygen", "--out"]).arg(&other));
    assert!(!again.status.success() && again.stderr.contains("keygen never overwrites a key"), "{}", again.stderr);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&other).unwrap().permissions().mode() & 0o777, 0o600);
    }
}

#[test]
fn a_broken_line_and_an_unreadable_database_are_named_and_the_viewer_still_shows_the_file() {
    let audit = Audit::new();
    let mut lines = audit.lines();
    lines[2].truncate(20);
    let (ok, _, stderr) = audit.verify("broken.jsonl", &lines);
    assert!(!ok);
    let broken = audit.path("broken.jsonl");
    assert!(stderr.contains(&format!("{}:3: the line is not JSON", broken.display())), "{stderr}");

    let bogus = audit.path("bogus.db");
    std::fs::write(&bogus, b"SQLite format 3\0 but nothing else of a database").unwrap();
    let out = run(noetic().args(["ledger", "verify"]).arg(&bogus));
    assert!(!out.status.success());
    assert!(out.stderr.contains(&format!("cannot read the session database '{}'", bogus.display())), "{}", out.stderr);
    let missing = run(noetic().args(["ledger", "export"]).arg(audit.path("none.db")));
    assert!(!missing.status.success() && missing.stderr.contains("none.db"), "{}", missing.stderr);
    assert!(!audit.path("none.db").exists(), "a missing database is not created");

    let view = run(noetic().arg("ledger").arg(audit.path("ledger.jsonl")).arg("--plain"));
    assert!(view.status.success(), "{}", view.stderr);
    assert!(
        view.stdout.contains("DENY    tool delete_file {\"path\":\"README.md\"} by keep-readme"),
        "{}",
        view.stdout
    );
    assert!(view.stdout.contains("turn 2 · started"), "{}", view.stdout);
}

#[test]
fn the_ledger_out_file_of_run_carries_the_chain_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# project\n").unwrap();
    let flow = dir.path().join("flow.toml");
    std::fs::write(&flow, WORKFLOW).unwrap();
    let ledger = dir.path().join("out.jsonl");
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "tidy", "--workspace"])
        .arg(&ws)
        .arg("--ledger-out")
        .arg(&ledger));
    assert!(out.status.success(), "{}", out.stderr);
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert!(text.lines().all(|l| field(l, "sha256").is_string()), "{text}");
    let verify = run(noetic().args(["ledger", "verify"]).arg(&ledger));
    assert!(verify.status.success(), "{}", verify.stderr);
    assert!(verify.stdout.starts_with("session \"run\": "), "{}", verify.stdout);
}
