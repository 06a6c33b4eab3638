//! The two error types of the runtime.
//!
//! * [`NoeticError`] — something went wrong while a step ran (a failed attempt, a cancelled context, a fork with
//!   failed paths, a steering denial …). Every variant's message says what happened and what to do about it.
//! * [`ConfigError`] — the program was put together wrongly (an empty step id, a fork without a merge function,
//!   a negative interval …). Builders return it before anything runs; it carries a stable [`ConfigCode`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod config;
mod panic;

pub use config::{ConfigCode, ConfigError};
pub use panic::{guard, guard_async, panic_message, panicked};

/// The error underneath a [`NoeticError`] (an I/O error, a JSON error, a tool's own error …), kept typed so that
/// `std::error::Error::source` walks to it and a caller can downcast it. Cloning shares it. It is not part of the
/// serialised form: an error read back from the wire or the log has only its message (which names the cause).
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Keeps `error` as a source.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        ErrorSource(Arc::new(error))
    }

    /// The error, if it has type `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ErrorSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A successful path's value inside [`NoeticError::ForkPartial`]. Values are kept type-erased so the error type
/// stays non-generic; read one back with [`PathValue::downcast_ref`]. Serialisation skips the value.
#[derive(Clone)]
pub struct PathValue(Arc<dyn Any + Send + Sync>);

impl PathValue {
    /// Wraps a value.
    pub fn new<T: Send + Sync + 'static>(value: T) -> Self {
        PathValue(Arc::new(value))
    }

    /// The value, if it has type `T` (the fork's output type).
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for PathValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PathValue(..)")
    }
}

/// A path of a fork that succeeded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathSuccess {
    /// The id of the path's step.
    pub step_id: String,
    /// The position of the path in the list `paths` returned.
    pub index: usize,
    /// The path's output (not serialised).
    #[serde(skip)]
    pub value: Option<PathValue>,
}

/// A path of a fork that failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathFailure {
    /// The id of the path's step.
    pub step_id: String,
    /// The position of the path in the list `paths` returned.
    pub index: usize,
    /// Why it failed.
    pub error: NoeticError,
}

/// Which budget a [`NoeticError::BudgetExceeded`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetField {
    /// Accumulated cost in US dollars.
    Cost,
    /// Number of steps.
    Steps,
    /// Wall-clock duration in milliseconds.
    Duration,
}

impl fmt::Display for BudgetField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetField::Cost => "cost",
            BudgetField::Steps => "steps",
            BudgetField::Duration => "duration",
        })
    }
}

