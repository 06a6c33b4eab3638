//! Chat-completions response body → [`ModelResponse`], and the provider's `{"error": …}` object →
//! [`NoeticError`].
//!
//! Parsing is tolerant: unknown fields are ignored, and a missing or oddly typed optional field is defaulted rather
//! than failing the whole response (servers that speak "OpenAI compatible" differ in the details). Answers of the
//! usual shape are read by typed views without a `serde_json::Value` tree (see `answer`); the rest — error objects,
//! oddly typed fields — by walking a `Value`, with the same result.

use std::borrow::Cow;

use noetic_core::NoeticError;
use noetic_core::model::{FinishReason, Item, ModelResponse, ToolCall, Usage};
use serde_json::Value;

use super::HistoryCache;
use super::answer::Answer;
use super::escaped::{EscapedArguments, escaped_as_encoded};

/// The longest provider text quoted in an error message.
const MAX_QUOTED: usize = 500;

/// Parses a non-streaming chat-completions response.
///
/// The first choice is read: its text (if any) becomes an assistant item, its tool calls become
/// [`Item::ToolCall`]s (a missing id becomes `call_<n>`, empty arguments become `{}`), `refusal` becomes
/// [`ModelResponse::refusal`]. Usage reads `prompt_tokens`, `completion_tokens`,
/// `prompt_tokens_details.cached_tokens` and OpenRouter's `cost`.
///
/// # Errors
///
/// [`NoeticError::ModelFailed`] carrying the raw body when the body is not JSON, has no choices, or is a provider
/// error object (`{"error": {...}}`, even with HTTP 200; also vLLM's `{"object": "error", ...}`).
pub fn parse_response(body: &str) -> Result<ModelResponse, NoeticError> {
    match Answer::read_whole(body) {
        Some(answer) => typed_response(answer, body),
        None => value_response(body),
    }
}

/// [`parse_response`], keeping in `cache` each tool call's arguments as the answer escaped them (where that is how
/// [`encode_body`](super::encode_body) would escape them), so that a request with the same cache that sends the
/// call back copies those bytes instead of escaping the arguments again. What is parsed is the same.
///
/// # Errors
///
/// As [`parse_response`].
pub fn parse_response_keeping(body: &str, cache: &HistoryCache) -> Result<ModelResponse, NoeticError> {
    match Answer::read_whole(body) {
        Some(answer) => read_response(answer, body, Some(&cache.1)),
        None => value_response(body),
    }
}

/// The answer has no choice to read.
fn no_choices(body: &str) -> NoeticError {
    NoeticError::ModelFailed {
        message: "the provider's response has no choices, so there is no answer to read; the raw body is attached \
                  — check the model id and the server's logs"
            .to_owned(),
        status: None,
        raw: Some(body.to_owned()),
        retryable: false,
        source: None,
    }
}

/// [`parse_response`] from the typed view.
pub(super) fn typed_response(answer: Answer<'_>, body: &str) -> Result<ModelResponse, NoeticError> {
    read_response(answer, body, None)
}

/// [`typed_response`], keeping the calls' escaped arguments in `escaped` when given.
fn read_response(
    mut answer: Answer<'_>,
    body: &str,
    escaped: Option<&EscapedArguments>,
) -> Result<ModelResponse, NoeticError> {
    let Some(choice) = answer.choice() else {
        return Err(no_choices(body));
    };
    let mut items = Vec::new();
    let mut refusal = None;
    if let Some(message) = choice.message {
        let text = message.content.map(|c| c.0).unwrap_or_default();
        if !text.is_empty() {
            items.push(Item::assistant(text));
        }
        for (index, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let (name, arguments, wire) =
                call.function.map_or((None, None, None), |f| (f.name, f.arguments, f.escaped));
            let id = call.id.as_deref().unwrap_or_default();
            let made =
                tool_call(index, id, name.as_deref().unwrap_or_default(), arguments.as_deref().unwrap_or_default());
            // The unescaped text's buffer, about to be freed, keeps the escaped text instead.
            if let (Some(kept), Some(wire), Some(Cow::Owned(text))) = (escaped, wire, arguments)
                && !blank(&text)
                && escaped_as_encoded(wire)
            {
                kept.note(&made.arguments, wire, text);
            }
            items.push(Item::ToolCall(made));
        }
        refusal = message.refusal.filter(|r| !r.is_empty());
    }
    let has_calls = items.iter().any(|i| matches!(i, Item::ToolCall(_)));
    Ok(ModelResponse {
        items,
        usage: answer.usage.as_ref().map_or_else(Usage::default, |u| u.usage()),
        finish_reason: finish_reason(choice.finish_reason.as_deref(), has_calls),
        refusal,
        model: answer.model.filter(|m| !m.is_empty()).map(|m| ModelResponse::shared_model_name(&m)),
    })
}

