//! `noetic serve`: the agent behind an HTTP API and a live web page ([`noetic_server`]), so people and programs
//! can talk to it, watch it and steer it from anywhere that reaches the address.
//!
//! The agent is the one `chat` builds (model, rules, workspace, `noetic.toml`), or the one a workflow file
//! defines (`--workflow`, as for `run`). Sessions are kept in the same database as `chat` (`--db`, or
//! `--no-store` for memory only). Approvals are answered on the page or through the API; a call nobody answers
//! within `--approval-timeout` is rejected.
//!
//! Only requests that name the server as it knows itself are answered (its address, `localhost`, `127.0.0.1`,
//! `[::1]`, with its port) and the hosts of `--allowed-host`, so that a web page cannot reach it by pointing a name
//! at this machine; pages on other sites cannot change state (see [`noetic_server`]). Connections are capped and
//! time out ([`open_files`] raises the open-file limit and derives the cap from it).

mod open_files;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use noetic::agent::log::{LogStore, MemoryLogStore};
use noetic_server::{
    ALLOWED_HOSTS_ENV, AgentSkill, AllowedHost, Approvals, MAX_CONNECTIONS_LIMIT, Server, ServerConfig, TOKEN_ENV,
    check_bind,
};

use crate::agent::{self, AgentSpec};
use crate::config::Defaults;
use crate::output::{errln, outln};
use crate::provider;
use crate::provider::local;
use crate::run::workflow;

/// Idle sessions a server keeps in memory; the least recently used beyond this are dropped (they stay in the
/// store and come back on their next request), so clients touching many sessions cannot grow memory without bound.
const MAX_IDLE_SESSIONS: usize = 10_000;

/// Arguments of `noetic serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: crate::config::ConfigArg,
    /// The address to listen on. Anything but loopback needs an access token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    bind: String,
    /// The access token every API request must carry (default: $NOETIC_SERVER_TOKEN). Required unless the
    /// address is loopback.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// A host to answer besides the server's own names (its address, localhost, 127.0.0.1 and `[::1]`, with its
    /// port): HOST on any port, HOST:PORT on that port only. Repeatable; more from $NOETIC_SERVER_ALLOWED_HOSTS
    /// (comma-separated). Needed to reach the server by a DNS name or through a proxy that passes its own Host;
    /// other names are refused, so a web page cannot reach the server by pointing its name here (DNS rebinding).
    #[arg(long = "allowed-host", value_name = "HOST[:PORT]")]
    allowed_hosts: Vec<String>,
    /// The most connections open at once; at the cap a new connection closes the longest-idle one (default: what
    /// the open-file limit leaves room for, at most 1024).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Seconds a request's head may take from its first byte; a client trickling it slower is disconnected.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = header_read_timeout)]
    header_read_timeout: Duration,
    /// Seconds a connection with no request in progress stays open (event streams are never idle).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = idle_timeout)]
    idle_timeout: Duration,
    /// Seconds a tool call that needs approval waits for a decision before it is rejected (at most a day).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "300",
        value_parser = approval_timeout,
        allow_hyphen_values = true
    )]
    approval_timeout: Duration,
    /// What a new AG-UI message (POST /ag-ui/AGENT) does while its thread's turn runs: steer it, queue it for
    /// after the turn, reject it, or restart the thread with it (default: agui_busy in noetic.toml, else steer).
    #[arg(long, value_name = "POLICY", value_parser = ["steer", "queue", "reject", "restart"])]
    agui_busy: Option<String>,
    /// An agent defined in a workflow file (as for `noetic run`) instead of the chat agent.
    #[arg(long, value_name = "FILE")]
    workflow: Option<PathBuf>,
    /// The model (with --workflow, --model and --base-url override the workflow's).
    #[command(flatten)]
    model: provider::ModelArgs,
    /// Rules, workspace, mode, instructions, timeout as for chat (with --workflow, the workflow's rules apply and
    /// its workspace, mode and instructions are the defaults).
    #[command(flatten)]
    agent: agent::AgentArgs,
    #[command(flatten)]
    store: crate::sessions::StoreArgs,
}

fn approval_timeout(text: &str) -> Result<Duration, String> {
    crate::config::duration::parse("--approval-timeout", text, crate::config::duration::TIMEOUT)
}

