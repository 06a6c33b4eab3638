//! Assembling the agent `chat` and `run` drive: a model, the workspace tools, the rules as a steering layer.

use std::sync::Arc;

use noetic::agent::{Runtime, SteeringMode};
use noetic::layer::MemoryLayer;
use noetic::model::Model;
use noetic::steering::{SteeringConfig, SteeringLayer, steering};
use noetic::step::{Step, until};
use noetic::tool::Approver;

use crate::rules::RuleSet;
use crate::tools;
use crate::workspace::Workspace;

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
    pub store: Option<Arc<dyn noetic::agent::SessionStore>>,
    /// Sources of more tools (MCP servers).
    pub tool_sources: Vec<Arc<dyn noetic::tool::ToolSource>>,
    /// Ask for a tool call in the first round of each turn (the offline model calls tools only when asked to).
    pub first_round_tool_call: bool,
    /// Idle sessions kept in memory before the least recently used is dropped (it stays in the store).
    pub max_idle_sessions: Option<usize>,
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
    let tools = tools::built_in(&spec.workspace, spec.tools.as_deref(), &spec.rules.approval_tools())?;
    let layer = steering(SteeringConfig::new(spec.rules.steering_rules(&spec.model_id, &spec.workspace)))
        .map_err(config_error)?;
    let instructions = spec.instructions.unwrap_or_else(|| default_instructions(&spec.workspace));
    // Streamed, so the terminal shows the answer as it arrives.
    let mut llm = Step::llm("assistant", spec.model_id.as_str()).instructions(instructions).stream(true);
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
        .tools(tools)
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .agent(agent.build().map_err(config_error)?)
        .steering_mode(spec.steering_mode)
        .capture_content(crate::telemetry::captures_content());
    if let Some(approver) = spec.approver {
        builder = builder.approver(approver);
    }
    if let Some(store) = spec.store {
        builder = builder.store(store);
        if let Some(n) = spec.max_idle_sessions {
            builder = builder.max_idle_sessions(n);
        }
    }
    for source in spec.tool_sources {
        builder = builder.tool_source(source);
    }
    Ok(Agent { runtime: builder.build().map_err(config_error)?, steering: layer })
}
