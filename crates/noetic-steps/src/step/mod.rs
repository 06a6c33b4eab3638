//! The step algebra: nine kinds of step, composed into agents and run by one interpreter.
//!
//! | kind | builder | what it does |
//! |---|---|---|
//! | `run` | [`Step::run`] | runs an async function, with an optional [`RetryPolicy`] |
//! | `llm` | [`Step::llm`] | calls a model, runs the tools it asks for |
//! | `tool` | [`Step::tool`] | calls one tool directly |
//! | `branch` | [`Step::branch`], [`Step::route`] | picks the next step from the input |
//! | `fork` | [`Step::fork`] | runs paths concurrently: race, all or settle |
//! | `spawn` | [`Step::spawn`] | runs a child in an isolated context, with an optional timeout |
//! | `provide` | [`Step::provide`] | runs a child with more memory layers in scope |
//! | `loop` | [`Step::loop_`], [`Step::loop_map`] | repeats a body until a predicate says stop |
//! | `every` | [`Step::every`] | repeats a body on a fixed interval until cancelled |
//!
//! Builders validate their configuration and return a [`ConfigError`] with a stable code.
//! Steps are cheap to clone (everything sits behind an `Arc`) and are `Send + Sync + 'static`.

pub(crate) mod branch;
pub(crate) mod every;
pub(crate) mod fork;
pub(crate) mod llm;
pub(crate) mod loop_;
pub(crate) mod provide;
pub(crate) mod run;
pub(crate) mod spawn;
pub(crate) mod tool;
pub mod until;

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

pub use crate::context::StepKind;
pub use crate::model::{Backoff, DEFAULT_MAX_DELAY, RetryPolicy};
pub use crate::model::{ModelParams, ToolChoice};
pub use branch::{BranchBuilder, StepBranch};
pub use every::{EveryBuilder, EveryOnError, StepEvery};
pub use fork::{ForkBuilder, ForkMode, SettleResult, SettleStatus, StepFork};
pub use llm::{Emit, IntoPrompt, LlmBuilder, ParallelTools, StepLlm};
pub use loop_::{LoopBuilder, LoopErrorAction, StepLoop};
pub use provide::{ProvideBuilder, StepProvide};
pub use run::{RunBuilder, StepRun};
pub use spawn::{SpawnBuilder, StepSpawn};
pub use tool::{StepTool, ToolStepBuilder};

use crate::error::{ConfigCode, ConfigError, NoeticError};

/// A boxed, sendable future returning a step result.
pub type StepFuture<T> = BoxFuture<'static, Result<T, NoeticError>>;

/// A step taking `I` and producing `O`. Build one with the constructors below; run it with [`Step::execute`].
pub enum Step<I, O> {
    /// Runs an async function.
    Run(Arc<StepRun<I, O>>),
    /// Calls a model.
    Llm(Arc<StepLlm<I, O>>),
    /// Calls a tool.
    Tool(Arc<StepTool<I, O>>),
    /// Routes to another step.
    Branch(Arc<StepBranch<I, O>>),
    /// Runs paths concurrently.
    Fork(Arc<StepFork<I, O>>),
    /// Runs a child in an isolated context.
    Spawn(Arc<StepSpawn<I, O>>),
    /// Runs a child with more memory layers.
    Provide(Arc<StepProvide<I, O>>),
    /// Repeats a body until a predicate stops it.
    Loop(Arc<StepLoop<I, O>>),
    /// Repeats a body on an interval until cancelled.
    Every(Arc<StepEvery<I>>),
}

impl<I, O> Clone for Step<I, O> {
    fn clone(&self) -> Self {
        match self {
            Step::Run(s) => Step::Run(s.clone()),
            Step::Llm(s) => Step::Llm(s.clone()),
            Step::Tool(s) => Step::Tool(s.clone()),
            Step::Branch(s) => Step::Branch(s.clone()),
            Step::Fork(s) => Step::Fork(s.clone()),
            Step::Spawn(s) => Step::Spawn(s.clone()),
            Step::Provide(s) => Step::Provide(s.clone()),
            Step::Loop(s) => Step::Loop(s.clone()),
            Step::Every(s) => Step::Every(s.clone()),
        }
    }
}

impl<I, O> fmt::Debug for Step<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Step::{:?}({:?})", self.kind(), self.id())
    }
}

impl<I, O> Step<I, O> {
    /// The step's id.
    pub fn id(&self) -> &str {
        self.id_arc()
    }

    pub(crate) fn id_arc(&self) -> &Arc<str> {
        match self {
            Step::Run(s) => &s.id,
            Step::Llm(s) => &s.id,
            Step::Tool(s) => &s.id,
            Step::Branch(s) => &s.id,
            Step::Fork(s) => &s.id,
            Step::Spawn(s) => &s.id,
            Step::Provide(s) => &s.id,
            Step::Loop(s) => &s.id,
            Step::Every(s) => &s.id,
        }
    }

    /// The step's kind.
    pub fn kind(&self) -> StepKind {
        match self {
            Step::Run(_) => StepKind::Run,
            Step::Llm(_) => StepKind::Llm,
            Step::Tool(_) => StepKind::Tool,
            Step::Branch(_) => StepKind::Branch,
            Step::Fork(_) => StepKind::Fork,
            Step::Spawn(_) => StepKind::Spawn,
            Step::Provide(_) => StepKind::Provide,
            Step::Loop(_) => StepKind::Loop,
            Step::Every(_) => StepKind::Every,
        }
    }
}

/// Checks a step id: non-empty after trimming.
pub(crate) fn validate_id(id: &str, what: &str) -> Result<Arc<str>, ConfigError> {
    if id.trim().is_empty() {
        return Err(ConfigError::new(
            ConfigCode::EmptyStepId,
            format!("a {what} step has an empty id"),
            "give every step a non-empty id; ids name steps in errors, events and the ledger",
        ));
    }
    Ok(Arc::from(id))
}
