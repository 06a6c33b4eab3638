//! `noetic run WORKFLOW --prompt TEXT`: one turn of an agent defined in a file, for scripts.
//!
//! The answer goes to stdout (with [`printable`]'s escapes); progress lines (tool calls, rule decisions, skips) go to stderr. With `--json`,
//! stdout carries every event as a JSON line, then `{"type":"ledger",...}` and `{"type":"answer","text":...}`
//! (or `{"type":"error","message":...}`), with the turn's `"cost"` in US dollars when the provider reported one.
//! Rounds count from 1 there, as on the progress lines.

pub(crate) mod workflow;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use noetic::EventKind;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::agent::approve;
use crate::agent::workspace::Workspace;
use crate::agent::{self, AgentSpec};
use crate::output::render::{Style, event_line, printable};
use crate::output::{errln, outln};
use crate::provider::local;
use crate::{ledger, provider};

/// Arguments of `noetic run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: crate::config::ConfigArg,
    /// The workflow file (TOML, or JSON with a .json extension).
    workflow: PathBuf,
    /// The user message the agent works on.
    #[arg(long, short)]
    prompt: String,
    /// Print every event as a JSON line, then the ledger and the answer as JSON lines.
    #[arg(long)]
    json: bool,
    /// Append the turn's steering ledger to FILE as JSON lines (show it with `noetic ledger FILE`).
    #[arg(long, value_name = "FILE")]
    ledger_out: Option<PathBuf>,
    /// Sign the turn's last ledger entry with this Ed25519 key (from `noetic ledger keygen`); see `noetic ledger
    /// verify --key`.
    #[arg(long, value_name = "FILE")]
    ledger_key: Option<PathBuf>,
    /// A rules file whose rules apply besides the workflow's own (ids must differ).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// How many queued steering messages reach the model at a checkpoint (overrides the workflow's
    /// `steering_mode`).
    #[arg(long, value_enum)]
    mode: Option<crate::agent::ModeArg>,
    /// System instructions (override the workflow's `instructions`).
    #[arg(long)]
    instructions: Option<String>,
    /// The folder the tools work in (overrides the workflow's `workspace`; default: the current folder).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Whether read_file reads a file that has more than one name (a hard link), whose other names may be outside
    /// the workspace or protected by a rule (default: refuse). write_file never writes through one.
    #[arg(long, value_enum, value_name = "POLICY")]
    hard_links: Option<crate::agent::workspace::HardLinks>,
    /// The model id (overrides the workflow's `model`).
    #[arg(long)]
    model: Option<String>,
    /// Base URL of an OpenAI-compatible server (overrides the workflow's `base_url`).
    #[arg(long, value_name = "URL", conflicts_with = "local")]
    base_url: Option<String>,
    /// Use the offline model (llama.cpp's server with SmolLM2-135M, set up by `scripts/local-llm.sh setup`)
    /// whatever the workflow names: started for this run unless it already runs, stopped at the end.
    #[arg(long, conflicts_with = "model")]
    local: bool,
    /// Seconds a provider request may take to start answering, and the longest silence inside an answer (a
    /// stalled start is retried: 3 attempts in all). Overrides the workflow's `timeout` and
    /// `agents.defaults.timeout`; default 120 (300 with --local).
    #[arg(long, value_name = "SECONDS", value_parser = crate::config::duration::parse_timeout, allow_hyphen_values = true)]
    timeout: Option<Duration>,
    /// No colours on the progress lines.
    #[arg(long)]
    plain: bool,
    /// Continue this stored session (it is created if new) instead of a throwaway one; see `noetic sessions`.
    #[arg(long, value_name = "NAME")]
    session: Option<String>,
    /// The session database for --session (default: as for chat).
    #[arg(long, value_name = "FILE", requires = "session")]
    db: Option<std::path::PathBuf>,
    /// Write nothing: the session, also one named by --session, lives in memory for this run only (a run without
    /// --session is never kept).
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
}