/// Runs the server until Ctrl-C or SIGTERM.
pub async fn run(args: ServeArgs, defaults: &Defaults) -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = args.bind.parse().map_err(|_| {
        format!("--bind '{}' is not an address; write it like 127.0.0.1:8080", args.bind.escape_debug())
    })?;
    let token = args.token.clone().or_else(|| std::env::var(TOKEN_ENV).ok()).filter(|t| !t.trim().is_empty());
    check_bind(&addr, token.as_deref())?;
    let allowed_hosts = allowed_hosts(&args.allowed_hosts, std::env::var(ALLOWED_HOSTS_ENV).ok().as_deref())?;
    let max_connections = connection_cap(args.max_connections)?;
    let agui_busy = crate::config::agui_busy(args.agui_busy.as_deref(), defaults)?;
    let approvals = Approvals::new(args.approval_timeout);
    let timeout = args.agent.timeout(defaults)?;
    let store: Arc<dyn LogStore> = match crate::sessions::open(&args.store, defaults).await? {
        Some(store) => store.shared(),
        None => Arc::new(MemoryLogStore::default()),
    };
    let (spec, described, _local_server, card) = agent_spec(&args, defaults, timeout, approvals.clone(), store).await?;
    // The page shows a file write's diff with its approval, as the terminal chat does.
    let workspace = spec.workspace.clone();
    let approvals =
        approvals.with_preview(Arc::new(move |request| crate::agent::approve::preview(request, &workspace)));
    let agent = agent::build(spec)?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    if !addr.ip().is_loopback() && allowed_hosts.is_empty() {
        errln!(
            "noetic serve: clients must name this server by the address they connect to (http://ADDRESS:{}/); to \
             reach it by a DNS name or through a proxy, add --allowed-host NAME",
            bound.port()
        );
    }
    let config = ServerConfig {
        token,
        allowed_hosts,
        max_connections,
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        agent_name: agent_name(args.workflow.as_deref()),
        agui_busy,
        agent_description: card.description,
        skills: card.skills,
        ..ServerConfig::default()
    };
    let config_name = config.agent_name.clone();
    let server = Server::new(agent.runtime, approvals, config);
    outln!("noetic serve — {described}");
    outln!("listening on http://{bound}/ (open it in a browser; the API is described at /openapi.json)");
    outln!(
        "AG-UI: POST http://{bound}/ag-ui/{} (or /ag-ui/default); a message while a turn runs: {agui_busy}",
        config_name
    );
    outln!("A2A: agent card at http://{bound}/.well-known/agent-card.json, JSON-RPC at http://{bound}/a2a");
    server.serve(listener, shutdown_signal()).await?;
    errln!("noetic serve: stopped");
    Ok(())
}

/// What the A2A agent card says of the served agent: the workflow's `description` and `[[skill]]` tables.
#[derive(Default)]
struct Card {
    description: String,
    skills: Vec<AgentSkill>,
}

/// The workflow's `[[skill]]` tables as the card's skills.
fn skills(tables: &[crate::agent::a2a::SkillToml]) -> Vec<AgentSkill> {
    tables
        .iter()
        .map(|s| AgentSkill {
            id: s.id.clone(),
            name: s.name.clone().unwrap_or_else(|| s.id.clone()),
            description: s.description.clone(),
            tags: s.tags.clone(),
            examples: s.examples.clone(),
        })
        .collect()
}

/// The agent's name on the AG-UI endpoint: the workflow file's stem, or `chat` for the chat agent.
fn agent_name(workflow: Option<&std::path::Path>) -> String {
    let stem = workflow.and_then(|w| w.file_stem()).and_then(|s| s.to_str());
    let ok =
        |s: &&str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    stem.filter(ok).unwrap_or(if workflow.is_some() { "default" } else { "chat" }).to_owned()
}

/// The hosts of `--allowed-host` and of `$NOETIC_SERVER_ALLOWED_HOSTS` (comma-separated).
fn allowed_hosts(flags: &[String], env: Option<&str>) -> Result<Vec<AllowedHost>, String> {
    let from_flags = flags.iter().map(|h| (h.as_str(), "--allowed-host"));
    let from_env = env.into_iter().flat_map(|v| v.split(',')).map(str::trim).filter(|h| !h.is_empty());
    from_flags
        .chain(from_env.map(|h| (h, ALLOWED_HOSTS_ENV)))
        .map(|(host, source)| host.parse::<AllowedHost>().map_err(|e| format!("{source}: {e}")))
        .collect()
}

/// Raises the open-file limit (saying so) and returns the connection cap: `--max-connections`, or what the limit
/// leaves room for.
fn connection_cap(flag: Option<usize>) -> Result<usize, String> {
    let files = open_files::raise();
    if let (Some(from), Some(to)) = (files.raised_from, files.limit) {
        errln!("noetic serve: open-file limit raised from {from} to {to}");
    }
    if let Some(why) = &files.not_raised {
        errln!("noetic serve: {why}; serving within it");
    }
    let room = open_files::default_cap(files.limit);
    let Some(cap) = flag else { return Ok(room) };
    if cap == 0 || cap > MAX_CONNECTIONS_LIMIT {
        return Err(format!("--max-connections must be 1 to {MAX_CONNECTIONS_LIMIT}"));
    }
    if let Some(limit) = files.limit.filter(|_| cap > room) {
        errln!(
            "noetic serve: --max-connections {cap} is more than the open-file limit ({limit}) leaves room for \
             ({room}); past it, accepting fails with 'too many open files' and idle connections are closed to make room"
        );
    }
    Ok(cap)
}

