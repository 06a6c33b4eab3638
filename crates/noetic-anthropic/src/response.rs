//! Response translation: the JSON body of a Messages response → a provider-neutral [`ModelResponse`].
//!
//! Parsing is tolerant: unknown fields and unknown content blocks (`thinking`, server tools …) are ignored, and
//! missing optional fields take their defaults. A body of the usual shape is read by typed views without a
//! `serde_json::Value` tree (a tool call's `input` aside, whose JSON text is what it always was); the rest —
//! error objects, oddly typed fields — by walking a `Value`, with the same result.

use std::borrow::Cow;

use noetic_core::NoeticError;
use noetic_core::model::{FinishReason, Item, ModelResponse, ToolCall, Usage};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::error::error_from_body_of;

/// Parses the body of a successful (2xx) `POST /v1/messages` response.
///
/// Text blocks are concatenated into one assistant message; each `tool_use` block becomes an
/// [`Item::ToolCall`] whose arguments are the JSON text of its `input`. `stop_reason` maps to
/// [`FinishReason`]: `end_turn` and `stop_sequence` → `Stop`, `tool_use` → `ToolCalls`, `max_tokens` and
/// `model_context_window_exceeded` → `Length`, `refusal` → `ContentFilter` with [`ModelResponse::refusal`] set,
/// anything else → `Other`. Usage: see [`usage`].
///
/// # Errors
///
/// A body that is not JSON, or an Anthropic error object (`{"type": "error", "error": {...}}`, which proxies
/// sometimes send with status 200), becomes a [`NoeticError`] carrying the provider's message and the raw body.
pub fn parse_response(body: &str) -> Result<ModelResponse, NoeticError> {
    parse_response_of(body, "")
}

/// [`parse_response`] of a request made by the step `step_id`, which a rate limit in the body names.
pub(crate) fn parse_response_of(body: &str, step_id: &str) -> Result<ModelResponse, NoeticError> {
    match serde_json::from_str::<Answer<'_>>(body) {
        Ok(answer) if answer.error.is_none() && answer.kind.as_deref() != Some("error") => Ok(answer.into_response()),
        _ => value_response(body, step_id),
    }
}

/// A Messages response as its typed view reads it.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default, borrow)]
    content: Option<Vec<Block<'a>>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
}

/// A content block: text, a tool use, or one this crate does not surface.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
}

/// A `usage` object (counts that are whole numbers).
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl Answer<'_> {
    fn into_response(self) -> ModelResponse {
        let mut parts = Parts::default();
        for block in self.content.unwrap_or_default() {
            match block.kind.as_deref() {
                Some("text") => parts.text.push_str(block.text.as_deref().unwrap_or_default()),
                Some("tool_use") => parts.calls.push(ToolCall {
                    id: block.id.unwrap_or_default().into(),
                    name: ToolCall::shared_name(block.name.as_deref().unwrap_or_default()),
                    arguments: block.input.map_or_else(|| "{}".into(), |input| input.to_string().into()),
                }),
                _ => {}
            }
        }
        parts.stop_reason = self.stop_reason;
        if let Some(u) = self.usage {
            let cached = u.cache_read_input_tokens.unwrap_or(0);
            parts.usage = Usage {
                input_tokens: u.input_tokens.unwrap_or(0) + u.cache_creation_input_tokens.unwrap_or(0) + cached,
                output_tokens: u.output_tokens.unwrap_or(0),
                cached_tokens: cached,
                cost: None,
            };
        }
        parts.model = self.model.filter(|m| !m.is_empty()).map(|m| ModelResponse::shared_model_name(&m));
        parts.into_response()
    }
}

/// [`parse_response`] by walking a `Value`: any JSON, error objects included.
pub(super) fn value_response(body: &str, step_id: &str) -> Result<ModelResponse, NoeticError> {
    let value: Value = serde_json::from_str(body).map_err(|e| NoeticError::ModelFailed {
        message: format!(
            "Anthropic returned a response body that is not JSON ({e}); the raw body is attached — check that the \
             base URL points at an Anthropic Messages API"
        ),
        status: None,
        raw: Some(body.to_owned()),
        retryable: false,
        source: None,
    })?;
    if let Some(error) = error_from_body_of(step_id, None, &value, body) {
        return Err(error);
    }
    let mut parts = Parts::default();
    for block in value["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => parts.calls.push(ToolCall {
                id: string(&block["id"]).into(),
                name: ToolCall::shared_name(block["name"].as_str().unwrap_or_default()),
                arguments: match &block["input"] {
                    Value::Null => "{}".into(),
                    input => input.to_string().into(),
                },
            }),
            _ => {}
        }
    }
    parts.stop_reason = value["stop_reason"].as_str().map(str::to_owned);
    parts.usage = usage(&value["usage"]);
    parts.model = value["model"].as_str().filter(|m| !m.is_empty()).map(ModelResponse::shared_model_name);
    Ok(parts.into_response())
}

