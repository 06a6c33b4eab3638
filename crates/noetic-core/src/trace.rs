//! Traces: the `tracing` spans and span events the runtime opens, following the OpenTelemetry GenAI semantic
//! conventions (SPEC 7.3). The crate depends on `tracing` only; an application exports them by installing a
//! subscriber (the `noetic` command installs `tracing-opentelemetry` with an OTLP exporter).
//!
//! | span (`otel.name`) | opened by | attributes |
//! |---|---|---|
//! | `invoke_agent` | a session turn | `gen_ai.operation.name`, `gen_ai.conversation.id` (the session key), `noetic.turn` |
//! | `step {kind}` | every step | `noetic.step.kind`, `noetic.step.id` |
//! | `chat {model}` | every model request of an `llm` step | `gen_ai.operation.name`, `gen_ai.provider.name` (when the model says), `gen_ai.request.model`, the request parameters set (`gen_ai.request.temperature`, `gen_ai.request.top_p`, `gen_ai.request.max_tokens`, `gen_ai.request.stop_sequences`), `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `noetic.round`, `noetic.request.messages` |
//! | `execute_tool {name}` | every model-requested tool call | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `noetic.tool.outcome` (`ok`, `error`, `denied`, `skipped`), `noetic.tool.result.size` |
//!
//! Spans nest as the work runs: a turn's steps, an `llm` step's model and tool calls, a fork's paths and a spawned
//! child under their step. The static `tracing` name of each span is its first word (`step`, `chat`,
//! `execute_tool`); the full name is its `otel.name` field, which `tracing-opentelemetry` uses.
//!
//! Span events (their message is the event name):
//! - `steering.decision` on the span the hook guarded (the tool call's for `before_tool_call`, the model call's
//!   for `after_model_call`): `noetic.steering.hook`, `noetic.steering.action`, `noetic.steering.rule_id`,
//!   `noetic.steering.evaluator`, `noetic.steering.guidance.length`, `noetic.steering.failure` (the causes, when a
//!   rule's failure policy decided), `noetic.steering.duration_us`. Async judges add one when they resolve.
//! - `steering.queued`, `steering.rejected`, `steering.injected` (`noetic.steering.count`) and `tool.skipped`
//!   (`gen_ai.tool.call.id`) on the turn's span.
//!
//! A failed span carries `otel.status_code = "ERROR"`, `otel.status_description` and `error.type` (the
//! [`NoeticError::kind`] or the tool error kind).
//!
//! **Content is opt-in.** Prompts, responses, tool arguments and results are recorded only when content capture
//! is on (`RuntimeBuilder::capture_content` (in `agent`),
//! `ContextBuilder::capture_content` (in `context`)), as
//! `gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result`;
//! by default only sizes and ids.
//!
//! With no subscriber, or one that does not want these spans, a span costs one cached level check and nothing is
//! formatted: field values are computed only for an enabled span.

use tracing::Span;

use crate::decision::SteeringAction;
use crate::error::NoeticError;
use crate::model::{FinishReason, ToolErrorKind};

/// True when some subscriber may want the runtime's spans: a global level check, one atomic load. When false the
/// runtime takes the paths it took before traces existed (no span, no wrapper around a future).
#[inline]
pub fn on() -> bool {
    tracing::level_filters::LevelFilter::current() >= tracing::Level::INFO
}

/// Marks `span` failed with `kind` (the `error.type`) and a message.
pub fn fail(span: &Span, kind: &str, message: &dyn std::fmt::Display) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", tracing::field::display(message));
    span.record("error.type", kind);
}

/// Marks `span` failed with a runtime error.
pub fn fail_with(span: &Span, error: &NoeticError) {
    fail(span, error.kind(), error);
}

/// The name of a steering action (its serialised form).
pub fn action(action: SteeringAction) -> &'static str {
    match action {
        SteeringAction::Allow => "allow",
        SteeringAction::Guide => "guide",
        SteeringAction::Deny => "deny",
    }
}

/// The convention's name of a finish reason.
pub fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other,
    }
}

/// The snake_case name of a tool error kind (its serialised form).
pub fn tool_error_kind(kind: ToolErrorKind) -> &'static str {
    match kind {
        ToolErrorKind::InvalidArguments => "invalid_arguments",
        ToolErrorKind::NotFound => "not_found",
        ToolErrorKind::PermissionDenied => "permission_denied",
        ToolErrorKind::Timeout => "timeout",
        ToolErrorKind::Cancelled => "cancelled",
        ToolErrorKind::Upstream => "upstream",
        ToolErrorKind::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_error_kinds_are_named_as_they_serialise() {
        for kind in [
            ToolErrorKind::InvalidArguments,
            ToolErrorKind::NotFound,
            ToolErrorKind::PermissionDenied,
            ToolErrorKind::Timeout,
            ToolErrorKind::Cancelled,
            ToolErrorKind::Upstream,
            ToolErrorKind::Failed,
        ] {
            assert_eq!(serde_json::to_value(kind).ok(), Some(serde_json::Value::from(tool_error_kind(kind))));
        }
    }
}