/// Seconds for a connection timeout, 0.05 to 3600.
/// Connection timeouts: from 0.05 s to an hour.
const CONNECTION_TIMEOUT: crate::config::duration::Range =
    crate::config::duration::Range { min: 0.05, min_allowed: true, max: 3600.0, example: "10" };

fn header_read_timeout(text: &str) -> Result<Duration, String> {
    crate::config::duration::parse("--header-read-timeout", text, CONNECTION_TIMEOUT)
}

fn idle_timeout(text: &str) -> Result<Duration, String> {
    crate::config::duration::parse("--idle-timeout", text, CONNECTION_TIMEOUT)
}

/// The agent: from the workflow file when given, else as `chat` builds it. Also says what it is, and keeps a
/// local model server this command started alive.
async fn agent_spec(
    args: &ServeArgs,
    defaults: &Defaults,
    timeout: Option<Duration>,
    approvals: Approvals,
    store: Arc<dyn LogStore>,
) -> Result<(AgentSpec, String, Option<local::LocalServer>, Card), Box<dyn std::error::Error>> {
    if let Some(path) = &args.workflow {
        let mut flow = workflow::load(path, &defaults.mcp_servers, &defaults.a2a_agents)?;
        if let Some(model) = &args.model.model {
            flow.model = model.clone();
        }
        let local = if args.model.local { Some(local::ensure(|line| errln!("{line}")).await?) } else { None };
        let model = match &local {
            Some(server) => {
                flow.model = local::LOCAL_MODEL_ID.to_owned();
                server.model(timeout)?
            }
            None => flow.model_client(args.model.base_url.as_deref(), timeout.unwrap_or(provider::DEFAULT_TIMEOUT))?,
        };
        let servers: Vec<_> = defaults.mcp_servers.iter().chain(&flow.mcp_servers).cloned().collect();
        let described = format!("workflow {}, model {}", path.display(), flow.model);
        let spec = AgentSpec {
            model,
            model_id: flow.model.clone(),
            instructions: args.agent.instructions(defaults, flow.instructions.as_ref()),
            tools: flow.tools.clone(),
            rules: flow.rules.clone(),
            workspace: args.agent.workspace(defaults, flow.workspace.as_ref())?,
            max_rounds: flow.max_rounds,
            max_iterations: flow.max_iterations,
            steering_mode: args.agent.mode(defaults, flow.steering_mode)?,
            approver: Some(approvals.approver()),
            store: Some(store),
            lease_term: args.store.lease,
            tool_sources: crate::agent::a2a::start_with_mcp(&servers, &defaults.a2a_agents, &flow.rules).await?,
            first_round_tool_call: local.is_some(),
            max_idle_sessions: Some(MAX_IDLE_SESSIONS),
            budget: crate::config::budget::layered(&defaults.budget, &flow.budget),
            ledger_key: args.agent.ledger_key()?,
            chain_ledger: false,
        };
        let card = Card { description: flow.description.clone().unwrap_or_default(), skills: skills(&flow.skills) };
        return Ok((spec, described, local, card));
    }
    let provider::Resolved { model_id, described: provider_name, model, local_server: local } =
        args.model.resolve(defaults, timeout).await?;
    let rules = args.agent.rules(defaults)?;
    let tool_sources = crate::agent::a2a::start_with_mcp(&defaults.mcp_servers, &defaults.a2a_agents, &rules).await?;
    let workspace = args.agent.workspace(defaults, None)?;
    let described = format!(
        "model {model_id} ({provider_name}), {} rule(s), workspace {}",
        rules.len(),
        workspace.root().display()
    );
    let spec = AgentSpec {
        model,
        model_id,
        instructions: args.agent.instructions(defaults, None),
        tools: None,
        rules,
        workspace,
        max_rounds: None,
        max_iterations: None,
        steering_mode: args.agent.mode(defaults, None)?,
        approver: Some(approvals.approver()),
        store: Some(store),
        lease_term: args.store.lease,
        tool_sources,
        first_round_tool_call: local.is_some(),
        max_idle_sessions: Some(MAX_IDLE_SESSIONS),
        budget: defaults.budget,
        ledger_key: args.agent.ledger_key()?,
        chain_ledger: false,
    };
    Ok((spec, described, local, Card::default()))
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                errln!("noetic serve: cannot watch SIGTERM ({e}); Ctrl-C still stops the server");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    errln!("noetic serve: shutting down (running turns get up to 10 s to finish; the rest can be resumed)");
}