/// Token usage from an Anthropic `usage` object.
///
/// Anthropic counts cache reads (`cache_read_input_tokens`) and cache writes (`cache_creation_input_tokens`)
/// apart from `input_tokens`; noetic's [`Usage::input_tokens`] means all prompt tokens, with `cached_tokens` a
/// part of them (as OpenAI reports it), so `input_tokens` here is the sum of the three and `cached_tokens` the
/// cache reads. Missing fields count as zero.
pub fn usage(usage: &Value) -> Usage {
    let n = |field: &str| usage[field].as_u64().unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    Usage {
        input_tokens: n("input_tokens") + n("cache_creation_input_tokens") + cached,
        output_tokens: n("output_tokens"),
        cached_tokens: cached,
        // Anthropic reports no price.
        cost: None,
    }
}

/// The pieces of a response, gathered from a whole body or from a stream.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub(crate) text: String,
    pub(crate) calls: Vec<ToolCall>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) usage: Usage,
    /// The model that answered.
    pub(crate) model: Option<std::sync::Arc<str>>,
}

impl Parts {
    /// The response: the text first (when there is any), then the tool calls in order.
    pub(crate) fn into_response(self) -> ModelResponse {
        let finish_reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            Some(other) => FinishReason::Other(other.to_owned()),
            None if !self.calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        let refusal = (finish_reason == FinishReason::ContentFilter).then(|| {
            if self.text.trim().is_empty() {
                "Anthropic stopped the response for safety reasons (stop_reason \"refusal\")".to_owned()
            } else {
                self.text.clone()
            }
        });
        let mut items = Vec::with_capacity(self.calls.len() + 1);
        if !self.text.is_empty() {
            items.push(Item::assistant(self.text));
        }
        items.extend(self.calls.into_iter().map(Item::ToolCall));
        ModelResponse { items, usage: self.usage, finish_reason, refusal, model: self.model }
    }
}

/// A JSON string field, or empty.
fn string(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod typed_tests;

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_blocks_are_concatenated_and_tool_uses_become_calls_after_the_text() {
        let body = json!({
            "type": "message",
            "content": [
                {"type": "text", "text": "Let me "},
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "check."},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3,
                      "cache_creation_input_tokens": 2},
            "unknown": {"ignored": true},
        });
        let r = parse_response(&body.to_string()).unwrap_or_default();
        assert_eq!(r.items[0], Item::assistant("Let me check."));
        assert_eq!(
            r.items[1],
            Item::ToolCall(ToolCall {
                id: "t1".into(),
                name: "weather".into(),
                arguments: r#"{"city":"Oslo"}"#.into()
            })
        );
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(r.usage, Usage { input_tokens: 15, output_tokens: 5, cached_tokens: 3, cost: None });
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        for (wire, expected) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("tool_use", FinishReason::ToolCalls),
            ("max_tokens", FinishReason::Length),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ] {
            let body = json!({"content": [{"type": "text", "text": "x"}], "stop_reason": wire}).to_string();
            assert_eq!(parse_response(&body).map(|r| r.finish_reason).ok(), Some(expected), "{wire}");
        }
    }

    #[test]
    fn a_refusal_sets_the_refusal_and_content_filter() {
        let body = json!({"content": [], "stop_reason": "refusal"}).to_string();
        let r = parse_response(&body).unwrap_or_default();
        assert_eq!(r.finish_reason, FinishReason::ContentFilter);
        assert!(r.refusal.is_some_and(|t| t.contains("refusal")));
    }

    #[test]
    fn missing_fields_default() {
        let r = parse_response("{}").unwrap_or_else(|e| ModelResponse::text(e.to_string()));
        assert_eq!(r, ModelResponse { items: vec![], ..Default::default() });
    }

    #[test]
    fn an_error_object_in_a_success_body_is_an_error_with_the_message_and_raw_body() {
        let body =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}"#;
        match parse_response(body) {
            Err(NoeticError::ModelFailed { message, raw, .. }) => {
                assert!(message.contains("max_tokens: field required"), "{message}");
                assert_eq!(raw.as_deref(), Some(body));
            }
            other => panic!("expected ModelFailed, got {other:?}"),
        }
    }

    #[test]
    fn a_body_that_is_not_json_is_an_error_with_the_raw_body() {
        match parse_response("<html>bad gateway</html>") {
            Err(NoeticError::ModelFailed { raw, retryable: false, .. }) => {
                assert_eq!(raw.as_deref(), Some("<html>bad gateway</html>"));
            }
            other => panic!("expected ModelFailed, got {other:?}"),
        }
    }
}