/// [`parse_response`] by walking a `Value`: any JSON, error objects included.
pub(super) fn value_response(body: &str) -> Result<ModelResponse, NoeticError> {
    let value: Value = serde_json::from_str(body).map_err(|e| malformed(body, &e))?;
    if let Some(error) = ProviderError::find(&value) {
        return Err(error.into_error(None, body));
    }
    let Some(choice) = value.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(no_choices(body));
    };
    let message = &choice["message"];
    let mut items = Vec::new();
    let text = content_text(&message["content"]);
    if !text.is_empty() {
        items.push(Item::assistant(text));
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (index, call) in calls.iter().enumerate() {
            let function = &call["function"];
            items.push(Item::ToolCall(tool_call(
                index,
                call["id"].as_str().unwrap_or(""),
                function["name"].as_str().unwrap_or(""),
                &arguments_text(&function["arguments"]),
            )));
        }
    }
    let has_calls = items.iter().any(|i| matches!(i, Item::ToolCall(_)));
    Ok(ModelResponse {
        items,
        usage: usage(&value["usage"]),
        finish_reason: finish_reason(choice["finish_reason"].as_str(), has_calls),
        refusal: message["refusal"].as_str().filter(|r| !r.is_empty()).map(str::to_owned),
        model: value["model"].as_str().filter(|m| !m.is_empty()).map(ModelResponse::shared_model_name),
    })
}

/// A tool call with the defaults applied: a missing id becomes `call_<index>`, empty arguments `{}`.
pub(crate) fn tool_call(index: usize, id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: if id.is_empty() { format!("call_{index}").into() } else { id.into() },
        name: ToolCall::shared_name(name),
        arguments: if blank(arguments) { "{}".into() } else { arguments.into() },
    }
}

/// Arguments that are only whitespace, which a call gets as `{}`.
fn blank(arguments: &str) -> bool {
    noetic_core::json::blank(arguments)
}

/// Arguments as raw JSON text: OpenAI sends a string; a few servers send an object.
pub(crate) fn arguments_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Message content as text: a string, or the `text` of each part of an array of content parts.
pub(crate) fn content_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// Usage and cost from a `usage` object (absent fields count as zero; no cost unless reported).
pub(crate) fn usage(value: &Value) -> Usage {
    let count = |v: &Value| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)).unwrap_or(0);
    Usage {
        input_tokens: count(&value["prompt_tokens"]),
        output_tokens: count(&value["completion_tokens"]),
        cached_tokens: count(&value["prompt_tokens_details"]["cached_tokens"]),
        cost: value["cost"].as_f64(),
    }
}

/// Maps a wire finish reason; when absent, tool calls imply `ToolCalls` and anything else `Stop`.
pub(crate) fn finish_reason(reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reason {
        Some("stop") => FinishReason::Stop,
        Some("tool_calls") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
        None if has_tool_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

/// A body that is not the JSON it should be.
pub(crate) fn malformed(raw: &str, error: &serde_json::Error) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!(
            "the provider's response is not valid JSON ({error}); the raw body is attached — check that the base \
             URL points at an OpenAI-compatible /v1 endpoint"
        ),
        status: None,
        raw: Some(raw.to_owned()),
        retryable: false,
        source: None,
    }
}

/// Cuts provider text to a length fit for an error message.
pub(crate) fn quote(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A provider's error object: `{"error": {"message", "type", "code"}}`, `{"error": "text"}`, or vLLM's
/// `{"object": "error", "message", "type", "code"}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProviderError {
    /// The provider's message.
    pub message: String,
    /// `type` or a string `code` (e.g. `insufficient_quota`).
    pub kind: Option<String>,
    /// A numeric `code` (OpenRouter puts the HTTP status there).
    pub code: Option<u16>,
}

impl ProviderError {
    /// The error object in `value`, if it is one.
    pub fn find(value: &Value) -> Option<ProviderError> {
        let error = match value.get("error") {
            Some(Value::Null) | None if value["object"] == "error" => value,
            Some(Value::Null) | None => return None,
            Some(Value::String(text)) => {
                return Some(ProviderError { message: text.clone(), kind: None, code: None });
            }
            Some(error) => error,
        };
        let message = match &error["message"] {
            Value::String(text) => text.clone(),
            Value::Null => error.to_string(),
            other => other.to_string(),
        };
        let code = error["code"].as_u64().and_then(|c| u16::try_from(c).ok());
        let kind = error["code"].as_str().or_else(|| error["type"].as_str()).map(str::to_owned);
        Some(ProviderError { message, kind, code })
    }

    /// The provider's error object in a raw body, if the body is one.
    pub fn in_body(raw: &str) -> Option<ProviderError> {
        serde_json::from_str::<Value>(raw).ok().as_ref().and_then(ProviderError::find)
    }

