//! A `noetic serve` process on a loopback port for the server tests, raw HTTP to it, and the browser they drive.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{example, noetic, served_address, skip};

/// A `noetic serve` process and the address it listens on.
pub struct Served {
    pub child: Child,
    pub base: String,
}

/// `noetic serve` of the example workflow on a free loopback port, with `workspace`, the database `db` and `extra`
/// arguments.
pub fn serve_command(workspace: &Path, db: &Path, extra: &[&str]) -> Command {
    workflow_command(&example("serve.toml"), workspace, db, extra)
}

/// `noetic serve` of `workflow` on a free loopback port, with `workspace`, the database `db` and `extra` arguments.
pub fn workflow_command(workflow: &Path, workspace: &Path, db: &Path, extra: &[&str]) -> Command {
    let mut cmd = noetic();
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--workflow"])
        .arg(workflow)
        .arg("--workspace")
        .arg(workspace)
        .arg("--db")
        .arg(db)
        .args(extra);
    cmd
}

/// `cmd` run by `sh` after `ulimit LIMITS` (e.g. `-n 128`), with the same arguments and environment.
#[cfg(unix)]
pub fn under_ulimit(cmd: &Command, limits: &str) -> Command {
    let mut wrapped = Command::new("sh");
    wrapped.arg("-c").arg(format!("ulimit {limits} && exec \"$0\" \"$@\"")).arg(cmd.get_program()).args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

impl Served {
    /// The example workflow served with `workspace` and the database `db`.
    pub fn start(workspace: &Path, db: &Path) -> Served {
        Served::spawn(serve_command(workspace, db, &[]))
    }

    /// Starts `cmd` (a `noetic serve`) and waits for its address.
    pub fn spawn(mut cmd: Command) -> Served {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let base = served_address(&mut child);
        Served { child, base }
    }

    /// `host:port`.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// SIGTERM, then the exit status and stderr.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        #[cfg(unix)]
        {
            let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        }
        #[cfg(not(unix))]
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    }
}

/// A test that fails before it terminates its server still stops it: the process does not outlive the test.
impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads server-sent events until one of `kind` (or of the kinds `a|b` names), returning its data.
pub async fn until_event(response: &mut reqwest::Response, buffer: &mut String, kind: &str) -> Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    let event: Value = serde_json::from_str(data).unwrap();
                    if kind.split('|').any(|k| event["type"] == k) {
                        return event;
                    }
                }
            }
        }
        let chunk = response.chunk().await.unwrap().expect("the event stream ended early");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

/// How long a test waits for an answer it expects before calling the server stuck (a guard, not a measurement).
pub const STUCK: Duration = Duration::from_secs(30);

/// A response read off a raw connection.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub body: Value,
}

impl Raw {
    /// The typed error's code, or "".
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// Sends `request` as it is (nothing normalised or added; it should say `Connection: close`) and reads the
/// response until the server closes the connection; `None` when no answer came within [`STUCK`].
pub fn raw(authority: &str, request: &str) -> Option<Raw> {
    let mut stream = TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(STUCK)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Raw { status, body: serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned())) })
}

/// Runs the page test `script` (in tests/browser) with node and `args`, and returns the JSON line it printed last;
/// fails with what the script and the server said when the script fails.
pub fn page_test(browser_dir: &Path, served: Served, script: &str, args: &[&Path]) -> Value {
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser").join(script))
        .arg(&served.base)
        .args(args)
        .env("NOETIC_BROWSER_DIR", browser_dir)
        .output()
        .unwrap();
    let (_, server_stderr) = served.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stderr}\nseen: {stdout}\nserver: {server_stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// A fresh folder for a page test's screenshots: test-artefacts/browser/NAME (git-ignored).
pub fn screenshots(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test-artefacts/browser").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// playwright-core (from `scripts/browser.sh setup`) and Chromium, or a printed reason to skip (a failure with
/// `NOETIC_E2E_REQUIRED=1`).
pub fn browser() -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_BROWSER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-browser"));
    let chromium = std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if dir.join("node_modules/playwright-core").exists() && chromium.exists() && node {
        return Some(dir);
    }
    skip(&format!(
        "playwright-core in {}, {} or node is missing: run scripts/browser.sh setup",
        dir.display(),
        chromium.display()
    ))
}
