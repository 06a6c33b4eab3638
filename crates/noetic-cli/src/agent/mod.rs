//! Assembling the agent `chat` and `run` drive: a model, the workspace tools, the rules as a steering layer.

pub(crate) mod a2a;
pub(crate) mod approve;
pub(crate) mod command;
pub(crate) mod mcp;
pub(crate) mod remembered;
pub(crate) mod tools;
pub(crate) mod workspace;

use std::sync::Arc;

use noetic::agent::{Runtime, SteeringMode};
use noetic::layer::MemoryLayer;
use noetic::model::Model;
use noetic::steering::{SteeringConfig, SteeringLayer, steering};
use noetic::step::{Step, until};
use noetic::tool::Approver;

use crate::rules::RuleSet;
use workspace::Workspace;

/// The steering queue's mode, as typed.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    /// A checkpoint takes every queued message.
    All,
    /// A checkpoint takes one message (the default).
    OneAtATime,
}

impl From<ModeArg> for SteeringMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::All => SteeringMode::All,
            ModeArg::OneAtATime => SteeringMode::OneAtATime,
        }
    }
}

/// What the agent is made of.
pub struct AgentSpec {
    /// The model client.
    pub model: Arc<dyn Model>,
    /// The model id the `llm` step (and LLM rules without their own model) ask for.
    pub model_id: String,
    /// System instructions; `None` for the default workspace assistant.
    pub instructions: Option<String>,
    /// Built-in tools to offer (`None`: all).
    pub tools: Option<Vec<String>>,
    /// The rules.
    pub rules: RuleSet,
    /// Where the tools work.
    pub workspace: Workspace,
    /// Model → tools rounds within one `llm` step.
    pub max_rounds: Option<u32>,
    /// Iterations of the agent loop.
    pub max_iterations: Option<u32>,
    /// How many queued steering messages a checkpoint takes.
    pub steering_mode: SteeringMode,
    /// Who approves calls of tools that need approval (`None`: such calls are rejected).
    pub approver: Option<Arc<dyn Approver>>,
    /// Where sessions are kept (`None`: in memory only).
    pub store: Option<Arc<dyn noetic::agent::log::LogStore>>,
    /// How long this process's hold on a running turn lasts without renewal (with a shared store).
    pub lease_term: std::time::Duration,
    /// Sources of more tools (MCP servers).
    pub tool_sources: Vec<Arc<dyn noetic::tool::ToolSource>>,
    /// Ask for a tool call in the first round of each turn (the offline model calls tools only when asked to).
    pub first_round_tool_call: bool,
    /// Idle sessions kept in memory before the least recently used is dropped (it stays in the store).
    pub max_idle_sessions: Option<usize>,
    /// Every session's budget (noetic.toml's `[budget]`, a workflow's over it).
    pub budget: noetic::budget::Budget,
    /// Signs each turn's last ledger entry (`--ledger-key`).
    pub ledger_key: Option<noetic::steering::chain::SigningKey>,
    /// Chain the ledger even without a store (for `--ledger-out`): the session is then kept in a log in memory.
    pub chain_ledger: bool,
}

/// A built agent.
pub struct Agent {
    /// The runtime (sessions are made from it).
    pub runtime: Runtime,
    /// The steering layer, for the ledger.
    pub steering: Arc<SteeringLayer>,
}

/// The instructions when none are given.
fn default_instructions(workspace: &Workspace) -> String {
    format!(
        "You are a careful assistant working in the folder {} (the workspace). Use the tools to look at and \
         change files there; paths are relative to the workspace. Keep answers short and say what you changed.",
        workspace.root().display()
    )
}

/// Builds the runtime.
pub fn build(spec: AgentSpec) -> Result<Agent, String> {
    let config_error = |e: noetic::ConfigError| e.to_string();
    let tools = tools::built_in(
        &spec.workspace,
        spec.tools.as_deref(),
        &spec.rules.approval_tools(),
        &spec.rules.path_rules(),
    )?;
    let layer = steering(SteeringConfig::new(spec.rules.steering_rules(&spec.model_id, &spec.workspace)))
        .map_err(config_error)?;
    let instructions = spec.instructions.unwrap_or_else(|| default_instructions(&spec.workspace));
    // Streamed, so the terminal shows the answer as it arrives.
    let mut llm =
        Step::llm("assistant", spec.model_id.as_str()).instructions(instructions).stream(true).parallel_tools(4);
    if spec.first_round_tool_call {
        llm = llm.first_round_tool_choice(noetic::model::ToolChoice::Required);
    }
    if let Some(rounds) = spec.max_rounds {
        llm = llm.max_rounds(rounds);
    }
    let mut agent = Step::loop_("agent", [llm.build().map_err(config_error)?])
        .until(until::no_tool_calls())
        .prepare_next(|_, _, _| String::new());
    if let Some(n) = spec.max_iterations {
        agent = agent.max_iterations(n);
    }
    let mut builder = Runtime::builder()
        .model(spec.model)
        .model_id(spec.model_id.clone())
        .tools(tools)
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .agent(agent.build().map_err(config_error)?)
        .steering_mode(spec.steering_mode)
        .budget(spec.budget)
        .capture_content(crate::telemetry::captures_content());
    for rewrite in spec.rules.rewrite_layers() {
        builder = builder.layer(rewrite);
    }
    if let Some(approver) = spec.approver {
        builder = builder.approver(approver);
    }
    // The ledger is chained (and signed) in the session log: without a store, one in memory keeps it.
    let store = spec.store.or_else(|| {
        (spec.chain_ledger || spec.ledger_key.is_some())
            .then(|| Arc::new(noetic::agent::log::MemoryLogStore::new()) as Arc<dyn noetic::agent::log::LogStore>)
    });
    if let Some(key) = spec.ledger_key {
        builder = builder.ledger_key(key);
    }
    if let Some(store) = store {
        builder = builder.log_store(store).lease_term(spec.lease_term);
        if let Some(n) = spec.max_idle_sessions {
            builder = builder.max_idle_sessions(n);
        }
    }
    for source in spec.tool_sources {
        builder = builder.tool_source(source);
    }
    Ok(Agent { runtime: builder.build().map_err(config_error)?, steering: layer })
}

