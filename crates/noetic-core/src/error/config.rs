//! [`ConfigError`]: a program put together wrongly, caught before anything runs, with a stable [`ConfigCode`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// Stable identifiers of configuration mistakes. `code.as_str()` is the `SCREAMING_SNAKE_CASE` form used in
/// serialised errors and documentation; it never changes between releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ConfigCode {
    /// A step or rule id is empty or whitespace.
    EmptyStepId,
    /// A tool's name is empty or whitespace.
    EmptyToolName,
    /// A step or tool has no function to execute.
    MissingExecuteFunction,
    /// An `llm` step names no model.
    MissingModel,
    /// A `fork` in `All` or `Settle` mode has no merge function.
    MissingMergeFunction,
    /// A `fork` has no path factory.
    MissingPaths,
    /// A `loop` has no body steps.
    MissingLoopBody,
    /// A `loop` has no `until` predicate.
    MissingUntilPredicate,
    /// A `provide` step provides no memory layers.
    MissingContextLayers,
    /// An `every` interval is invalid.
    InvalidIntervalMs,
    /// An `every` jitter is invalid.
    InvalidJitter,
    /// A `fork` concurrency limit is below 1.
    InvalidConcurrency,
    /// A retry policy has `max_attempts` below 1.
    InvalidRetryPolicy,
    /// A loop's `max_iterations` is below 1.
    InvalidMaxIterations,
    /// A queue channel's capacity is below 1.
    InvalidChannelCapacity,
    /// A spawn timeout is zero.
    InvalidTimeout,
    /// A tool's JSON Schema does not compile.
    InvalidSchema,
    /// A steering rule is malformed (duplicate id, no hook, neither or both of predicate and judge).
    InvalidRule,
    /// An LLM-evaluated steering rule needs a model caller and none is configured.
    MissingCallModel,
    /// No model is configured for a step that needs one.
    NoModelProvider,
    /// A steering mode is neither `one-at-a-time` nor `all`.
    InvalidSteeringMode,
    /// Two tools in one scope have the same name.
    DuplicateToolName,
    /// Evicting sessions was asked for, but the runtime keeps no session log to keep them in.
    MissingArchive,
    /// An MCP server's configuration is unusable (its name cannot prefix tool names, it has no command).
    InvalidMcpServer,
    /// The memory layers' budget minimums add up to more than the model's context window has for a request.
    LayerMinimumsExceedWindow,
    /// A budget limit is zero or negative.
    InvalidBudget,
}

impl ConfigCode {
    /// The stable `SCREAMING_SNAKE_CASE` name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigCode::EmptyStepId => "EMPTY_STEP_ID",
            ConfigCode::EmptyToolName => "EMPTY_TOOL_NAME",
            ConfigCode::MissingExecuteFunction => "MISSING_EXECUTE_FUNCTION",
            ConfigCode::MissingModel => "MISSING_MODEL",
            ConfigCode::MissingMergeFunction => "MISSING_MERGE_FUNCTION",
            ConfigCode::MissingPaths => "MISSING_PATHS",
            ConfigCode::MissingLoopBody => "MISSING_LOOP_BODY",
            ConfigCode::MissingUntilPredicate => "MISSING_UNTIL_PREDICATE",
            ConfigCode::MissingContextLayers => "MISSING_CONTEXT_LAYERS",
            ConfigCode::InvalidIntervalMs => "INVALID_INTERVAL_MS",
            ConfigCode::InvalidJitter => "INVALID_JITTER",
            ConfigCode::InvalidConcurrency => "INVALID_CONCURRENCY",
            ConfigCode::InvalidRetryPolicy => "INVALID_RETRY_POLICY",
            ConfigCode::InvalidMaxIterations => "INVALID_MAX_ITERATIONS",
            ConfigCode::InvalidChannelCapacity => "INVALID_CHANNEL_CAPACITY",
            ConfigCode::InvalidTimeout => "INVALID_TIMEOUT",
            ConfigCode::InvalidSchema => "INVALID_SCHEMA",
            ConfigCode::InvalidRule => "INVALID_RULE",
            ConfigCode::MissingCallModel => "MISSING_CALL_MODEL",
            ConfigCode::NoModelProvider => "NO_MODEL_PROVIDER",
            ConfigCode::InvalidSteeringMode => "INVALID_STEERING_MODE",
            ConfigCode::DuplicateToolName => "DUPLICATE_TOOL_NAME",
            ConfigCode::MissingArchive => "MISSING_ARCHIVE",
            ConfigCode::InvalidMcpServer => "INVALID_MCP_SERVER",
            ConfigCode::InvalidBudget => "INVALID_BUDGET",
            ConfigCode::LayerMinimumsExceedWindow => "LAYER_MINIMUMS_EXCEED_WINDOW",
        }
    }
}

impl fmt::Display for ConfigCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configuration mistake, found when the program is assembled rather than while it runs.
///
/// `message` says what is wrong, `hint` says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message} (hint: {hint})")]
pub struct ConfigError {
    /// Stable code, e.g. `EMPTY_STEP_ID`.
    pub code: ConfigCode,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: String,
}

impl ConfigError {
    /// Creates a configuration error.
    pub fn new(code: ConfigCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        ConfigError { code, message: message.into(), hint: hint.into() }
    }
}
