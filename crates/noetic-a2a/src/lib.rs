//! # noetic-a2a — other agents as tools, over A2A
//!
//! [`A2aAgent::connect`] reads an agent's card (A2A 1.0, `/.well-known/agent-card.json`) and offers each of its
//! skills to the model as a tool (a [`ToolSource`]), named `<agent>__<skill>`, taking `{"message", "task_id"?}`.
//! A call sends the message to the agent (`SendStreamingMessage` when the card says it streams, else
//! `SendMessage`) and:
//!
//! * reports what the agent streams — status updates, artifact chunks — as the call's `tool_progress` events;
//! * returns `{"task_id", "state": "completed", "answer"}` when the task completes, and fails with the agent's
//!   words when it fails, is rejected or canceled;
//! * returns `{"task_id", "state": "input-required", "question"}` when the agent asks for input (or
//!   authentication): **the question is the tool's result**, so the model answers it by calling the tool again with
//!   that `task_id` (or asks the user first) — the agent's question is not our approval, which stays for our own
//!   tools' calls;
//! * cancels the agent's task (`CancelTask`) when our turn is cancelled while the call runs.
//!
//! Calls are gated by steering like any tool's: rules and the steering layer see `<agent>__<skill>` calls.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use noetic_a2a::A2aAgent;
//!
//! let helper = A2aAgent::connect("http://127.0.0.1:8081").await?;
//! let runtime = noetic::agent::Runtime::builder().tool_source(Arc::new(helper)); // … .model(…).build()
//! # let _ = runtime;
//! # Ok(()) }
//! ```

mod call;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use noetic_steps::tool::{FnTool, Tool, ToolSet, ToolSource};
use serde_json::json;

pub use wire::{Card, Skill, TaskState};

/// The separator between the agent's name and the skill's in a tool's name.
pub const NAME_SEPARATOR: &str = "__";

/// How long a call may take by default (the agent's task may run long).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why an agent could not be reached or understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum A2aError {
    /// The request did not get an answer.
    #[error("could not reach the A2A agent at {url}: {reason}")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The card is missing or unusable.
    #[error("the A2A agent card at {url} is unusable: {reason}")]
    Card {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The agent answered with a JSON-RPC error.
    #[error("the agent answered error {code}: {message}")]
    Remote {
        /// The JSON-RPC / A2A code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The agent's answer is not A2A.
    #[error("the agent's answer is not A2A 1.0 JSON-RPC: {0}")]
    Protocol(String),
}

/// How to reach an agent.
#[derive(Debug, Clone)]
pub struct A2aAgentConfig {
    /// The agent's base URL (its card is at `/.well-known/agent-card.json` under it), or the card's URL (ending
    /// in `.json`).
    pub url: String,
    /// The tools' name prefix; by default the card's name (made a valid tool name).
    pub name: Option<String>,
    /// HTTP headers for every request (e.g. `Authorization: Bearer …`).
    pub headers: BTreeMap<String, String>,
    /// The longest a call may take.
    pub timeout: Duration,
    /// Whether each call waits for our approver's decision first.
    pub require_approval: bool,
    /// Tools (by their full names, `<prefix>__<skill>`) whose calls wait for our approver's decision first, when
    /// not all do (a rule's `require_approval`).
    pub approval_tools: std::collections::BTreeSet<String>,
}

impl A2aAgentConfig {
    /// The agent at `url`, with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        A2aAgentConfig {
            url: url.into(),
            name: None,
            headers: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            require_approval: false,
            approval_tools: std::collections::BTreeSet::new(),
        }
    }

    /// The card's URL.
    pub fn card_url(&self) -> String {
        if self.url.ends_with(".json") {
            self.url.clone()
        } else {
            format!("{}/.well-known/agent-card.json", self.url.trim_end_matches('/'))
        }
    }
}

/// A connected agent: its skills as tools.
pub struct A2aAgent {
    card: Card,
    tools: ToolSet,
    prefix: String,
}

impl std::fmt::Debug for A2aAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aAgent").field("card", &self.card).finish_non_exhaustive()
    }
}

/// `name` as a tool name part: ASCII letters, digits, `-` and `_`, at most 40 characters.
fn tool_part(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(40)
        .collect();
    if cleaned.is_empty() { "agent".to_owned() } else { cleaned }
}

impl A2aAgent {
    /// Reads the card of the agent at `url` (see [`A2aAgentConfig::url`]) with the default settings.
    pub async fn connect(url: &str) -> Result<A2aAgent, A2aError> {
        A2aAgent::connect_with(A2aAgentConfig::new(url)).await
    }

    /// Reads the agent's card as `config` says, and makes its tools.
    pub async fn connect_with(config: A2aAgentConfig) -> Result<A2aAgent, A2aError> {
        let client = call::Client::new(&config)?;
        let card_url = config.card_url();
        let card = wire::parse_card(&client.card(&card_url).await?, &card_url)?;
        let prefix = tool_part(config.name.as_deref().unwrap_or(&card.name));
        let client = Arc::new(client.with_endpoint(&card));
        let skills: Vec<Option<&Skill>> =
            if card.skills.is_empty() { vec![None] } else { card.skills.iter().map(Some).collect() };
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for skill in skills {
            let name = match skill {
                Some(skill) => format!("{prefix}{NAME_SEPARATOR}{}", tool_part(&skill.id)),
                None => prefix.clone(),
            };
            let description = describe(&card, skill);
            let needs_approval = config.require_approval || config.approval_tools.contains(&name);
            let (client, skill_id, tool_name) = (client.clone(), skill.map(|s| s.id.clone()), name.clone());
            let tool = FnTool::builder(name, description)
                .input_schema(json!({
                    "type": "object",
                    "properties": {
                        "message": { "type": "string", "description": "what to ask the agent, in plain words" },
                        "task_id": { "type": "string", "description": "to answer the agent's question: the task_id of the result that asked it" },
                    },
                    "required": ["message"],
                }))
                .needs_approval(needs_approval)
                .handler(move |args, tcx| {
                    let (client, skill_id, tool_name) = (client.clone(), skill_id.clone(), tool_name.clone());
                    async move { call::run(client, &tool_name, skill_id.as_deref(), &args, &tcx).await }
                })
                .build()
                .map_err(|e| A2aError::Card { url: card_url.clone(), reason: e.to_string() })?;
            tools.push(Arc::new(tool));
        }
        let tools = ToolSet::new(tools).map_err(|e| A2aError::Card { url: card_url.clone(), reason: e.to_string() })?;
        Ok(A2aAgent { card, tools, prefix })
    }

    /// The card, as read.
    pub fn card(&self) -> &Card {
        &self.card
    }

    /// The prefix of its tools' names (`<prefix>__<skill>`, or the prefix alone for a card without skills).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// A skill's tool description: the agent, the skill, its examples, and how to answer a question.
fn describe(card: &Card, skill: Option<&Skill>) -> String {
    let mut text = format!("Ask the agent '{}' ({}).", card.name, card.description.trim_end_matches('.'));
    if let Some(skill) = skill {
        text.push_str(&format!(" Skill '{}': {}", skill.name, skill.description));
        if !skill.examples.is_empty() {
            text.push_str(&format!(" Examples: {}.", skill.examples.join("; ")));
        }
    }
    text.push_str(
        " When the result's state is input-required, the agent asks a question: call again with the answer as \
         message and the result's task_id.",
    );
    text
}

impl ToolSource for A2aAgent {
    fn snapshot(&self) -> ToolSet {
        self.tools.clone()
    }
}