/// An error raised while steps run.
///
/// The enum is serialisable (`{"kind": "step_failed", ...}`) so errors can cross process boundaries and be logged
/// as JSON. Durations are serialised as milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NoeticError {
    /// A step failed after all its attempts.
    #[error("step '{step_id}' failed: {cause}{}", if *retries_exhausted { " (all retry attempts used)" } else { "" })]
    StepFailed {
        /// The failing step.
        step_id: String,
        /// The last error the step produced.
        #[source]
        cause: Box<NoeticError>,
        /// True when the step had a retry policy with more than one attempt and used them all.
        retries_exhausted: bool,
    },
    /// The model refused to answer.
    #[error("model refused at step '{step_id}': {refusal}")]
    ModelRefused {
        /// The llm step.
        step_id: String,
        /// The model's refusal text.
        refusal: String,
    },
    /// The model's output did not parse or did not match the step's output schema.
    #[error(
        "model output at step '{step_id}' does not match the output schema: {message}; the raw output is attached as `raw` — loosen the schema or tell the model the expected format in the instructions"
    )]
    ModelParseError {
        /// The llm step.
        step_id: String,
        /// The raw text the model returned.
        raw: String,
        /// Why it did not parse or validate.
        message: String,
    },
    /// The model provider rate-limited the call.
    #[error("model rate limited at step '{step_id}'{}{}; wait and retry, or lower the request rate", match retry_after_ms { Some(ms) => format!(" (retry after {ms} ms)"), None => String::new() }, message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    ModelRateLimit {
        /// The llm step.
        step_id: String,
        /// How long the provider asked to wait, if it said.
        retry_after_ms: Option<u64>,
        /// The provider's own words, when it gave any.
        #[serde(default)]
        message: Option<String>,
    },
    /// The model provider failed (network, server, authentication, malformed response).
    #[error("model call failed: {message}")]
    ModelFailed {
        /// What went wrong and what to do.
        message: String,
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// The raw response body, when there was one.
        raw: Option<String>,
        /// True when trying again may help (server errors, dropped connections before any byte arrived).
        #[serde(default)]
        retryable: bool,
        /// The error underneath (the HTTP client's, with its I/O cause), when there was one. Not serialised: an
        /// error read back from the wire or the log has the message, which names the cause.
        #[source]
        #[serde(skip)]
        source: Option<ErrorSource>,
    },
    /// The request did not fit the model's context window: the provider said so, or the runtime found that even
    /// with the history compacted the instructions, the layers' minimums and the current turn do not fit.
    #[error(
        "the request does not fit the model's context window{}: {message}; shorten the current turn or the \
         instructions, lower the memory layers' budgets, or use a model with a larger window",
        match (requested, limit) { (Some(r), Some(l)) => format!(" ({r} tokens, the window has {l})"), (None, Some(l)) => format!(" (the window has {l} tokens)"), _ => String::new() }
    )]
    ContextLengthExceeded {
        /// The llm step (empty when the provider raised it before the step was known).
        step_id: String,
        /// What the provider or the runtime said.
        message: String,
        /// The tokens the request took, when known.
        requested: Option<u64>,
        /// The tokens the window holds, when known.
        limit: Option<u64>,
    },
    /// Some paths of a fork failed.
    #[error("fork '{step_id}' partial failure: {} succeeded, {} failed; first failure: {}", succeeded.len(), failed.len(), failed.first().map(|f| f.error.to_string()).unwrap_or_else(|| "none".into()))]
    ForkPartial {
        /// The fork step.
        step_id: String,
        /// Paths that succeeded, in path order.
        succeeded: Vec<PathSuccess>,
        /// Paths that failed, in path order.
        failed: Vec<PathFailure>,
    },
    /// A channel operation timed out.
    #[error("channel '{channel}' timed out after {} ms; nothing was sent in time — raise the timeout or check the sender", timeout.as_millis())]
    ChannelTimeout {
        /// The channel's name.
        channel: String,
        /// How long the operation waited.
        #[serde(with = "duration_ms")]
        timeout: Duration,
    },
    /// A channel was closed.
    #[error("channel '{channel}' is closed")]
    ChannelClosed {
        /// The channel's name.
        channel: String,
    },
    /// The context was cancelled.
    #[error("cancelled{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// Why, when known.
        reason: Option<String>,
    },
    /// A budget was exceeded.
    #[error("budget exceeded: {field} limit {limit}, actual {actual}")]
    BudgetExceeded {
        /// Which budget.
        field: BudgetField,
        /// The limit.
        limit: f64,
        /// The value reached.
        actual: f64,
    },
    /// A session's budget limit was reached: the turn ended at its next model request or tool call, and the
    /// session is paused until a person raises the limit (see the `budget` module).
    #[error(
        "the {scope} budget's {limit} limit of {allowed} was reached ({used} used); the session is paused and its \
         messages wait: raise the limit to continue (/budget in noetic chat, Raise on the page, PUT \
         /api/sessions/{{key}}/budget, or Session::raise_budget)"
    )]
    BudgetReached {
        /// `session` or `turn`.
        scope: String,
        /// The limit's name (`tool_calls`, `wall_time` …).
        limit: String,
        /// What it allows.
        allowed: String,
        /// What was spent.
        used: String,
    },
    /// A steering rule denied the action.
    #[error("steering denied{}", guidance.as_ref().map(|g| format!(": {g}")).unwrap_or_default())]
    SteeringDenied {
        /// The rule's guidance, telling the agent how to correct course.
        guidance: Option<String>,
    },
    /// A step ran longer than its timeout and was cancelled.
    #[error("step '{step_id}' timed out after {} ms and was cancelled; raise the timeout or make the step faster", after.as_millis())]
    Timeout {
        /// The step with the timeout.
        step_id: String,
        /// The timeout.
        #[serde(with = "duration_ms")]
        after: Duration,
    },
    /// A loop reached `max_iterations` without its `until` predicate stopping it.
    #[error(
        "loop '{step_id}' exceeded its maximum of {max_iterations} iterations without the until predicate stopping it; raise max_iterations or check the predicate"
    )]
    LoopLimitExceeded {
        /// The loop step.
        step_id: String,
        /// The configured limit.
        max_iterations: u32,
    },
    /// An `llm` step's model kept asking for tools past the round limit.
    #[error(
        "llm step '{step_id}' reached its limit of {max_rounds} model rounds while the model still asked for tools; raise max_rounds or tell the model when to stop"
    )]
    RoundLimitExceeded {
        /// The llm step.
        step_id: String,
        /// The configured limit.
        max_rounds: u32,
    },
    /// Steps were nested deeper than the runtime allows.
    #[error(
        "step '{step_id}' is nested {depth} levels deep, over the limit of {limit}; a branch or spawn probably recurses without end"
    )]
    DepthExceeded {
        /// The step that was not started.
        step_id: String,
        /// Its depth.
        depth: u32,
        /// The limit.
        limit: u32,
    },
    /// A tool call failed (invalid arguments, the tool's own error, an invalid result, a rejected approval).
    #[error("tool '{tool}' failed: {message}")]
    ToolFailed {
        /// The tool's name.
        tool: String,
        /// What went wrong.
        message: String,
        /// The tool's own error, when it raised one.
        #[source]
        #[serde(skip)]
        source: Option<ErrorSource>,
    },
    /// A configuration mistake surfaced at run time.
    #[error(transparent)]
    Config(ConfigError),
    /// Any other error, raised by user code.
    #[error("{message}")]
    Other {
        /// What went wrong.
        message: String,
        /// The error underneath, when there was one ([`NoeticError::with_source`], `From<std::io::Error>` …).
        #[source]
        #[serde(skip)]
        source: Option<ErrorSource>,
    },
}

