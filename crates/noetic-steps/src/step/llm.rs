//! `llm`: a model call with a tool loop. This module defines the step and its builder; the interpreter runs it
//! through the context's model.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{Step, validate_id};
use crate::context::EventKind;
use crate::error::{ConfigCode, ConfigError};
use crate::model::{ModelParams, ToolChoice};
use crate::tool::{Schema, Tool};

/// The default limit on model → tools rounds within one `llm` step.
pub const DEFAULT_MAX_ROUNDS: u32 = 32;

/// How an `llm` step runs the tool calls of one response ([`LlmBuilder::parallel_tools`],
/// [`LlmBuilder::interrupt_running`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelTools {
    /// How many calls run at once (1: one after another).
    pub limit: u32,
    /// Steering that arrives while calls run together cancels them.
    pub interrupt_running: bool,
}

impl Default for ParallelTools {
    fn default() -> Self {
        ParallelTools { limit: 1, interrupt_running: false }
    }
}

/// Which framework events an `llm` step emits.
#[derive(Clone, Default)]
pub enum Emit {
    /// All events (the default).
    #[default]
    All,
    /// None.
    Nothing,
    /// Those the filter accepts.
    Filter(Arc<dyn Fn(&EventKind) -> bool + Send + Sync>),
}

impl fmt::Debug for Emit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Emit::All => f.write_str("Emit::All"),
            Emit::Nothing => f.write_str("Emit::Nothing"),
            Emit::Filter(_) => f.write_str("Emit::Filter(..)"),
        }
    }
}

impl Emit {
    /// True if the event should be emitted.
    pub fn allows(&self, kind: &EventKind) -> bool {
        match self {
            Emit::All => true,
            Emit::Nothing => false,
            Emit::Filter(f) => f(kind),
        }
    }
}

/// Inputs an `llm` step accepts: the text becomes a user message (`None` or empty appends nothing).
pub trait IntoPrompt {
    /// The user message text, if any.
    fn into_prompt(self) -> Option<String>;
}

impl IntoPrompt for String {
    fn into_prompt(self) -> Option<String> {
        (!self.is_empty()).then_some(self)
    }
}

impl IntoPrompt for &'static str {
    fn into_prompt(self) -> Option<String> {
        (!self.is_empty()).then(|| self.to_owned())
    }
}

impl IntoPrompt for Option<String> {
    fn into_prompt(self) -> Option<String> {
        self.and_then(IntoPrompt::into_prompt)
    }
}

impl IntoPrompt for () {
    fn into_prompt(self) -> Option<String> {
        None
    }
}

type ParseOutput<O> = fn(&str) -> Result<O, String>;

/// An `llm` step.
pub struct StepLlm<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) model: Arc<str>,
    pub(crate) instructions: Option<Arc<str>>,
    /// The instructions' tokens, counted once per token counter: they never change between requests (counting
    /// 3 KB of them on every request cost about 1,500 instructions).
    pub(crate) instructions_tokens: crate::window::KeptCount,
    pub(crate) tools: Option<crate::tool::ToolSet>,
    pub(crate) output_schema: Option<Schema>,
    pub(crate) params: ModelParams,
    pub(crate) tool_choice: Option<ToolChoice>,
    pub(crate) first_round_tool_choice: Option<ToolChoice>,
    pub(crate) emit: Emit,
    pub(crate) max_rounds: u32,
    pub(crate) parallel: ParallelTools,
    pub(crate) stream: Option<bool>,
    pub(crate) compaction: crate::window::Compaction,
    pub(crate) prompt: fn(I) -> Option<String>,
    pub(crate) parse_output: ParseOutput<O>,
}

impl<I, O> StepLlm<I, O> {
    /// The model id (e.g. `openai/gpt-4o-mini`).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The system instructions.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The allowed tools: `None` = all tools in scope, `Some(empty)` = none.
    pub fn tools(&self) -> Option<&[Arc<dyn Tool>]> {
        self.tools.as_deref()
    }

    /// The structured-output schema.
    pub fn output_schema(&self) -> Option<&Schema> {
        self.output_schema.as_ref()
    }

    /// Sampling parameters.
    pub fn params(&self) -> &ModelParams {
        &self.params
    }

