//! `noetic.toml`: defaults for the commands, under `[agents.defaults]`.
//!
//! ```toml
//! [agents.defaults]
//! model = "openai/gpt-4o-mini"
//! provider = "openai"               # or "anthropic"
//! base_url = "http://localhost:11434/v1"
//! steering_mode = "one-at-a-time"   # or "all"
//! workspace = "."
//! rules = "rules.toml"
//! instructions = "You are careful."
//! ledger_out = "ledger.jsonl"
//! timeout = 120                     # seconds: request timeout and idle limit of the provider
//! agui_busy = "steer"               # serve: a new AG-UI message while a turn runs: steer, queue, reject, restart
//! ```
//!
//! Calls that need approval can be allowed for good, by pattern (see [`crate::agent::remembered`] for what a pattern
//! matches and why a chained command never is):
//!
//! ```toml
//! [[allow]]
//! tool = "run_command"
//! matches = "cargo test*"
//! ```
//!
//! Every session's budget is the `[budget]` table (see [`budget`]):
//!
//! ```toml
//! [budget.turn]
//! tool_calls = 50
//! wall_time = "10m"
//! ```
//!
//! The file is `--config FILE`, else `./noetic.toml` when it exists. Every key is overridden by the environment
//! variable `NOETIC_AGENTS_DEFAULTS_<KEY>` (e.g. `NOETIC_AGENTS_DEFAULTS_STEERING_MODE=all`), and a command-line
//! flag overrides both.

pub(crate) mod budget;
pub(crate) mod duration;
pub(crate) mod source;

use std::path::{Path, PathBuf};
use std::time::Duration;

use noetic::agent::SteeringMode;
use serde::Deserialize;

use crate::agent::remembered::AllowToml;

/// `--config FILE`, on the commands that read noetic.toml (chat, run, serve, sessions).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ConfigArg {
    /// Defaults file (default: ./noetic.toml when present); keys under [agents.defaults], each overridable by
    /// `NOETIC_AGENTS_DEFAULTS_<KEY>`.
    #[arg(long = "config", value_name = "FILE", global = true)]
    pub path: Option<std::path::PathBuf>,
}

/// The file's name in the current folder.
pub const FILE_NAME: &str = "noetic.toml";
/// The prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "NOETIC_AGENTS_DEFAULTS_";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agents: Agents,
    /// MCP servers whose tools join the agent's.
    #[serde(default)]
    mcp_server: Vec<crate::agent::mcp::McpServerToml>,
    /// Agents reached over A2A whose skills join the agent's tools.
    #[serde(default)]
    a2a_agent: Vec<crate::agent::a2a::A2aAgentToml>,
    /// Calls that run without an approval question.
    #[serde(default)]
    allow: Vec<AllowToml>,
    /// Every session's budget (see [`budget`]).
    budget: Option<budget::BudgetToml>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Agents {
    #[serde(default)]
    defaults: Defaults,
}

/// The defaults, after the environment's overrides.
#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// The model id.
    pub model: Option<String>,
    /// `openai` or `anthropic`.
    pub provider: Option<String>,
    /// Base URL of an OpenAI-compatible server.
    pub base_url: Option<String>,
    /// `one-at-a-time` or `all`.
    pub steering_mode: Option<String>,
    /// The folder the tools may touch.
    pub workspace: Option<PathBuf>,
    /// A rules file.
    pub rules: Option<PathBuf>,
    /// System instructions.
    pub instructions: Option<String>,
    /// Where to append ledgers.
    pub ledger_out: Option<PathBuf>,
    /// The session database.
    pub db: Option<PathBuf>,
    /// The `[[mcp_server]]` tables of the file (not under `[agents.defaults]`).
    #[serde(skip)]
    pub mcp_servers: Vec<crate::agent::mcp::McpServerToml>,
    /// The `[[a2a_agent]]` tables of the file (not under `[agents.defaults]`).
    #[serde(skip)]
    pub a2a_agents: Vec<crate::agent::a2a::A2aAgentToml>,
    /// The `[[allow]]` tables of the file (not under `[agents.defaults]`).
    #[serde(skip)]
    pub allow: Vec<AllowToml>,
    /// The `[budget]` table of the file (not under `[agents.defaults]`): every session's budget.
    #[serde(skip)]
    pub budget: noetic::budget::Budget,
    /// `noetic serve`'s AG-UI busy policy: `steer`, `queue`, `reject` or `restart` (checked by [`agui_busy`]).
    pub agui_busy: Option<String>,
    /// The provider's timeout in seconds, as written (checked by [`timeout`]).
    #[serde(default, deserialize_with = "source::number_or_text")]
    pub timeout: Option<String>,
}

/// The configured provider timeout (`timeout`, after the environment's override), `None` when unset. A value
/// outside [`duration::TIMEOUT`] is an error naming it, where it came from and the range.
pub fn timeout(defaults: &Defaults) -> Result<Option<Duration>, String> {
    defaults
        .timeout
        .as_deref()
        .map(|value| {
            crate::config::duration::parse_timeout(value)
                .map_err(|e| format!("agents.defaults.timeout (from {FILE_NAME} or {ENV_PREFIX}TIMEOUT): {e}"))
        })
        .transpose()
}