impl NoeticError {
    /// An error from user code, with a message.
    pub fn other(message: impl fmt::Display) -> Self {
        NoeticError::Other { message: message.to_string(), source: None }
    }

    /// An error from user code that keeps the error underneath it: the message says what failed, `source`
    /// (reachable through `std::error::Error::source`, downcastable) why.
    pub fn with_source(message: impl fmt::Display, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        NoeticError::Other { message: message.to_string(), source: Some(ErrorSource::new(source)) }
    }

    /// A cancellation error with a reason.
    pub fn cancelled(reason: impl Into<String>) -> Self {
        NoeticError::Cancelled { reason: Some(reason.into()) }
    }

    /// True for errors a model call may recover from by retrying: rate limits and failures marked retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            NoeticError::ModelRateLimit { .. } => true,
            NoeticError::ModelFailed { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// True for [`NoeticError::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        matches!(self, NoeticError::Cancelled { .. })
    }

    /// The snake_case kind name used in the serialised form (`"step_failed"`, `"cancelled"` …).
    pub fn kind(&self) -> &'static str {
        match self {
            NoeticError::StepFailed { .. } => "step_failed",
            NoeticError::ModelRefused { .. } => "model_refused",
            NoeticError::ModelParseError { .. } => "model_parse_error",
            NoeticError::ModelRateLimit { .. } => "model_rate_limit",
            NoeticError::ModelFailed { .. } => "model_failed",
            NoeticError::ContextLengthExceeded { .. } => "context_length_exceeded",
            NoeticError::ForkPartial { .. } => "fork_partial",
            NoeticError::ChannelTimeout { .. } => "channel_timeout",
            NoeticError::ChannelClosed { .. } => "channel_closed",
            NoeticError::Cancelled { .. } => "cancelled",
            NoeticError::BudgetExceeded { .. } => "budget_exceeded",
            NoeticError::BudgetReached { .. } => "budget_reached",
            NoeticError::SteeringDenied { .. } => "steering_denied",
            NoeticError::Timeout { .. } => "timeout",
            NoeticError::LoopLimitExceeded { .. } => "loop_limit_exceeded",
            NoeticError::RoundLimitExceeded { .. } => "round_limit_exceeded",
            NoeticError::DepthExceeded { .. } => "depth_exceeded",
            NoeticError::ToolFailed { .. } => "tool_failed",
            NoeticError::Config(_) => "config",
            NoeticError::Other { .. } => "other",
        }
    }
}

impl From<ConfigError> for NoeticError {
    fn from(e: ConfigError) -> Self {
        NoeticError::Config(e)
    }
}

impl From<std::io::Error> for NoeticError {
    fn from(e: std::io::Error) -> Self {
        NoeticError::with_source(e.to_string(), e)
    }
}

impl From<serde_json::Error> for NoeticError {
    fn from(e: serde_json::Error) -> Self {
        NoeticError::with_source(e.to_string(), e)
    }
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used, clippy::expect_used)]
    fn an_io_error_is_kept_as_a_typed_source_and_left_out_of_the_serialised_form() {
        let err = NoeticError::from(std::io::Error::new(std::io::ErrorKind::NotFound, "rules.toml is missing"));
        assert_eq!(err.to_string(), "rules.toml is missing");
        let source = std::error::Error::source(&err).expect("the io error is the source");
        let io = source.downcast_ref::<ErrorSource>().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound));
        let wire = serde_json::to_string(&err).unwrap();
        assert_eq!(wire, r#"{"kind":"other","message":"rules.toml is missing"}"#);
        let back: NoeticError = serde_json::from_str(&wire).unwrap();
        assert!(std::error::Error::source(&back).is_none());
        assert_eq!(back.to_string(), err.to_string());
    }

    #[test]
    fn errors_serialise_with_a_kind_tag() {
        let e = NoeticError::StepFailed {
            step_id: "s".into(),
            cause: Box::new(NoeticError::other("boom")),
            retries_exhausted: true,
        };
        let json = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(json["kind"], "step_failed");
        assert_eq!(json["cause"]["kind"], "other");
        let back: NoeticError = serde_json::from_value(json).unwrap_or_else(|_| NoeticError::other("x"));
        assert_eq!(back.to_string(), e.to_string());
    }

    #[test]
    fn config_error_codes_serialise_as_stable_strings() {
        let e = ConfigError::new(ConfigCode::EmptyStepId, "m", "h");
        let json = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(json["code"], "EMPTY_STEP_ID");
        assert_eq!(ConfigCode::InvalidJitter.as_str(), "INVALID_JITTER");
    }
}
