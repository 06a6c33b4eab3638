//! # noetic-steps — the step algebra and its interpreter
//!
//! Nine typed steps (`run`, `llm`, `tool`, `branch`, `fork`, `spawn`, `provide`, `loop`, `every`), their builders,
//! the one interpreter that runs them with cancellation, retries, timeouts and channels, and what a running step
//! sees: its [`StepContext`] — a [`Context`] with the services, tools and memory layers in scope (its memory layers'
//! hooks see a [`HookContext`]: the context and the services). It builds on `noetic-core`; the steering layer and
//! the runtime build on it. Programs usually add the `noetic` facade, which re-exports this crate's modules under
//! the same names.
//!
//! | module | what it holds |
//! |---|---|
//! | [`exec`] | the interpreter, one file per step kind; the `llm` step's turn driver |
//! | [`step`] | the step enum and builders, `until` predicates |
//! | [`window`] | the context window: counting, the allocation rule, compaction |
//! | [`scope`] | what a step runs in: its context and, typed, the services, memory layers and tools in scope |
//! | [`layer`], [`tool`] | memory layers, their lifecycle and budgets · tools, approvals, tool calls |
//! | [`context`] | ids, cancellation, the item log, events and their log, channels · the services, the hooks' view |
//! | [`turn`] | the pure, serialisable turn core: every decision of a model-driven turn |

// The core's modules under the names this crate's modules have always used for them (`crate::model::Item` …).
use noetic_core::{budget, decision, digest, error, json, model, sync, time, trace};

pub mod context;
pub mod exec;
pub mod layer;
pub mod scope;
pub mod step;
pub mod tool;
pub mod turn;
pub mod window;

pub use context::{
    Channel, ChannelMode, Context, Event, EventFollower, EventKind, EventReceiver, EventSink, ExecutionId, Followed,
    HookContext,
};
pub use exec::execute;
pub use noetic_core::error::{ConfigCode, ConfigError, NoeticError};
pub use scope::{InScope, StepContext, StepContextBuilder};
pub use step::{Step, StepKind, until};

/// Runs `step` as a whole execution: initialises the layers in scope, executes, then runs `on_complete` with the
/// outcome and `dispose` on every layer — whatever the outcome. Use it for root executions; [`execute`] runs a step
/// inside an execution that is already going.
pub async fn run<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let result = match layer::lifecycle::init(&ctx.hooks(), ctx.layers()).await {
        Ok(()) => exec::guard_async(step.id(), "step", exec::execute_in(step, input, ctx)).await,
        Err(e) => Err(e),
    };
    // A layer that panicked while completing turns a success into an error naming it.
    let completed = layer::lifecycle::complete(&ctx.hooks(), ctx.layers(), layer::Outcome::of(&result)).await;
    result.and_then(|v| completed.map(|()| v))
}
