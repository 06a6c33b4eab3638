//! # Noetic — an agent runtime you can trust and redirect
//!
//! A [`Runtime`](agent::Runtime) holds a model, tools and memory layers; each [`Session`](agent::Session) is one
//! conversation that runs one [`Turn`](agent::Turn) at a time. Steering rules (a [`SteeringLayer`](steering::SteeringLayer)) check every
//! tool call before it runs and every model answer after it arrives; a user can steer a running turn, and the
//! message reaches the model at the next checkpoint, between two tool calls. Underneath, agents are composed from
//! nine typed [steps](step) — `run`, `llm`, `tool`, `branch`, `fork`, `spawn`, `provide`, `loop`, `every` —
//! executed by one interpreter with cancellation, retries, timeouts and [channels](Channel).
//!
//! ## What your `Cargo.toml` needs
//!
//! ```toml
//! [dependencies]
//! noetic = { path = "crates/noetic" }       # this workspace's crate
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! schemars = "1"                             # typed tools derive `JsonSchema` from schemars 1.x
//! serde = { version = "1", features = ["derive"] }
//! serde_json = "1"
//! ```
//!
//! A turn runs as a tokio task ([`tokio::spawn`]), so sessions need a tokio runtime: `#[tokio::main]` needs tokio's
//! `macros` and `rt-multi-thread` features (or `macros` and `rt` with `#[tokio::main(flavor = "current_thread")]`,
//! as the examples below). Noetic enables the tokio features it uses itself. Typed tools ([`tool::tool_fn`]) take
//! argument and result types deriving serde's traits and schemars 1's `JsonSchema` (schemars 0.8 types do not
//! implement it).
//!
//! ## A tour: runtime, session, turn
//!
//! A typed tool, a steering rule that denies reading outside the workspace, and a user who steers while the
//! second tool of a batch runs: the third call is skipped, and the model's next request carries the message. The
//! model is scripted ([`testing::ScriptedModel`]), so this runs offline; a program hands
//! [`RuntimeBuilder::model`](agent::RuntimeBuilder::model) a provider instead (`noetic-openai`, `noetic-anthropic`).
//!
//! ```
//! use std::sync::Arc;
//! use noetic::prelude::*;
//! use noetic::steering::SteeringState;
//! use noetic::testing::{ScriptedModel, gated_tool, transcript};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! // A typed tool: its input and output schemas are derived from these types.
//! #[derive(Deserialize, JsonSchema)]
//! struct ReadFile {
//!     path: String,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct FileText {
//!     text: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let read_file = tool_fn("read_file", "Reads a file.", |args: ReadFile, _tcx| async move {
//!     Ok::<_, ToolError>(FileText { text: format!("the text of {}", args.path) })
//! })?;
//!
//! // A steering rule, checked before every tool call.
//! let rule = SteeringRule::predicate("stay-in-workspace", [Hook::BeforeToolCall], |p| match p.tool_call() {
//!     Some(c) if c.name == "read_file" && !c.args["path"].as_str().unwrap_or("").starts_with("/workspace/") => {
//!         SteeringDecision::deny("Only files under /workspace/ may be read.")
//!     }
//!     _ => SteeringDecision::allow(),
//! });
//!
//! // A tool from the test kit that runs until the test releases it: the moment to steer.
//! let (index, running) = gated_tool("index")?;
//!
//! let model = ScriptedModel::new([
//!     ModelResponse::tool_calls([
//!         ("c1", "read_file", json!({"path": "/etc/passwd"})),
//!         ("c2", "index", json!({})),
//!         ("c3", "read_file", json!({"path": "/workspace/notes.md"})),
//!     ]),
//!     ModelResponse::text("Indexed; I left the notes alone, as you asked."),
//! ]);
//! let runtime = Runtime::builder()
//!     .model(Arc::new(model.clone()))
//!     .tools([Arc::new(read_file) as Arc<dyn Tool>, index])
//!     .layer(steering(SteeringConfig::new([rule]))?)
//!     .build()?;
//! let session = runtime.session("user-42");
//!
//! // The turn runs from here on; awaiting it only waits for the answer.
//! let turn = session.send("Index the workspace, then read my notes.").await?;
//! let execution = turn.execution_id();
//! running.started().await; // c1 was denied, c2 runs now
//! session.steer("Don't read the notes.").await?;
//! running.release();
//! assert_eq!(turn.await?, "Indexed; I left the notes alone, as you asked.");
//!
//! assert_eq!(
//!     transcript(&session.history()),
//!     [
//!         "User: Index the workspace, then read my notes.",
//!         "call c1 read_file({\"path\":\"/etc/passwd\"})",
//!         "call c2 index({})",
//!         "call c3 read_file({\"path\":\"/workspace/notes.md\"})",
//!         "result c1 (error) Steering denied: Only files under /workspace/ may be read.",
//!         "result c2 index done",
//!         "result c3 (error) Skipped due to queued user message.",
//!         "User: Don't read the notes.",
//!         "Assistant: Indexed; I left the notes alone, as you asked.",
//!     ]
//! );
//! // The second request carried the steering message.
//! assert_eq!(model.requests()[1].history.as_slice().last(), Some(&Item::user("Don't read the notes.")));
//! // The steering ledger of this turn, found by its execution id.
//! let state: SteeringState = runtime.get_layer_state(execution, "steering").ok_or("no ledger")?;
//! assert!(state.ledger.iter().any(|e| e.action == SteeringAction::Deny));
//! # Ok(())
//! # }
//! ```
//!
//! [`Session::subscribe`](agent::Session::subscribe) and [`Session::follow`](agent::Session::follow) stream the
//! turn's events; [`Session::send_or_steer`](agent::Session::send_or_steer) and the
//! [`MessageBus`](agent::MessageBus) route chat messages; a session log store
//! ([`RuntimeBuilder::log_store`](agent::RuntimeBuilder::log_store)) keeps sessions beyond the process.
//!
//! ## The step algebra
//!
//! The runtime's default agent is a loop around one `llm` step; [`RuntimeBuilder::agent`](agent::RuntimeBuilder::agent)
//! takes any step. Steps compose:
//!
//! ```
//! use std::time::Duration;
//! use noetic::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A step that may fail the first time, retried with exponential backoff.
//! let fetch = Step::run("fetch", |topic: String, _ctx| async move { Ok(format!("notes on {topic}")) })
//!     .retry(RetryPolicy::new(3, Backoff::Exponential, Duration::from_millis(10)))
//!     .build()?;
//!
//! // Three research paths in parallel, merged in path order.
//! let research = Step::fork("research", ForkMode::All)
//!     .paths(["web", "papers", "code"].map(|source| {
//!         Step::run(source, move |topic: String, _ctx| async move { Ok(format!("{source}: {topic}")) })
//!             .build()
//!             .expect("valid step")
//!     }))
//!     .merge(|parts, _ctx| Ok(parts.join(" | ")))
//!     .build()?;
//!
//! // A branch that skips research for short topics (None passes the input through).
//! let maybe_research = Step::branch("maybe", move |topic: &String, _ctx| (topic.len() > 3).then(|| research.clone()))
//!     .build()?;
//!
//! // Repeat until the output mentions "papers", at most 5 times.
//! let agent = Step::loop_("agent", [fetch, maybe_research])
//!     .until(until::any([until::output_contains("papers"), until::max_steps(5)]))
//!     .build()?;
//!
//! // A step runs in a step context: a `Context` (ids, cancellation, items, events) with the layers and tools in
//! // scope; a runtime makes one per turn.
//! let ctx = StepContext::new();
//! let answer = agent.execute("rust async".to_string(), &ctx).await?;
//! assert_eq!(answer, "web: notes on rust async | papers: notes on rust async | code: notes on rust async");
//! # Ok(())
//! # }
//! ```
//!
//! Errors come in two kinds: [`NoeticError`] while steps run, [`ConfigError`] (with a stable code) when a step is
//! built wrongly.
//!
//! ## How the crates are layered
//!
//! This crate is a facade: the modules below live in four crates, which a program may also add one at a time —
//! `noetic-core` (items, the `Model` trait, errors, budgets: what a provider needs), `noetic-steps` (the step
//! algebra and its interpreter), `noetic-steering` (the steering layer) and `noetic-runtime` (sessions, the session
//! log). Each module keeps its path here (`noetic::model::Item`, `noetic::agent::Runtime`).
//!
//! Modules form layers and import only from layers below their own, and a crate depends only on crates below it
//! (a test, `tests/module_layers.rs`, fails on either). Where a low module needs behaviour from a high one, it
//! defines a small trait that the high one implements — [`context::Checkpoints`] (the steering queue's checkpoints,
//! implemented by the agent layer) is one.
//!
//! | layer | crate | modules | what it holds |
//! |---|---|---|---|
//! | 11 | `noetic` | `testing` | the test kit |
//! | 10 | `noetic-runtime` | [`agent`] | runtime, sessions, turns, bus, steering queue, the session log and its store seam |
//! | 9 | `noetic-steering` | [`steering`](mod@steering) | the steering layer: rules, judge, verdicts, ledger, feedback |
//! | 8 | `noetic-steps` | [`exec`] | the interpreter, one file per step kind; the turn driver (`exec/llm.rs`) |
//! | 7 | `noetic-steps` | [`step`] | the step enum and builders, `until` predicates |
//! | 6 | `noetic-steps` | [`window`] | the context window: counting, the allocation rule, compaction |
//! | 5 | `noetic-steps` | [`scope`] | what a step runs in: a `Context` with, typed, the services, memory layers and tools in scope |
//! | 4 | `noetic-steps` | [`layer`], [`tool`] | memory layers, their lifecycle and budgets · tools, approvals, tool calls |
//! | 3 | `noetic-steps` | [`context`] | ids, cancellation, the item log, events and their log, channels · the services and the view hooks get |
//! | 2 | `noetic-steps` | [`turn`] | the pure, serialisable turn core: every decision of a model-driven turn |
//! | 1 | `noetic-core` | [`model`], `decision`, [`trace`], [`budget`] | items, requests, the `Model` trait, wrappers · steering decisions · span helpers · budgets: limits, spending, the turn's meter |
//! | 0 | `noetic-core` | [`error`], `sync`, [`digest`] | errors · lock helpers · canonical JSON and SHA-256 |