    /// The tool choice, if set.
    pub fn tool_choice(&self) -> Option<&ToolChoice> {
        self.tool_choice.as_ref()
    }

    /// The tool choice of each run's first round, if set apart from [`tool_choice`](Self::tool_choice).
    pub fn first_round_tool_choice(&self) -> Option<&ToolChoice> {
        self.first_round_tool_choice.as_ref()
    }

    /// The tool choice of round `round` (0-based) of a run of this step.
    pub(crate) fn tool_choice_for(&self, round: u32) -> Option<ToolChoice> {
        match (&self.first_round_tool_choice, round) {
            (Some(first), 0) => Some(first.clone()),
            _ => self.tool_choice.clone(),
        }
    }

    /// Event emission.
    pub fn emit(&self) -> &Emit {
        &self.emit
    }

    /// The limit on model → tools rounds.
    pub fn max_rounds(&self) -> u32 {
        self.max_rounds
    }

    /// How many tool calls may run at once, and whether steering cancels calls that run together.
    pub fn parallel_tools(&self) -> ParallelTools {
        self.parallel
    }

    /// Whether the model is called with [`Model::stream`](crate::model::Model::stream) (text reaches
    /// subscribers as `model_text_delta` events while it arrives) or [`Model::call`](crate::model::Model::call):
    /// `None` (the default) streams exactly when the model streams natively
    /// ([`Model::streams_natively`](crate::model::Model::streams_natively)).
    pub fn streams(&self) -> Option<bool> {
        self.stream
    }

    /// How the history is compacted when a request does not fit the model's window.
    pub fn compaction(&self) -> crate::window::Compaction {
        self.compaction
    }

    /// Turns the step input into the user message text.
    pub fn prompt_of(&self, input: I) -> Option<String> {
        (self.prompt)(input)
    }

    /// Parses the model's final text into the step output.
    pub fn parse(&self, text: &str) -> Result<O, String> {
        (self.parse_output)(text)
    }
}

/// Builds an `llm` step.
pub struct LlmBuilder<I, O> {
    id: String,
    model: String,
    instructions: Option<String>,
    tools: Option<Vec<Arc<dyn Tool>>>,
    output_schema: Option<serde_json::Value>,
    params: ModelParams,
    tool_choice: Option<ToolChoice>,
    first_round_tool_choice: Option<ToolChoice>,
    emit: Emit,
    max_rounds: u32,
    parallel: ParallelTools,
    stream: Option<bool>,
    compaction: crate::window::Compaction,
    parse_output: ParseOutput<O>,
    _input: PhantomData<fn(I)>,
}

fn text_output(text: &str) -> Result<String, String> {
    Ok(text.to_owned())
}

fn json_output<O: DeserializeOwned>(text: &str) -> Result<O, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON for the output type: {e}"))
}

impl<I: IntoPrompt + Send + 'static> Step<I, String> {
    /// A model call producing text. The input (a `String`, `&'static str`, `Option<String>` or `()`) becomes a user
    /// message.
    pub fn llm(id: impl Into<String>, model: impl Into<String>) -> LlmBuilder<I, String> {
        LlmBuilder {
            id: id.into(),
            model: model.into(),
            instructions: None,
            tools: None,
            output_schema: None,
            params: ModelParams::default(),
            tool_choice: None,
            first_round_tool_choice: None,
            emit: Emit::All,
            max_rounds: DEFAULT_MAX_ROUNDS,
            parallel: ParallelTools::default(),
            stream: None,
            compaction: crate::window::Compaction::default(),
            parse_output: text_output,
            _input: PhantomData,
        }
    }
}

