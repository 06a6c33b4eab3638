//! Helpers for tests that run the `noetic` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub mod served;
pub mod streaming;
pub mod terminal;
pub mod workers;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

/// The binary, with no provider keys or overrides from the environment.
pub fn noetic() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_noetic"));
    for var in [
        "OPENAI_API_KEY",
        "OPENROUTER_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "NOETIC_MODEL",
        "NOETIC_AGENTS_DEFAULTS_STEERING_MODE",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "NOETIC_OTEL_CAPTURE_CONTENT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("NO_COLOR", "1");
    // Sessions go to a scratch data directory of this command, never the user's.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    cmd.env("XDG_DATA_HOME", std::env::temp_dir().join(format!("noetic-cli-tests-{}-{n}", std::process::id())));
    cmd
}

/// A file of `crates/noetic-cli/examples/`.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

/// The output of a finished run.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary with stdin closed.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    Output {
        status: out.status,
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// An OpenAI chat-completions response.
pub fn completion(message: Value, finish_reason: &str) -> ResponseTemplate {
    completion_using(message, finish_reason, json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
}

/// An OpenAI chat-completions response with this `usage` object.
pub fn completion_using(message: Value, finish_reason: &str, usage: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1742205538,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage
    }))
}

/// An answer with text only.
pub fn answer(text: &str) -> ResponseTemplate {
    completion(json!({"role": "assistant", "content": text}), "stop")
}

/// The usage object of [`completion`] with a `cost` in US dollars, as OpenRouter reports it.
pub fn usage_costing(cost: f64) -> Value {
    json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "cost": cost})
}

/// An answer asking for tool calls `(id, name, args)`.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> ResponseTemplate {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    completion(json!({"role": "assistant", "content": null, "tool_calls": calls}), "tool_calls")
}

/// A running `noetic` driven line by line through its stdin, its stdout read as it comes.
pub struct Driven {
    child: Child,
    stdin: Option<Box<dyn Write + Send>>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

/// How long to wait for an expected line before declaring the process stuck (a guard against hanging, not a
/// timing assertion).
const STUCK: Duration = Duration::from_secs(60);

impl Driven {
    /// Starts the binary with piped stdin and stdout.
    pub fn spawn(mut cmd: Command) -> Self {
        cmd.stdin(Stdio::piped());
        Self::start(cmd, None)
    }

    /// Starts the binary with a pseudo-terminal as stdin (echo off), so that it asks approval questions there;
    /// stdout stays piped.
    #[cfg(unix)]
    pub fn spawn_on_terminal(mut cmd: Command) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let terminal = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
        let mut modes = tcgetattr(&terminal).unwrap();
        modes.local_modes.remove(LocalModes::ECHO);
        tcsetattr(&terminal, OptionalActions::Now, &modes).unwrap();
        cmd.stdin(Stdio::from(terminal));
        Self::start(cmd, Some(Box::new(std::fs::File::from(master))))
    }

    fn start(mut cmd: Command, stdin: Option<Box<dyn Write + Send>>) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = stdin.or_else(|| child.stdin.take().map(|s| Box::new(s) as Box<dyn Write + Send>));
        Driven { child, stdin, lines, seen: Vec::new() }
    }

    /// Types a line. A process that already ended (a refused argument ends it at once) cannot read it: that is
    /// no failure here, its output and status say what happened.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        match writeln!(stdin, "{line}").and_then(|()| stdin.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }

    /// Reads stdout until a line contains `needle`; returns that line.
    pub fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(STUCK) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let mut stderr = String::new();
                    if let Some(mut err) = self.child.stderr.take() {
                        let _ = err.read_to_string(&mut stderr);
                    }
                    panic!("never saw {needle:?}; stdout so far:\n{}\nstderr:\n{stderr}", self.seen.join("\n"));
                }
            }
        }
    }

    /// Closes stdin (if still open) and waits for the exit; returns the status, all stdout and stderr.
    pub fn finish(mut self) -> Output {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        while let Ok(line) = self.lines.recv_timeout(STUCK) {
            self.seen.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            err.read_to_string(&mut stderr).unwrap();
        }
        Output { status, stdout: self.seen.join("\n"), stderr }
    }
}

/// The set-up directory, or `None` (after saying why) when there is none and none is required.
pub fn local_model_dir() -> Option<PathBuf> {
    let dir = std::env::var("NOETIC_LOCAL_LLM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/local-llm"));
    if dir.join("ready").is_file() {
        return Some(dir);
    }
    skip(&format!("the local model is not set up in {} (scripts/local-llm.sh setup)", dir.display()))
}

/// The npm MCP reference server `bin` (`mcp-server-filesystem`, `mcp-server-everything`), installed by
/// `scripts/mcp-servers.sh setup` into `NOETIC_MCP_SERVERS_DIR` (default `~/.cache/noetic-mcp-servers`), or `None`
/// (after saying why) when it or node is missing.
pub fn mcp_server(bin: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_MCP_SERVERS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-mcp-servers")
    });
    let path = dir.join("node_modules/.bin").join(bin);
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if path.exists() && node {
        return Some(path);
    }
    skip(&format!("{} is missing (or node is): run scripts/mcp-servers.sh setup", path.display()))
}

/// A real component a test needs is missing: fails when `NOETIC_E2E_REQUIRED=1` (as `.ci/run` sets), else says why
/// the test is skipped. Returns `None` for the caller to return.
pub fn skip<T>(reason: &str) -> Option<T> {
    assert!(!std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1"), "NOETIC_E2E_REQUIRED=1 but {reason}");
    let _ = writeln!(std::io::stderr(), "skipped: {reason}");
    None
}

/// Reads a started `noetic serve`'s stdout until it prints its address, returns it (`http://127.0.0.1:PORT`), and
/// keeps draining the rest so the server never blocks on a full pipe.
pub fn served_address(child: &mut Child) -> String {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("serve printed its address before exiting").unwrap();
        if let Some(rest) = line.strip_prefix("listening on ") {
            break rest.split_whitespace().next().unwrap().trim_end_matches('/').to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    base
}