    /// The typed error for an error object received with HTTP `status` (None: inside a 200 body or a stream).
    /// Retryable when its numeric code says rate limit or server error.
    pub fn into_error(self, status: Option<u16>, raw: &str) -> NoeticError {
        let code = status.or(self.code);
        let retryable = matches!(code, Some(408 | 429 | 500..=599));
        let kind = self.kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default();
        let advice = if retryable { "try again later" } else { "check the request, the model id and the account" };
        NoeticError::ModelFailed {
            message: format!("the provider returned an error{kind}: {}; {advice}", quote(&self.message)),
            status: code,
            raw: Some(raw.to_owned()),
            retryable,
            source: None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_defaulted() {
        let body = r#"{"choices":[{"message":{"content":"hi","annotations":[]},"logprobs":null}],"x":1}"#;
        let r = parse_response(body).unwrap_or_default();
        assert_eq!(r.items, vec![Item::assistant("hi")]);
        assert_eq!(r.usage, Usage::default());
        assert_eq!(r.finish_reason, FinishReason::Stop);
        assert_eq!(r.usage.cost, None);
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn answers_naming_the_same_model_share_one_name_and_an_empty_name_is_none() {
        let body = |model: &str| json!({"model": model, "choices": [{"message": {"content": "hi"}}]}).to_string();
        let first = parse_response(&body("gpt-4o-mini-2024-07-18")).unwrap().model.unwrap();
        let second = parse_response(&body("gpt-4o-mini-2024-07-18")).unwrap().model.unwrap();
        assert!(Arc::ptr_eq(&first, &second), "the second answer's name is the first's");
        assert_eq!(&*first, "gpt-4o-mini-2024-07-18");
        let escaped = parse_response(&body("gpt-\"4o\"")).unwrap().model.unwrap();
        assert_eq!(&*escaped, "gpt-\"4o\"");
        assert_eq!(parse_response(&body("")).unwrap().model, None);
        // The `Value` walk (any JSON) shares the name too.
        let walked = value_response(&body("gpt-4o-mini-2024-07-18")).unwrap().model.unwrap();
        assert!(Arc::ptr_eq(&first, &walked));
    }

    #[test]
    fn a_reported_cost_is_kept_in_the_usage_and_none_is_made_up_without_one() {
        let with = json!({"choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 14, "completion_tokens": 12, "cost": 0.00123}});
        let r = parse_response(&with.to_string()).unwrap_or_default();
        assert_eq!(r.usage, Usage { input_tokens: 14, output_tokens: 12, cached_tokens: 0, cost: Some(0.00123) });
        let without = json!({"choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 14, "completion_tokens": 12}});
        let r = parse_response(&without.to_string()).unwrap_or_default();
        assert_eq!(r.usage, Usage { input_tokens: 14, output_tokens: 12, cached_tokens: 0, cost: None });
    }

    #[test]
    fn tool_calls_without_ids_or_arguments_get_defaults_and_object_arguments_are_kept_as_json() {
        let body = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"function": {"name": "clock", "arguments": ""}},
            {"id": "c2", "function": {"name": "weather", "arguments": {"city": "Paris"}}}
        ]}}]})
        .to_string();
        let r = parse_response(&body).unwrap_or_default();
        let calls: Vec<_> = r.tool_calls_iter().cloned().collect();
        assert_eq!(calls[0], ToolCall { id: "call_0".into(), name: "clock".into(), arguments: "{}".into() });
        assert_eq!(&*calls[1].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn content_parts_are_concatenated_and_unknown_finish_reasons_kept() {
        let body =
            json!({"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            "finish_reason": "eos"}]})
            .to_string();
        let r = parse_response(&body).unwrap_or_default();
        assert_eq!(r.text_output(), "ab");
        assert_eq!(r.finish_reason, FinishReason::Other("eos".into()));
    }

    #[test]
    fn error_shapes_of_openai_vllm_and_plain_text_are_recognised() {
        let openai = json!({"error": {"message": "bad", "type": "invalid_request_error", "code": null}});
        assert_eq!(
            ProviderError::find(&openai),
            Some(ProviderError { message: "bad".into(), kind: Some("invalid_request_error".into()), code: None })
        );
        let vllm = json!({"object": "error", "message": "no model", "type": "NotFoundError", "code": 404});
        assert_eq!(ProviderError::find(&vllm).map(|e| e.code), Some(Some(404)));
        assert_eq!(ProviderError::find(&json!({"error": "oops"})).map(|e| e.message), Some("oops".into()));
        assert_eq!(ProviderError::find(&json!({"error": null, "choices": []})), None);
    }

    #[test]
    fn no_choices_and_malformed_json_are_typed_errors_with_the_raw_body() {
        for body in ["{\"choices\": []}", "{not json"] {
            match parse_response(body) {
                Err(NoeticError::ModelFailed { raw, retryable, .. }) => {
                    assert_eq!(raw.as_deref(), Some(body));
                    assert!(!retryable);
                }
                other => panic!("expected ModelFailed, got {other:?}"),
            }
        }
    }

    #[test]
    fn long_provider_text_is_cut_in_messages() {
        let long = "é".repeat(2 * MAX_QUOTED);
        assert_eq!(quote(&long).chars().count(), MAX_QUOTED + 1);
    }
}
