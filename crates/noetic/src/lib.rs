//! # Noetic — an agent runtime you can trust and redirect
//!
//! Agents are composed from nine typed [steps](step) — `run`, `llm`, `tool`, `branch`, `fork`, `spawn`,
//! `provide`, `loop`, `every` — and executed by one interpreter with cancellation, retries, timeouts and
//! [channels](Channel).
//!
//! ## A tour
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
//! let ctx = Context::new();
//! let answer = agent.execute("rust async".to_string(), &ctx).await?;
//! assert_eq!(answer, "web: notes on rust async | papers: notes on rust async | code: notes on rust async");
//! # Ok(())
//! # }
//! ```
//!
//! Errors come in two kinds: [`NoeticError`] while steps run, [`ConfigError`] (with a stable code) when a step is
//! built wrongly.
//!
//! ## How the crate is layered
//!
//! Modules form layers and import only from layers below their own (a test, `tests/module_layers.rs`, fails on an
//! upward import). Where a low module needs behaviour from a high one, it defines a small trait that the high one
//! implements — [`context::Checkpoints`] (the steering queue's checkpoints, implemented by the agent layer) is one.
//!
//! | layer | modules | what it holds |
//! |---|---|---|
//! | 9 | `testing` | the test kit |
//! | 8 | [`agent`] | runtime, sessions, turns, bus, steering queue, session archive |
//! | 7 | [`steering`] | the steering layer: rules, judge, verdicts, ledger, feedback |
//! | 6 | [`exec`] | the interpreter, one file per step kind; the turn driver (`exec/llm.rs`) |
//! | 5 | [`step`] | the step enum and builders, `until` predicates |
//! | 4 | [`layer`], [`tool`] | memory layers and their lifecycle · tools, approvals, tool calls |
//! | 3 | [`context`] | ids, cancellation, the item log, events and their log, channels |
//! | 2 | [`turn`] | the pure, serialisable turn core: every decision of a model-driven turn |
//! | 1 | [`model`], `decision`, [`trace`] | items, requests, the `Model` trait, wrappers · steering decisions · span helpers |
//! | 0 | [`error`], `sync` | errors · lock helpers |

pub mod agent;
pub mod context;
mod decision;
pub mod error;
pub mod exec;
pub mod layer;
pub mod model;
pub mod steering;
pub mod step;
mod sync;
pub mod testing;
pub mod time;
pub mod tool;
pub mod trace;
pub mod turn;

pub use context::{Channel, ChannelMode, Context, Event, EventFollower, EventKind, EventSink, ExecutionId, Followed};
pub use error::{ConfigCode, ConfigError, NoeticError};
pub use exec::execute;

/// Runs `step` as a whole execution: initialises the layers in scope, executes, then runs `on_complete` with the
/// outcome and `dispose` on every layer — whatever the outcome. Use it for root executions; [`execute`] runs a step
/// inside an execution that is already going.
pub async fn run<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    ctx: &Context,
) -> Result<O, NoeticError> {
    let result = match layer::lifecycle::init(ctx).await {
        Ok(()) => exec::guard_async(step.id(), "step", execute(step, input, ctx)).await,
        Err(e) => Err(e),
    };
    // A layer that panicked while completing turns a success into an error naming it.
    let completed = layer::lifecycle::complete(ctx, layer::Outcome::of(&result)).await;
    result.and_then(|v| completed.map(|()| v))
}
pub use step::{Step, StepKind, until};

/// Everything most programs need, in one import.
pub mod prelude {
    pub use crate::agent::{Runtime, Session, Turn};
    pub use crate::context::{Channel, Context, EventKind, EventSink};
    pub use crate::error::{ConfigCode, ConfigError, NoeticError};
    pub use crate::layer::{Hook, MemoryLayer, Outcome, Scope, Slot};
    pub use crate::model::{
        Item, Model, ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall, ToolResult, Usage,
    };
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