/// The agent flags `chat` and `serve` share; each falls back to `noetic.toml` (and its environment overrides).
#[derive(clap::Args, Debug, Default)]
pub struct AgentArgs {
    /// A rules file (see `noetic rules FILE`).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
    /// The folder the tools may touch (default: the current folder).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// Whether read_file reads a file that has more than one name (a hard link), whose other names may be outside
    /// the workspace or protected by a rule (default: refuse). write_file never writes through one.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub hard_links: Option<workspace::HardLinks>,
    /// How many queued steering messages reach the model at a checkpoint (default: one-at-a-time, or
    /// $NOETIC_AGENTS_DEFAULTS_STEERING_MODE); each session can change its own.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// System instructions (default: a careful assistant for the workspace).
    #[arg(long)]
    pub instructions: Option<String>,
    /// Seconds a provider request may take to start answering, and the longest silence inside an answer (a
    /// stalled start is retried: 3 attempts in all). Default: agents.defaults.timeout, else 120 (300 with --local).
    #[arg(long, value_name = "SECONDS", value_parser = crate::config::duration::parse_timeout, allow_hyphen_values = true)]
    pub timeout: Option<std::time::Duration>,
    /// Sign each turn's last ledger entry with this Ed25519 key (from `noetic ledger keygen`), so that `noetic
    /// ledger verify --key FILE.pub` proves the turn ends were written by its holder.
    #[arg(long, value_name = "FILE")]
    pub ledger_key: Option<std::path::PathBuf>,
}

impl AgentArgs {
    /// The `--ledger-key` file's key, when one is given.
    pub fn ledger_key(&self) -> Result<Option<noetic::steering::chain::SigningKey>, String> {
        self.ledger_key.as_deref().map(crate::ledger::key::signing_key).transpose()
    }

    /// The provider timeout: the flag, else `agents.defaults.timeout`.
    pub fn timeout(&self, defaults: &crate::config::Defaults) -> Result<Option<std::time::Duration>, String> {
        match self.timeout {
            Some(timeout) => Ok(Some(timeout)),
            None => crate::config::timeout(defaults),
        }
    }

    /// The rules of the flag's file, else of noetic.toml's `rules`, else none. They may name tools of
    /// noetic.toml's MCP servers and A2A agents (checked when they start).
    pub fn rules(&self, defaults: &crate::config::Defaults) -> Result<RuleSet, Box<dyn std::error::Error>> {
        match self.rules.as_ref().or(defaults.rules.as_ref()) {
            Some(path) => {
                let names = a2a::tool_names(&defaults.mcp_servers, &defaults.a2a_agents);
                Ok(crate::rules::load(&crate::config::source::Source::read(path)?, &names)?)
            }
            None => Ok(RuleSet::default()),
        }
    }

    /// The workspace folder: the flag, else `fallback` (a workflow's), else noetic.toml's, else `.`.
    pub fn workspace(
        &self,
        defaults: &crate::config::Defaults,
        fallback: Option<&std::path::PathBuf>,
    ) -> Result<Workspace, String> {
        let dir = self.workspace.as_ref().or(fallback).or(defaults.workspace.as_ref());
        let workspace = Workspace::open(dir.map_or(std::path::Path::new("."), |d| d.as_path()))?;
        Ok(workspace.with_hard_links(self.hard_links.unwrap_or_default()))
    }

    /// The instructions: the flag, else `fallback` (a workflow's), else noetic.toml's.
    pub fn instructions(&self, defaults: &crate::config::Defaults, fallback: Option<&String>) -> Option<String> {
        self.instructions.clone().or_else(|| fallback.cloned()).or_else(|| defaults.instructions.clone())
    }

    /// The steering mode: the flag, else `fallback` (a workflow's), else noetic.toml's.
    pub fn mode(
        &self,
        defaults: &crate::config::Defaults,
        fallback: Option<SteeringMode>,
    ) -> Result<SteeringMode, String> {
        match (self.mode, fallback) {
            (Some(mode), _) => Ok(mode.into()),
            (None, Some(mode)) => Ok(mode),
            (None, None) => crate::config::steering_mode(defaults),
        }
    }
}