pub use noetic_core::{budget, digest, error, model, time, trace};
pub use noetic_runtime::agent;
pub use noetic_steering::steering;
pub use noetic_steps::{context, exec, layer, scope, step, tool, turn, window};
pub mod testing;

pub use context::{
    Channel, ChannelMode, Context, Event, EventFollower, EventKind, EventReceiver, EventSink, ExecutionId, Followed,
    HookContext,
};
pub use error::{ConfigCode, ConfigError, NoeticError};
pub use noetic_steps::{InScope, StepContext, StepContextBuilder, execute, run};
pub use step::{Step, StepKind, until};

/// Everything most programs need, in one import.
pub mod prelude {
    pub use crate::agent::{Runtime, Session, Turn};
    pub use crate::context::{Channel, Context, EventKind, EventSink, HookContext};
    pub use crate::error::{ConfigCode, ConfigError, NoeticError};
    pub use crate::layer::{
        Gates, Hook, Lifecycle, MemoryLayer, Outcome, Persistence, Recall, Scope, Slot, ToolCallAction,
    };
    pub use crate::model::{
        Item, Model, ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall, ToolResult, Usage,
    };
    pub use crate::scope::StepContext;
    pub use crate::steering::{
        LlmEval, SteeringAction, SteeringConfig, SteeringDecision, SteeringLayer, SteeringRule, steering,
    };
    pub use crate::step::until::{self, Until, Verdict};
    pub use crate::step::{
        Backoff, EveryOnError, ForkMode, LoopErrorAction, ModelParams, RetryPolicy, SettleResult, SettleStatus, Step,
        StepKind, ToolChoice,
    };
    pub use crate::tool::{Approval, Approver, FnTool, Tool, ToolContext, ToolError, tool_fn};
}

/// The README, whose Rust examples `cargo test --doc` compiles and runs (the library snippet is a whole program).
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