/// The configured steering mode (`steering_mode`, after the environment's override), one-at-a-time when
/// unset. A value that is neither `one-at-a-time` nor `all` is an error naming it, where it came from and the
/// valid values: a typo must not silently pick a mode.
pub fn steering_mode(defaults: &Defaults) -> Result<SteeringMode, String> {
    match defaults.steering_mode.as_deref() {
        None => Ok(SteeringMode::default()),
        Some(value) => SteeringMode::parse(value).map_err(|e| {
            format!(
                "agents.defaults.steering_mode (from {FILE_NAME} or {ENV_PREFIX}STEERING_MODE): {} — {}",
                e.message, e.hint
            )
        }),
    }
}

/// The AG-UI busy policy: `flag` (`--agui-busy`), else `agui_busy` (after the environment's override), else steer.
/// A value that is not a policy is an error naming it, where it came from and the valid values.
pub fn agui_busy(flag: Option<&str>, defaults: &Defaults) -> Result<noetic_server::BusyPolicy, String> {
    match (flag, defaults.agui_busy.as_deref()) {
        (Some(flag), _) => flag.parse().map_err(|e| format!("--agui-busy: {e}")),
        (None, Some(value)) => value
            .parse()
            .map_err(|e| format!("agents.defaults.agui_busy (from {FILE_NAME} or {ENV_PREFIX}AGUI_BUSY): {e}")),
        (None, None) => Ok(noetic_server::BusyPolicy::default()),
    }
}

/// Reads the defaults: the file (`explicit`, else `./noetic.toml` if present), then the environment.
pub fn load(explicit: Option<&Path>) -> Result<Defaults, String> {
    load_with(explicit, |key| std::env::var(key).ok())
}

