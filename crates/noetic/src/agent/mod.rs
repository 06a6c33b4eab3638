//! Agent sessions: a [`Runtime`] holds the model, tools, layers and the agent step; each [`Session`] keeps one
//! conversation and runs one [`Turn`] at a time.
//!
//! ```
//! use std::sync::Arc;
//! use noetic::agent::Runtime;
//! use noetic::model::{ModelResponse, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new([ModelResponse::text("Hello!")]);
//! let runtime = Runtime::builder().model(Arc::new(model)).build()?;
//! let session = runtime.session("user-42");
//! let answer = session.send("hi")?.await?;
//! assert_eq!(answer, "Hello!");
//! assert_eq!(session.history().len(), 2);
//! # Ok(())
//! # }
//! ```

mod bus;
mod checkpoint;
mod queue;
mod replies;
mod session;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

pub use bus::{
    BusReply, DEFAULT_TRANSCRIPTION_TIMEOUT, Delivery, InboundMessage, MessageBus, STOP_COMMAND, Transcriber,
};
pub(crate) use checkpoint::SessionSettings;
pub use checkpoint::{BatchPolicy, SKIPPED_RESULT, TurnSteering};
pub use queue::{DEFAULT_QUEUE_CAPACITY, MessageId, SteerError, SteerMessage, SteeringMode, SteeringQueue};
pub use replies::{BusReplies, DEFAULT_REPLY_CAPACITY, TryRecvError};
pub use session::{Routed, SESSION_EVENT_LOG_CAPACITY, Session, SessionError, Turn};

use crate::context::Services;
use crate::error::{ConfigCode, ConfigError};
use crate::layer::MemoryLayer;
use crate::model::Model;
use crate::step::{Step, until};
use crate::tool::{Approver, Tool};

/// The model id the default agent uses.
pub const DEFAULT_MODEL: &str = "openai/gpt-4o-mini";

pub(crate) struct RuntimeInner {
    pub(crate) services: Services,
    pub(crate) layers: Vec<Arc<dyn MemoryLayer>>,
    pub(crate) agent: Step<String, String>,
    /// The steering mode and queue capacity new sessions start with.
    default_mode: SteeringMode,
    default_capacity: usize,
    pub(crate) batch_policy: BatchPolicy,
    /// Read-mostly: looking a session up takes the read lock, so lookups never serialise turns; each session's
    /// conversation, queue and settings sit behind locks of their own.
    sessions: RwLock<HashMap<Arc<str>, Arc<session::SessionState>>>,
}

/// Runs agent sessions. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

/// Builds a [`Runtime`].
#[derive(Default)]
pub struct RuntimeBuilder {
    services: Services,
    layers: Vec<Arc<dyn MemoryLayer>>,
    agent: Option<Step<String, String>>,
    model_id: Option<String>,
    instructions: Option<String>,
    steering_mode: Option<SteeringMode>,
    queue_capacity: Option<usize>,
    batch_policy: BatchPolicy,
    stream: Option<bool>,
}

impl RuntimeBuilder {
    /// The model every `llm` step calls (required).
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.services.model = Some(model);
        self
    }

    /// Adds a tool to the tools in scope.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.services.tools.push(tool);
        self
    }

    /// Adds tools to the tools in scope.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.services.tools.extend(tools);
        self
    }

    /// Adds a memory layer (the steering layer, for instance).
    pub fn layer(mut self, layer: Arc<dyn MemoryLayer>) -> Self {
        self.layers.push(layer);
        self
    }

    /// The approver for tools that need approval (without one, such calls are rejected).
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.services.approver = Some(approver);
        self
    }

    /// The agent each turn runs, given the user message. Default: a loop around one `llm` step with all tools,
    /// until the model answers without tool calls.
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

    /// The steering queue's dequeue mode every session starts with (default one-at-a-time); each session may
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

    /// What happens to the rest of a tool batch when steering arrives (default: skip it).
    pub fn batch_policy(mut self, policy: BatchPolicy) -> Self {
        self.batch_policy = policy;
        self
    }

    /// Validates and builds the runtime.
    pub fn build(self) -> Result<Runtime, ConfigError> {
        if self.services.model.is_none() {
            return Err(ConfigError::new(
                ConfigCode::NoModelProvider,
                "the runtime has no model",
                "call .model(...) with a provider (or ScriptedModel for tests)",
            ));
        }
        let agent = match self.agent {
            Some(agent) => agent,
            None => agent_step(self.model_id.as_deref().unwrap_or(DEFAULT_MODEL), self.instructions, self.stream)?,
        };
        crate::tool::check_unique_names(&self.services.tools, "the runtime")?;
        // Memory declared by the tools becomes layers once, here, so every turn shares them.
        let mut layers = self.layers;
        crate::tool::add_tool_memory_layers(&mut layers, &self.services.tools);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                services: self.services,
                layers,
                agent,
                default_mode: self.steering_mode.unwrap_or_default(),
                default_capacity: self.queue_capacity.unwrap_or(DEFAULT_QUEUE_CAPACITY).max(1),
                batch_policy: self.batch_policy,
                sessions: RwLock::new(HashMap::new()),
            }),
        })
    }
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

impl Runtime {
    /// Starts building a runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The session with this key, created on first use.
    pub fn session(&self, key: &str) -> Session {
        let known = self.inner.sessions.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned();
        let state = match known {
            Some(state) => state,
            None => self
                .inner
                .sessions
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(Arc::from(key))
                .or_insert_with(|| {
                    let settings = SessionSettings::new(
                        self.inner.default_mode,
                        self.inner.default_capacity,
                        self.inner.batch_policy,
                    );
                    Arc::new(session::SessionState::new(Arc::from(key), settings))
                })
                .clone(),
        };
        Session::new(self.inner.clone(), state)
    }

    /// A copy of a layer's state for an execution (e.g. `get_layer_state::<SteeringState>(id, "steering")`);
    /// the execution id of a turn is on its `turn_started` event. Finished executions stay readable for
    /// layers that keep them (the steering layer keeps the last 64).
    pub fn get_layer_state<T: 'static>(&self, execution_id: crate::context::ExecutionId, layer_id: &str) -> Option<T> {
        let layers = crate::layer::LayerStack::new(self.inner.layers.iter().cloned());
        crate::layer::lifecycle::get_layer_state(&layers, execution_id, layer_id)
    }

    /// Number of sessions created so far.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.read().unwrap_or_else(PoisonError::into_inner).len()
    }
}