impl<I: IntoPrompt + Send + 'static, O: Send + 'static> LlmBuilder<I, O> {
    /// System instructions.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Restricts the tools the model may call (an empty list sends no tools). Without this call every tool in
    /// scope is offered.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools = Some(tools.into_iter().collect());
        self
    }

    /// Structured output: the model's final text must be JSON matching `schema`, deserialised into `T`.
    pub fn output<T: DeserializeOwned + Send + 'static>(self, schema: serde_json::Value) -> LlmBuilder<I, T> {
        LlmBuilder {
            id: self.id,
            model: self.model,
            instructions: self.instructions,
            tools: self.tools,
            output_schema: Some(schema),
            params: self.params,
            tool_choice: self.tool_choice,
            first_round_tool_choice: self.first_round_tool_choice,
            emit: self.emit,
            max_rounds: self.max_rounds,
            parallel: self.parallel,
            stream: self.stream,
            compaction: self.compaction,
            parse_output: json_output::<T>,
            _input: PhantomData,
        }
    }

    /// Sampling parameters.
    pub fn params(mut self, params: ModelParams) -> Self {
        self.params = params;
        self
    }

    /// Tool choice.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Tool choice for the first round of each run of the step only; later rounds use
    /// [`tool_choice`](Self::tool_choice). `ToolChoice::Required` here makes a model that never calls tools on its
    /// own (a small local one) start with a tool call, and still lets it answer after seeing the result.
    pub fn first_round_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.first_round_tool_choice = Some(choice);
        self
    }

    /// Event emission.
    pub fn emit(mut self, emit: Emit) -> Self {
        self.emit = emit;
        self
    }

    /// The limit on model → tools rounds (default 32).
    pub fn max_rounds(mut self, rounds: u32) -> Self {
        self.max_rounds = rounds;
        self
    }

    /// How many tool calls of one response may run at once (default 1: one after another, in call order). Above
    /// 1, consecutive calls of tools declared safe to run concurrently ([`Tool::concurrent`]) run together, up to
    /// `limit` at a time; see [`crate::turn`] for what gates, steering and the session log do then. 0 is a
    /// `ConfigError` (`INVALID_CONCURRENCY`) at build time.
    pub fn parallel_tools(mut self, limit: u32) -> Self {
        self.parallel.limit = limit;
        self
    }

    /// When steering arrives while calls run together, cancel them (each gets
    /// [`CANCELLED_RESULT`](crate::turn::CANCELLED_RESULT)) instead of letting them finish (default false). Only
    /// calls run together are cancelled: a call that runs alone always finishes.
    pub fn interrupt_running(mut self, yes: bool) -> Self {
        self.parallel.interrupt_running = yes;
        self
    }

    /// Streams the model's answers, or not (default: stream when the model streams natively, see
    /// [`Model::streams_natively`](crate::model::Model::streams_natively)). This is configuration on purpose:
    /// whether anybody watches the events never changes how the model is called (SPEC 7.2), so retries and
    /// timeouts behave the same watched or not.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = Some(stream);
        self
    }

    /// How the history is compacted when a request does not fit the model's window (default: the model
    /// summarises the oldest turns; see [`crate::window`]).
    pub fn compaction(mut self, compaction: crate::window::Compaction) -> Self {
        self.compaction = compaction;
        self
    }

    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "llm")?;
        if self.model.trim().is_empty() {
            return Err(ConfigError::new(
                ConfigCode::MissingModel,
                format!("llm step '{id}' names no model"),
                "pass a model id such as \"openai/gpt-4o-mini\"",
            ));
        }
        let tools = match self.tools {
            Some(tools) => Some(crate::tool::ToolSet::named(tools, &format!("llm step '{id}'"))?),
            None => None,
        };
        let output_schema = self.output_schema.map(Schema::new).transpose()?;
        if self.parallel.limit == 0 {
            return Err(ConfigError::new(
                ConfigCode::InvalidConcurrency,
                format!("llm step '{id}' has parallel_tools(0): no tool call could ever run"),
                "use parallel_tools(1) to run calls one after another, or more to run safe calls together",
            ));
        }
        Ok(Step::Llm(Arc::new(StepLlm {
            id,
            model: self.model.into(),
            instructions: self.instructions.map(Arc::from),
            instructions_tokens: crate::window::KeptCount::default(),
            tools,
            output_schema,
            params: self.params,
            tool_choice: self.tool_choice,
            first_round_tool_choice: self.first_round_tool_choice,
            emit: self.emit,
            max_rounds: self.max_rounds.max(1),
            parallel: self.parallel,
            stream: self.stream,
            compaction: self.compaction,
            prompt: I::into_prompt,
            parse_output: self.parse_output,
        })))
    }
}
