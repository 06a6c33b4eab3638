//! `loop`: repeat a body until a predicate says stop.

use std::sync::Arc;
use std::time::Duration;

use super::until::{Until, Verdict, default_text};
use super::{Step, validate_id};
use crate::context::{Channel, Context};
use crate::error::{ConfigCode, ConfigError, NoeticError};

/// The default limit on iterations.
pub const DEFAULT_MAX_ITERATIONS: u32 = 1000;
/// The default number of outputs kept in the snapshot history.
pub const DEFAULT_MAX_HISTORY_SIZE: usize = 100;

/// What to do with a failed iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopErrorAction {
    /// Run the iteration again with the same input.
    Retry,
    /// Treat the previous output as this iteration's output (or, with none yet, run again).
    Skip,
    /// Fail the loop with the error.
    Abort,
}

pub(crate) type PrepareFn<I, O> = Arc<dyn Fn(O, &Verdict, &Context) -> I + Send + Sync>;
pub(crate) type OnErrorFn = Arc<dyn Fn(&NoeticError, &Context) -> LoopErrorAction + Send + Sync>;

/// A `loop` step.
///
/// Each iteration runs `steps` in sequence, piping each output into the next step's input (bodies of more than
/// one step have equal input and output types). After a successful iteration `until` sees a snapshot; if it
/// says stop and a message waits on `inbox`, the message is appended to the conversation as a developer message
/// and the loop continues. The next input is `prepare_next(output, verdict, ctx)`, or the output itself.
pub struct StepLoop<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) steps: Vec<Step<I, O>>,
    /// Output → input between body steps and, without `prepare_next`, between iterations (`I == O` only).
    pub(crate) chain: Option<fn(O) -> I>,
    pub(crate) until: Until<O>,
    pub(crate) max_iterations: u32,
    pub(crate) max_history_size: usize,
    pub(crate) inbox: Option<Channel<String>>,
    pub(crate) park_timeout: Duration,
    pub(crate) prepare_next: Option<PrepareFn<I, O>>,
    pub(crate) on_error: Option<OnErrorFn>,
    pub(crate) clone_input: fn(&I) -> I,
    pub(crate) clone_output: fn(&O) -> O,
    pub(crate) text_of: fn(&O) -> String,
}

/// Builds a `loop` step.
pub struct LoopBuilder<I, O> {
    id: String,
    steps: Vec<Step<I, O>>,
    chain: Option<fn(O) -> I>,
    until: Option<Until<O>>,
    max_iterations: u32,
    max_history_size: usize,
    inbox: Option<Channel<String>>,
    park_timeout: Duration,
    prepare_next: Option<PrepareFn<I, O>>,
    on_error: Option<OnErrorFn>,
    clone_input: fn(&I) -> I,
    clone_output: fn(&O) -> O,
    text_of: fn(&O) -> String,
}

fn identity<T>(t: T) -> T {
    t
}

impl<T: Clone + Send + Sync + 'static> Step<T, T> {
    /// A loop over a body of one or more steps whose output feeds the next input.
    pub fn loop_(id: impl Into<String>, steps: impl IntoIterator<Item = Step<T, T>>) -> LoopBuilder<T, T> {
        LoopBuilder::new(id.into(), steps.into_iter().collect(), Some(identity::<T>), None)
    }
}

impl<I: Clone + Send + Sync + 'static, O: Clone + Send + Sync + 'static> Step<I, O> {
    /// A loop over one body step whose output type differs from its input: `prepare_next` turns each output
    /// into the next input.
    pub fn loop_map<F>(id: impl Into<String>, body: Step<I, O>, prepare_next: F) -> LoopBuilder<I, O>
    where
        F: Fn(O, &Verdict, &Context) -> I + Send + Sync + 'static,
    {
        LoopBuilder::new(id.into(), vec![body], None, Some(Arc::new(prepare_next)))
    }
}

impl<I: Clone + Send + Sync + 'static, O: Clone + Send + Sync + 'static> LoopBuilder<I, O> {
    fn new(
        id: String,
        steps: Vec<Step<I, O>>,
        chain: Option<fn(O) -> I>,
        prepare_next: Option<PrepareFn<I, O>>,
    ) -> Self {
        LoopBuilder {
            id,
            steps,
            chain,
            until: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            max_history_size: DEFAULT_MAX_HISTORY_SIZE,
            inbox: None,
            park_timeout: Duration::ZERO,
            prepare_next,
            on_error: None,
            clone_input: I::clone,
            clone_output: O::clone,
            text_of: default_text::<O>,
        }
    }

    /// The termination predicate (required).
    pub fn until(mut self, until: Until<O>) -> Self {
        self.until = Some(until);
        self
    }

    /// The limit on iterations, retries and skips included (default 1000). Reaching it is an error.
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }

    /// How many recent outputs the snapshot keeps (default 100).
    pub fn max_history_size(mut self, n: usize) -> Self {
        self.max_history_size = n;
        self
    }

    /// A channel whose messages keep the loop running when `until` says stop.
    pub fn inbox(mut self, inbox: Channel<String>) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// How long to wait on the inbox when `until` says stop (zero = only take a message already there).
    pub fn park_timeout(mut self, timeout: Duration) -> Self {
        self.park_timeout = timeout;
        self
    }

    /// Turns an output and the verdict into the next input.
    pub fn prepare_next<F>(mut self, f: F) -> Self
    where
        F: Fn(O, &Verdict, &Context) -> I + Send + Sync + 'static,
    {
        self.prepare_next = Some(Arc::new(f));
        self
    }

    /// Decides what a failed iteration does (without a handler, the loop fails). Cancellation never reaches it.
    pub fn on_error<F>(mut self, f: F) -> Self
    where
        F: Fn(&NoeticError, &Context) -> LoopErrorAction + Send + Sync + 'static,
    {
        self.on_error = Some(Arc::new(f));
        self
    }

    /// How an output becomes the snapshot's `last_text` (default: [`default_text`]).
    pub fn text_of(mut self, f: fn(&O) -> String) -> Self {
        self.text_of = f;
        self
    }

    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "loop")?;
        if self.steps.is_empty() {
            return Err(ConfigError::new(
                ConfigCode::MissingLoopBody,
                format!("loop step '{id}' has no body steps"),
                "give the loop at least one step to repeat",
            ));
        }
        let until = self.until.ok_or_else(|| {
            ConfigError::new(
                ConfigCode::MissingUntilPredicate,
                format!("loop step '{id}' has no until predicate"),
                "call .until(...), e.g. until::any([until::no_tool_calls(), until::max_steps(10)])",
            )
        })?;
        if self.max_iterations < 1 {
            return Err(ConfigError::new(
                ConfigCode::InvalidMaxIterations,
                format!("loop step '{id}' has max_iterations 0, so it could never run"),
                "set max_iterations to at least 1",
            ));
        }
        Ok(Step::Loop(Arc::new(StepLoop {
            id,
            steps: self.steps,
            chain: self.chain,
            until,
            max_iterations: self.max_iterations,
            max_history_size: self.max_history_size,
            inbox: self.inbox,
            park_timeout: self.park_timeout,
            prepare_next: self.prepare_next,
            on_error: self.on_error,
            clone_input: self.clone_input,
            clone_output: self.clone_output,
            text_of: self.text_of,
        })))
    }
}
