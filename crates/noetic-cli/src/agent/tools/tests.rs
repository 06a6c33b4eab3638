//! The file tools under their path rules: a rule and the tool it guards act on the same file, also while a racing
//! process flips a symbolic link between a plain file and `.env` (Linux: the flips use `renameat2`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use noetic::agent::SteeringMode;
use noetic::model::{Item, ModelResponse, ScriptedModel};

use super::*;
use crate::agent::{self, AgentSpec};
use crate::config::source::Source;
use crate::rules::{self, RuleSet};

/// Calls per race: enough for a window of a few percent to be hit many times.
const CALLS: usize = 10_000;

/// One race at a time: each flipper needs a core to itself for the flips to land between a rule's check and the
/// tool's work.
static RACES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn rules_of(text: &str) -> RuleSet {
    rules::load(&Source::toml("rules.toml", text), &rules::ToolNames::built_in()).unwrap()
}

/// A rule denying `tool` any `.env` file.
fn no_env(tool: &str) -> RuleSet {
    rules_of(&format!(
        "[[rule]]\nid = \"no-env\"\nguidance = \"Do not touch .env files.\"\n\
         deny_arg = {{ tool = \"{tool}\", arg = \"path\", glob = \"**/.env\" }}\n"
    ))
}

/// Runs one turn of the agent `chat` and `run` build — the rules as its steering layer, the built-in tools — whose
/// scripted model makes `CALLS` calls of `tool` with `args` in one batch; returns each call's result, in order.
async fn call_many(workspace: &Path, rules: RuleSet, tool: &str, args: Value) -> Vec<(bool, String)> {
    let ids: Vec<String> = (0..CALLS).map(|i| format!("c{i}")).collect();
    let calls = ids.iter().map(|id| (id.as_str(), tool, args.clone()));
    let model = ScriptedModel::new([ModelResponse::tool_calls(calls), ModelResponse::text("done")]);
    let agent = agent::build(AgentSpec {
        model: Arc::new(model.clone()),
        model_id: "scripted".to_owned(),
        instructions: None,
        tools: None,
        rules,
        workspace: Workspace::open(workspace).unwrap(),
        max_rounds: None,
        max_iterations: None,
        steering_mode: SteeringMode::OneAtATime,
        approver: None,
        store: None,
        lease_term: noetic::agent::DEFAULT_LEASE_TERM,
        tool_sources: Vec::new(),
        first_round_tool_call: false,
        max_idle_sessions: None,
        budget: noetic::budget::Budget::default(),
        ledger_key: None,
        chain_ledger: false,
    })
    .unwrap();
    let session = agent.runtime.session("race");
    session.send("go").await.unwrap().await.unwrap();
    let results: Vec<(bool, String)> = session
        .history()
        .into_iter()
        .filter_map(|item| match item {
            Item::ToolResult(result) => Some((result.is_error, result.content.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), CALLS);
    results
}

/// Flips the link `dir/name` between `targets[0]` (where it starts) and `targets[1]` until stopped, as fast as one
/// system call a flip allows: it swaps the link with a second one (`renameat2` with `RENAME_EXCHANGE`), so the name
/// always exists.
struct Flipper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl Flipper {
    fn start(dir: &Path, name: &str, targets: [&'static str; 2]) -> Flipper {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        let (link, other): (PathBuf, PathBuf) = (dir.join(name), dir.join(format!("{name}.other")));
        std::os::unix::fs::symlink(targets[0], &link).unwrap();
        std::os::unix::fs::symlink(targets[1], &other).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut flips = 0u64;
            while !flag.load(Ordering::Relaxed) {
                renameat_with(CWD, &link, CWD, &other, RenameFlags::EXCHANGE).unwrap();
                flips += 1;
            }
            flips
        });
        Flipper { stop, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// [`call_many`] while a [`Flipper`] flips the link `name` of the workspace between `targets`; returns the results
/// and how many flips there were.
async fn race(
    workspace: &Path,
    (name, targets): (&str, [&'static str; 2]),
    rules: RuleSet,
    (tool, args): (&str, Value),
) -> (Vec<(bool, String)>, u64) {
    let _one_race = RACES.lock().await;
    let flipper = Flipper::start(workspace, name, targets);
    let results = call_many(workspace, rules, tool, args).await;
    (results, flipper.stop())
}

fn plain_and_env() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("plain.txt"), "plain").unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1").unwrap();
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_flipped_to_env_never_gets_read_file_past_the_env_rule() {
    let ws = plain_and_env();
    let link = ("x", ["plain.txt", ".env"]);
    let (results, flips) = race(ws.path(), link, no_env("read_file"), ("read_file", json!({"path": "x"}))).await;
    let leaked = results.iter().filter(|(_, out)| out.contains("SECRET")).count();
    let plain = results.iter().filter(|(_, out)| out == "plain").count();
    eprintln!("{flips} flips: {plain} plain reads, {leaked} leaked");
    assert_eq!(leaked, 0, "{leaked} of {CALLS} reads returned .env's content");
    // Each call read the file the rule checked, or the rule denied it at the gate (so the ledger has the
    // decision): the tool never found anything else than what the rule saw.
    let denied = (true, "Steering denied: Do not touch .env files.".to_owned());
    let other: Vec<_> = results.iter().filter(|r| r.1 != "plain" && **r != denied).collect();
    assert!(other.is_empty(), "{} calls ended otherwise, such as {:?}", other.len(), other.first());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_flipped_to_env_never_gets_write_file_past_the_env_rule() {
    let ws = plain_and_env();
    let (link, args) = (("x", ["plain.txt", ".env"]), json!({"path": "x", "content": "pwned"}));
    let (results, flips) = race(ws.path(), link, no_env("write_file"), ("write_file", args)).await;
    let written = results.iter().filter(|(_, out)| out.starts_with("wrote")).count();
    eprintln!("{flips} flips: {written} writes");
    assert_eq!(std::fs::read_to_string(ws.path().join(".env")).unwrap(), "SECRET=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_link_flipped_to_a_protected_folder_never_gets_delete_file_past_its_rule() {
    let ws = tempfile::tempdir().unwrap();
    for folder in ["plain", "secret"] {
        std::fs::create_dir(ws.path().join(folder)).unwrap();
        std::fs::write(ws.path().join(folder).join("f"), folder).unwrap();
    }
    let rules = rules_of(
        "[[rule]]\nid = \"keep-secret\"\nguidance = \"secret/ stays.\"\n\
         deny_arg = { tool = \"delete_file\", arg = \"path\", glob = \"secret/**\" }\n",
    );
    let (_, flips) = race(ws.path(), ("d", ["plain", "secret"]), rules, ("delete_file", json!({"path": "d/f"}))).await;
    eprintln!("{flips} flips");
    assert_eq!(std::fs::read_to_string(ws.path().join("secret/f")).unwrap(), "secret");
}

/// Without a pin (no rule looked at this call, or its pin was pushed out), a file tool still checks the path
/// rules on what it opens: a path that leads to `.env` only now is refused as the rule would refuse it.
#[test]
fn a_file_tool_checks_the_path_rules_itself_on_what_it_opens() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".env"), "SECRET=1").unwrap();
    std::os::unix::fs::symlink(".env", dir.path().join("x")).unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let rules = rules_of(
        "[[rule]]\nid = \"no-env\"\nguidance = \"No .env.\"\n\
         deny_arg = { tool = \"read_file\", arg = \"path\", glob = \"**/.env\" }\n\n\
         [[rule]]\nid = \"ask\"\naction = \"guide\"\nguidance = \"Ask first.\"\n\
         deny_arg = { tool = \"write_file\", arg = \"path\", glob = \"**/.env\" }\n",
    )
    .path_rules();
    let args = json!({"path": "x", "content": "pwned"});
    let read = on_target((&ws, &rules), ("c1", "read_file"), &args, |target| ws.read(target, 0));
    assert_eq!(read.unwrap_err(), "Steering denied: No .env.");
    let write = on_target((&ws, &rules), ("c1", "write_file"), &args, |target| ws.write(target, "pwned"));
    assert_eq!(write.unwrap_err(), "Steering guidance: Ask first.");
    assert_eq!(std::fs::read_to_string(dir.path().join(".env")).unwrap(), "SECRET=1");
    let list = on_target((&ws, &rules), ("c1", "list_dir"), &json!({}), |target| ws.list(target));
    assert_eq!(list.unwrap(), ".env\nx");
}

/// The agent runs up to 4 calls at once (`parallel_tools(4)`): only the tools that change nothing may run together.
#[test]
fn the_read_only_built_in_tools_may_run_together_and_the_others_run_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let tools = built_in(&ws, None, &BTreeSet::new(), &rules_of("").path_rules()).unwrap();
    let concurrent: Vec<&str> = tools.iter().filter(|t| t.concurrent()).map(|t| t.name()).collect();
    assert_eq!(concurrent, ["read_file", "list_dir"]);
}
