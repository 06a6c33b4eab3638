//! Building a [`Runtime`]: the model, tools, layers, agent step, steering defaults, the session log store and the
//! budget; and the default agent (a loop around one `llm` step).

use std::sync::Arc;

use super::*;
use crate::context::Services;
use crate::error::{ConfigCode, ConfigError};
use crate::layer::{LayerStack, MemoryLayer};
use crate::model::Model;
use crate::scope::InScope;
use crate::step::{Step, until};
use crate::sync::{CachePadded, Spread};
use crate::tool::{Approver, Tool};

/// Builds a [`Runtime`]: [`RuntimeBuilder::model`] is required; [`RuntimeBuilder::build`] checks the rest and
/// fails with a [`ConfigError`].
#[derive(Default)]
pub struct RuntimeBuilder {
    services: Services,
    tools: crate::tool::Tools,
    layers: Vec<Arc<dyn MemoryLayer>>,
    agent: Option<Step<String, String>>,
    model_id: Option<String>,
    instructions: Option<String>,
    steering_mode: Option<SteeringMode>,
    queue_capacity: Option<usize>,
    batch_policy: BatchPolicy,
    stream: Option<bool>,
    log_store: Option<Arc<dyn log::LogStore>>,
    worker: Option<String>,
    lease_term: Option<std::time::Duration>,
    max_idle_sessions: Option<usize>,
    budget: crate::budget::Budget,
    ledger_key: Option<Arc<ed25519_dalek::SigningKey>>,
}