/// Runs the workflow once.
pub async fn run(args: RunArgs, defaults: &crate::config::Defaults) -> Result<(), Box<dyn std::error::Error>> {
    let mut flow = workflow::load(&args.workflow, &defaults.mcp_servers, &defaults.a2a_agents)?;
    if let Some(model) = &args.model {
        flow.model = model.clone();
    }
    let servers: Vec<_> = defaults.mcp_servers.iter().chain(&flow.mcp_servers).cloned().collect();
    if let Some(path) = &args.rules {
        let extra = crate::rules::load(
            &crate::config::source::Source::read(path)?,
            &crate::agent::a2a::tool_names(&servers, &defaults.a2a_agents),
        )?;
        flow.rules.extend(extra).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(mode) = args.mode {
        flow.steering_mode = Some(mode.into());
    }
    if let Some(instructions) = &args.instructions {
        flow.instructions = Some(instructions.clone());
    }
    let dir = args.workspace.clone().or_else(|| flow.workspace.clone()).unwrap_or_else(|| PathBuf::from("."));
    let timeout = match args.timeout.or(flow.timeout) {
        Some(timeout) => Some(timeout),
        None => crate::config::timeout(defaults)?,
    };
    // `_local_server` lives until the run ends: dropping it stops a server this run started.
    let (model, _local_server) = if args.local {
        let server = local::ensure(|line| errln!("{line}")).await?;
        flow.model = local::LOCAL_MODEL_ID.to_owned();
        (server.model(timeout)?, Some(server))
    } else {
        (flow.model_client(args.base_url.as_deref(), timeout.unwrap_or(provider::DEFAULT_TIMEOUT))?, None)
    };
    // What `[[allow]]` approved without a question, for the ledger.
    let allowed = crate::agent::remembered::AllowLog::default();
    // A line typed at an approval question that is not an answer is steered into the session, set once it exists.
    let steer_to = Arc::new(OnceLock::new());
    let workspace = Workspace::open(&dir)?.with_hard_links(args.hard_links.unwrap_or_default());
    let spec = AgentSpec {
        model,
        model_id: flow.model.clone(),
        instructions: flow.instructions.clone(),
        tools: flow.tools.clone(),
        rules: flow.rules.clone(),
        workspace: workspace.clone(),
        max_rounds: flow.max_rounds,
        max_iterations: flow.max_iterations,
        steering_mode: flow.steering_mode.map_or_else(|| crate::config::steering_mode(defaults), Ok)?,
        approver: Some(approve::at_terminal(
            steer_to.clone(),
            workspace,
            crate::agent::remembered::Remembered::configured(&defaults.allow)?,
            allowed.clone(),
        )),
        store: match &args.session {
            Some(_) => {
                let store_args = crate::sessions::StoreArgs {
                    db: args.db.clone(),
                    no_store: args.no_store,
                    ..crate::sessions::StoreArgs::default()
                };
                crate::sessions::open(&store_args, defaults).await?.map(|s| s.shared())
            }
            None => None,
        },
        lease_term: crate::sessions::StoreArgs::default().lease,
        tool_sources: crate::agent::a2a::start_with_mcp(&servers, &defaults.a2a_agents, &flow.rules).await?,
        first_round_tool_call: args.local,
        max_idle_sessions: None,
        budget: crate::config::budget::layered(&defaults.budget, &flow.budget),
        ledger_key: args.ledger_key.as_deref().map(crate::ledger::key::signing_key).transpose()?,
        chain_ledger: args.ledger_out.is_some(),
    };
    let agent = agent::build(spec)?;
    let session = match &args.session {
        Some(name) => agent.runtime.open(name).await?,
        None => agent.runtime.open("run").await?,
    };
    let mut ledger_out = args.ledger_out.clone().map(|path| ledger::LedgerOut::new(path, &session));
    if session.unfinished_turn().is_some() {
        errln!("session {}: finishing the turn a stopped process left before this prompt", session.key());
        if let Some(turn) = session.resume().await? {
            turn.await?;
        }
    }
    let _ = steer_to.set(session.clone());
    allowed.chain_into(session.clone());
    let mut events = session.subscribe();
    let turn = session.send(args.prompt.clone()).await?;
    let style = Style::detect(args.plain);
    let mut execution = None;
    // The turn's model calls: their cost, when any reported one, goes on the last `--json` line.
    let mut usage = noetic::model::Usage::default();
    loop {
        match events.recv().await {
            Ok(event) => {
                if args.json {
                    outln!("{}", json_event(&event)?);
                } else if let Some(line) = event_line(&style, &event.kind) {
                    errln!("{line}");
                }
                match &event.kind {
                    EventKind::TurnStarted { .. } => execution = Some(event.execution_id),
                    EventKind::ModelCallCompleted { usage: call, .. } => usage.add(call),
                    EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => break,
                    _ => {}
                }
            }
            Err(RecvError::Lagged(n)) => errln!("({n} events were not shown: the terminal fell behind)"),
            Err(RecvError::Closed) => break,
        }
    }
    let answer = turn.await;
    let mut entries = execution.map(|id| agent.steering.ledger(id)).unwrap_or_default();
    entries.extend(crate::agent::remembered::take(&allowed));
    if let Some(file) = &mut ledger_out {
        file.flush(&session)?;
    }
    match answer {
        Ok(text) if args.json => {
            outln!("{}", json!({"type": "ledger", "entries": entries}));
            outln!("{}", with_cost(json!({"type": "answer", "text": text}), &usage));
            Ok(())
        }
        Ok(text) => {
            outln!("{}", printable(&text));
            Ok(())
        }
        Err(e) => {
            if args.json {
                outln!("{}", json!({"type": "ledger", "entries": entries}));
                outln!("{}", with_cost(json!({"type": "error", "message": e.to_string()}), &usage));
            }
            Err(format!("the turn failed: {e}").into())
        }
    }
}

/// A `--json` line with the turn's `cost` in US dollars added, when a model call reported one (else left out:
/// no made-up zero).
fn with_cost(mut line: serde_json::Value, usage: &noetic::model::Usage) -> serde_json::Value {
    if let (Some(cost), Some(fields)) = (usage.cost, line.as_object_mut()) {
        fields.insert("cost".to_owned(), json!(cost));
    }
    line
}

/// An event as a `--json` line: the library's JSON, with `round` counted from 1 as the progress lines count it
/// (the library counts from 0).
fn json_event(event: &noetic::Event) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(event)?;
    if let Some(round) = value.get_mut("round")
        && let Some(n) = round.as_u64()
    {
        *round = json!(n + 1);
    }
    serde_json::to_string(&value)
}