/// [`load`] with the environment given as a function (for tests).
pub fn load_with(explicit: Option<&Path>, env: impl Fn(&str) -> Option<String>) -> Result<Defaults, String> {
    let path = match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(FILE_NAME)).filter(|p| p.is_file()),
    };
    let mut defaults = match &path {
        None => Defaults::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
            let file: File = toml::from_str(&text).map_err(|e| {
                format!("{}: {}", path.display(), e.to_string().trim_end()).replace("TOML parse error", "error")
            })?;
            // Checked now, so a bad table stops the command before anything starts.
            for server in &file.mcp_server {
                server.config().map_err(|e| format!("{}: {e}", path.display()))?;
            }
            for agent in &file.a2a_agent {
                agent.config().map_err(|e| format!("{}: {e}", path.display()))?;
            }
            for (n, allow) in file.allow.iter().enumerate() {
                crate::agent::remembered::compile(&allow.matches)
                    .map_err(|e| format!("{}: [[allow]] number {}: {e}", path.display(), n + 1))?;
            }
            let budget = match &file.budget {
                Some(table) => {
                    let source = source::Source {
                        name: path.display().to_string(),
                        format: source::Format::Toml,
                        text: text.clone(),
                    };
                    table.check(&source, &[source::Seg::Key("budget")]).map_err(|e| e.to_string())?
                }
                None => noetic::budget::Budget::default(),
            };
            Defaults {
                budget,
                mcp_servers: file.mcp_server,
                a2a_agents: file.a2a_agent,
                allow: file.allow,
                ..file.agents.defaults
            }
        }
    };
    let var = |key: &str| env(&format!("{ENV_PREFIX}{key}")).filter(|v| !v.trim().is_empty());
    let text = |slot: &mut Option<String>, key: &str| {
        if let Some(v) = var(key) {
            *slot = Some(v);
        }
    };
    text(&mut defaults.model, "MODEL");
    text(&mut defaults.provider, "PROVIDER");
    text(&mut defaults.base_url, "BASE_URL");
    text(&mut defaults.steering_mode, "STEERING_MODE");
    text(&mut defaults.instructions, "INSTRUCTIONS");
    text(&mut defaults.timeout, "TIMEOUT");
    text(&mut defaults.agui_busy, "AGUI_BUSY");
    let path_var = |slot: &mut Option<PathBuf>, key: &str| {
        if let Some(v) = var(key) {
            *slot = Some(PathBuf::from(v));
        }
    };
    path_var(&mut defaults.workspace, "WORKSPACE");
    path_var(&mut defaults.rules, "RULES");
    path_var(&mut defaults.ledger_out, "LEDGER_OUT");
    path_var(&mut defaults.db, "DB");
    Ok(defaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("noetic.toml");
        std::fs::write(&path, text).unwrap_or_else(|e| unreachable!("{e}"));
        (dir, path)
    }

    #[test]
    fn a_bogus_steering_mode_in_the_file_or_the_environment_is_an_error_naming_it() {
        let (_dir, path) = write("[agents.defaults]\nsteering_mode = \"bogus\"\n");
        let from_file = load_with(Some(&path), |_| None).unwrap_or_else(|e| unreachable!("{e}"));
        let err = steering_mode(&from_file).err().unwrap_or_else(|| unreachable!("bogus was accepted"));
        assert!(err.contains("'bogus'") && err.contains("\"one-at-a-time\" or \"all\""), "{err}");
        let from_env = load_with(None, |k| (k == "NOETIC_AGENTS_DEFAULTS_STEERING_MODE").then(|| "Alll".to_owned()))
            .unwrap_or_else(|e| unreachable!("{e}"));
        let err = steering_mode(&from_env).err().unwrap_or_else(|| unreachable!("Alll was accepted"));
        assert!(err.contains("'Alll'") && err.contains("NOETIC_AGENTS_DEFAULTS_STEERING_MODE"), "{err}");
        let fine = load_with(None, |k| (k == "NOETIC_AGENTS_DEFAULTS_STEERING_MODE").then(|| "all".to_owned()))
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(steering_mode(&fine), Ok(SteeringMode::All));
        assert_eq!(steering_mode(&Defaults::default()), Ok(SteeringMode::OneAtATime));
    }

    #[test]
    fn the_timeout_comes_from_the_file_or_the_environment_and_a_bad_one_is_an_error_naming_it() {
        let (_dir, path) = write("[agents.defaults]\ntimeout = 30\n");
        let from_file = load_with(Some(&path), |_| None).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(timeout(&from_file), Ok(Some(Duration::from_secs(30))));
        let (_dir, path) = write("[agents.defaults]\ntimeout = 2.5\n");
        let fractional = load_with(Some(&path), |_| None).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(timeout(&fractional), Ok(Some(Duration::from_millis(2500))));
        let env =
            |value: &'static str| move |k: &str| (k == "NOETIC_AGENTS_DEFAULTS_TIMEOUT").then(|| value.to_owned());
        let from_env = load_with(Some(&path), env("45")).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(timeout(&from_env), Ok(Some(Duration::from_secs(45))), "the environment overrides the file");
        assert_eq!(timeout(&Defaults::default()), Ok(None));
        let zero = load_with(None, env("0")).unwrap_or_else(|e| unreachable!("{e}"));
        let err = timeout(&zero).err().unwrap_or_default();
        assert!(err.contains("'0' is not a valid timeout") && err.contains("NOETIC_AGENTS_DEFAULTS_TIMEOUT"), "{err}");
        let (_dir, path) = write("[agents.defaults]\ntimeout = -5\n");
        let negative = load_with(Some(&path), |_| None).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(timeout(&negative).err().unwrap_or_default().contains("'-5' is not a valid timeout"));
        let (_dir, path) = write("[agents.defaults]\ntimeout = \"soon\"\n");
        let text = load_with(Some(&path), |_| None).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(timeout(&text).err().unwrap_or_default().contains("'soon' is not a valid timeout"));
    }

    #[test]
    fn the_file_sets_defaults_and_the_environment_overrides_them() {
        let (_dir, path) = write("[agents.defaults]\nmodel = \"from-file\"\nsteering_mode = \"all\"\n");
        let d = load_with(Some(&path), |_| None).unwrap_or_default();
        assert_eq!((d.model.as_deref(), d.steering_mode.as_deref()), (Some("from-file"), Some("all")));
        let d = load_with(Some(&path), |k| (k == "NOETIC_AGENTS_DEFAULTS_MODEL").then(|| "from-env".to_owned()))
            .unwrap_or_default();
        assert_eq!(d.model.as_deref(), Some("from-env"));
        assert_eq!(d.steering_mode.as_deref(), Some("all"), "keys the environment does not name stay");
    }

    #[test]
    fn an_unknown_key_is_an_error_with_its_line() {
        let (_dir, path) = write("[agents.defaults]\nmodel = \"m\"\nsteering_mod = \"all\"\n");
        let err = load_with(Some(&path), |_| None).err().unwrap_or_default();
        assert!(err.contains("line 3") && err.contains("steering_mod"), "{err}");
    }

    #[test]
    fn allow_tables_are_read_and_a_bad_pattern_is_an_error_naming_the_table() {
        let (_dir, path) =
            write("[agents.defaults]\nmodel = \"m\"\n\n[[allow]]\ntool = \"run_command\"\nmatches = \"cargo test*\"\n");
        let d = load_with(Some(&path), |_| None).unwrap_or_default();
        assert_eq!(d.allow, [AllowToml { tool: "run_command".into(), matches: "cargo test*".into() }]);
        let (_dir, path) = write("[[allow]]\ntool = \"run_command\"\nmatches = \"a[\"\n");
        let err = load_with(Some(&path), |_| None).err().unwrap_or_default();
        assert!(err.contains("[[allow]] number 1: the pattern \"a[\" is not a valid glob"), "{err}");
        let (_dir, path) = write("[[allow]]\ntool = \"run_command\"\nmatch = \"x\"\n");
        assert!(load_with(Some(&path), |_| None).err().unwrap_or_default().contains("match"));
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        let err = load_with(Some(Path::new("/nonexistent/noetic.toml")), |_| None).err().unwrap_or_default();
        assert!(err.contains("cannot read the configuration"), "{err}");
    }
}