impl RuntimeBuilder {
    /// The model every `llm` step calls (required): an `Arc<dyn `[`Model`]`>` — a provider, or
    /// [`ScriptedModel`](crate::model::ScriptedModel) in tests.
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.services.model = Some(model);
        self
    }

    /// Adds a tool to the tools in scope: an `Arc<dyn `[`Tool`]`>` — a typed tool
    /// ([`tool_fn`](crate::tool::tool_fn)), an [`FnTool`](crate::tool::FnTool), or your own implementation.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.add([tool]);
        self
    }

    /// Adds tools (each an `Arc<dyn `[`Tool`]`>`) to the tools in scope.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.add(tools);
        self
    }

    /// Adds a source of tools that may change while the runtime runs (see [`ToolSource`](crate::tool::ToolSource)):
    /// each model request offers its tools as they are then.
    pub fn tool_source(mut self, source: Arc<dyn crate::tool::ToolSource>) -> Self {
        self.tools.add_source(source);
        self
    }

    /// Adds a memory layer, an `Arc<dyn `[`MemoryLayer`]`>` (the steering layer [`steering`](crate::steering::steering)
    /// builds, for instance).
    pub fn layer(mut self, layer: Arc<dyn MemoryLayer>) -> Self {
        self.layers.push(layer);
        self
    }

    /// The [`Approver`] for tools that need approval (without one, such calls are rejected).
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.services.approver = Some(approver);
        self
    }

    /// Whether traces record content — prompts, responses, tool arguments and results (default off: only sizes
    /// and ids; see [`crate::trace`]).
    pub fn capture_content(mut self, on: bool) -> Self {
        self.services.capture_content = on;
        self
    }

    /// The agent each turn runs, a [`Step`]`<String, String>` given the user message. Default: a loop around one
    /// `llm` step with all tools, until the model answers without tool calls.
    pub fn agent(mut self, agent: Step<String, String>) -> Self {
        self.agent = Some(agent);
        self
    }

    /// The model id of the default agent (default `openai/gpt-4o-mini`).
    pub fn model_id(mut self, id: impl Into<String>) -> Self {
        self.model_id = Some(id.into());
        self
    }

    /// The system instructions of the default agent.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Whether the default agent's `llm` step streams the model's answers (default: when the model streams
    /// natively). Configuration, not a consequence of who subscribes to events.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = Some(stream);
        self
    }

    /// The steering queue's dequeue mode ([`SteeringMode`]) every session starts with (default one-at-a-time); each session may
    /// change its own with [`Session::set_steering_mode`]. The library reads no environment variables: a program
    /// maps its configuration here (the CLI maps `agents.defaults.steering_mode` and
    /// `NOETIC_AGENTS_DEFAULTS_STEERING_MODE`).
    pub fn steering_mode(mut self, mode: SteeringMode) -> Self {
        self.steering_mode = Some(mode);
        self
    }

    /// Messages a session may have queued at once (default 10); each session may change its own with
    /// [`Session::set_steering_capacity`].
    pub fn steering_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = Some(capacity);
        self
    }

    /// What happens to the rest of a tool batch when steering arrives, a [`BatchPolicy`] (default: skip it).
    pub fn batch_policy(mut self, policy: BatchPolicy) -> Self {
        self.batch_policy = policy;
        self
    }

    /// Keeps every session in a session log ([`log::LogStore`]: [`log::MemoryLogStore`], or a database's, such as
    /// `noetic_sqlite::SqliteLogStore`): each durable fact of a session — a message accepted, a turn started, a
    /// model response, a tool call started and its outcome, a decision, the turn's end — is an entry, appended in
    /// the order it happened, and a session opened again (here or after a crash) is what its log says. A turn a
    /// stopped process left is resumed ([`Session::resume`]) by replaying it: nothing in the log is done again.
    /// Open sessions with [`Runtime::open`] (the first use of a [`Runtime::session`] handle reads its log too). With
    /// a store several processes share ([`log::Leases`]: SQLite, PostgreSQL), a session's turn runs where its lease
    /// is held; the others steer and stop it through the log. Without a log store, sessions live in memory only.
    pub fn log_store(mut self, store: Arc<dyn log::LogStore>) -> Self {
        self.log_store = Some(store);
        self
    }

    /// This process's name among the workers that share a session log store with leases (default: host and process
    /// id): the holder of the leases it takes, named to the others (`SessionError::BusyElsewhere`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker = Some(id.into());
        self
    }

    /// How long a lease on a shared session log lasts without renewal (default [`DEFAULT_LEASE_TERM`]): how soon
    /// another worker takes over the turn of one that died. Renewed every third of it while a turn runs.
    pub fn lease_term(mut self, term: std::time::Duration) -> Self {
        self.lease_term = Some(term);
        self
    }

    /// Keeps at most `n` idle sessions in memory: when a turn ends with more, the least recently used idle ones
    /// (not followed by anybody) are dropped from memory (their log keeps them). Needs [`RuntimeBuilder::log_store`].
    pub fn max_idle_sessions(mut self, n: usize) -> Self {
        self.max_idle_sessions = Some(n);
        self
    }

    /// The budget every session is held to unless it has one of its own ([`Session::set_budget`]): limits on what
    /// a session, and each of its turns, may spend (see [`crate::budget`]). Reaching one ends the turn at its next
    /// model request or tool call and pauses the session until a person raises it. Default: no limits. A zero or
    /// negative limit fails [`RuntimeBuilder::build`].
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Signs each turn's last ledger entry with `key` (Ed25519; see [`crate::steering::chain`]), so that
    /// [`verify`](crate::steering::verify::verify) with its public key proves the key holder wrote the turn ends
    /// and every entry before them. Needs [`RuntimeBuilder::log_store`]: the chain is kept in the session log.
    pub fn ledger_key(mut self, key: ed25519_dalek::SigningKey) -> Self {
        self.ledger_key = Some(Arc::new(key));
        self
    }

    /// Validates and builds the runtime; a missing model, two tools with one name, or an idle-session limit
    /// without a log store is a [`ConfigError`].
    pub fn build(self) -> Result<Runtime, ConfigError> {
        if self.services.model.is_none() {
            return Err(ConfigError::new(
                ConfigCode::NoModelProvider,
                "the runtime has no model",
                "call .model(...) with a provider (or ScriptedModel for tests)",
            ));
        }
        // The layers' guaranteed budgets must fit the window of the model the agent calls (when both are known).
        if let Some(model) = &self.services.model
            && (self.agent.is_none() || self.model_id.is_some())
        {
            let id = self.model_id.as_deref().unwrap_or(DEFAULT_MODEL);
            if let Some(window) = model.context_window(id) {
                let counter = model.token_counter(id);
                let counter = counter.as_deref().unwrap_or(&crate::window::Estimate);
                let instructions = self.instructions.as_deref().map_or(0, |i| counter.count(i));
                let room = window.input_room(None).saturating_sub(instructions);
                crate::window::check_minimums(room, self.layers.iter().map(|l| (l.id(), l.budget())), id)?;
            }
        }
        let agent = match self.agent {
            Some(agent) => agent,
            None => agent_step(self.model_id.as_deref().unwrap_or(DEFAULT_MODEL), self.instructions, self.stream)?,
        };
        if let Some(duplicate) = self.tools.duplicate() {
            return Err(duplicate);
        }
        if let Err(e) = self.budget.validate() {
            return Err(ConfigError::new(
                ConfigCode::InvalidBudget,
                format!("the runtime's budget is invalid: {e}"),
                "give every limit a positive value, or leave it out",
            ));
        }
        if self.max_idle_sessions.is_some() && self.log_store.is_none() {
            return Err(ConfigError::new(
                ConfigCode::MissingArchive,
                "max_idle_sessions is set but the runtime keeps no session log, so evicted sessions would be lost",
                "add .log_store(...) (MemoryLogStore, or a database's) or drop max_idle_sessions",
            ));
        }
        if self.ledger_key.is_some() && self.log_store.is_none() {
            return Err(ConfigError::new(
                ConfigCode::MissingArchive,
                "a ledger key is set but the runtime keeps no session log, where the ledger is chained and signed",
                "add .log_store(...) (MemoryLogStore, or a database's) or drop ledger_key",
            ));
        }
        // Memory declared by the tools becomes layers once, here, so every turn shares them.
        let mut layers = self.layers;
        crate::tool::add_tool_memory_layers(&mut layers, self.tools.fixed());
        let shared = {
            let in_scope =
                InScope::new(LayerStack::new(layers.clone()), self.tools).with_services(self.services.clone());
            Spread::with_first(super::first(&in_scope), move || super::replica(&in_scope))
        };
        let inner = Arc::new(RuntimeInner {
            model_id: Arc::from(self.model_id.as_deref().unwrap_or(DEFAULT_MODEL)),
            layers,
            shared,
            agent,
            default_mode: self.steering_mode.unwrap_or_default(),
            default_capacity: self.queue_capacity.unwrap_or(DEFAULT_QUEUE_CAPACITY).max(1),
            batch_policy: self.batch_policy,
            default_budget: self.budget,
            sessions: RwLock::new(HashMap::new()),
            log_hub: self.log_store.clone().map(|store| Arc::new(log_hub::LogHub::new(store))),
            log_store: self.log_store,
            worker: Arc::from(self.worker.unwrap_or_else(default_worker)),
            lease_term: self.lease_term.unwrap_or(DEFAULT_LEASE_TERM).max(std::time::Duration::from_millis(30)),
            max_idle_sessions: self.max_idle_sessions,
            ledger_key: self.ledger_key,
            clock: AtomicU64::new(0),
            global_layers: persist::Kept::default(),
            global_load: tokio::sync::Mutex::new(()),
        });
        let handles = {
            let inner = inner.clone();
            Arc::new(Spread::new(move || Arc::new(CachePadded::new(inner.clone()))))
        };
        Ok(Runtime { inner, handles })
    }
}

/// A worker name unique to this process: the host's name (when the environment says it) and the process id.
fn default_worker() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A loop around one `llm` step, until the model answers without tool calls. Later iterations (after an inbox
/// message, for instance) add no user message: the conversation already holds everything.
pub fn default_agent(model_id: &str, instructions: Option<String>) -> Result<Step<String, String>, ConfigError> {
    agent_step(model_id, instructions, None)
}

fn agent_step(
    model_id: &str,
    instructions: Option<String>,
    stream: Option<bool>,
) -> Result<Step<String, String>, ConfigError> {
    let mut llm = Step::llm("assistant", model_id);
    if let Some(stream) = stream {
        llm = llm.stream(stream);
    }
    if let Some(text) = instructions {
        llm = llm.instructions(text);
    }
    Step::loop_("agent", [llm.build()?]).until(until::no_tool_calls()).prepare_next(|_, _, _| String::new()).build()
}
