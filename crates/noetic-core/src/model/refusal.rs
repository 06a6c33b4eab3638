//! Recognising a provider's "the request is too long for the context window" answer, so every provider maps it to
//! [`NoeticError::ContextLengthExceeded`] (which compacts and retries once) the same way.

use serde_json::Value;

use crate::error::NoeticError;

/// Error codes and types providers give a request that does not fit (OpenAI, llama.cpp).
const KINDS: &[&str] = &["context_length_exceeded", "exceed_context_size_error", "string_above_max_length"];

/// Phrases of such answers (OpenAI and OpenRouter, llama.cpp, Anthropic, Ollama, vLLM), lowercase.
const PHRASES: &[&str] = &[
    "maximum context length",
    "exceeds the available context size",
    "prompt is too long",
    "exceed context limit",
    "context window",
    "context length exceeded",
    "input is too long",
    "too many tokens",
];

/// The typed error for a provider answer that says the request does not fit the model's window, or `None` for any
/// other answer. `step_id` names the step that made the request ([`ModelRequest::step_id`](super::ModelRequest)),
/// `message` is the provider's message, `kind` its error code or type, `error` its error object (for llama.cpp's
/// `n_prompt_tokens` and `n_ctx`).
pub fn context_refusal(step_id: &str, message: &str, kind: Option<&str>, error: &Value) -> Option<NoeticError> {
    let lower = message.to_ascii_lowercase();
    let known_kind = kind.is_some_and(|k| KINDS.contains(&k));
    if !known_kind && !PHRASES.iter().any(|p| lower.contains(p)) {
        return None;
    }
    let (mut requested, mut limit) = numbers(&lower);
    requested = error["n_prompt_tokens"].as_u64().or(requested);
    limit = error["n_ctx"].as_u64().or(limit);
    Some(NoeticError::ContextLengthExceeded {
        step_id: step_id.to_owned(),
        message: message.to_owned(),
        requested,
        limit,
    })
}

/// The request's size and the window's, as the known phrasings give them: "maximum context length is L tokens
/// … resulted in R tokens" (OpenAI), "requested about R tokens" (OpenRouter), "R tokens > L maximum" and
/// "A + B > L" (Anthropic), "request (R tokens) exceeds the available context size (L tokens)" (llama.cpp).
fn numbers(text: &str) -> (Option<u64>, Option<u64>) {
    let after = |marker: &str| text.find(marker).and_then(|at| first_number(&text[at + marker.len()..]));
    let limit = after("maximum context length is")
        .or_else(|| after("available context size ("))
        .or_else(|| after("> ").filter(|_| text.contains('>')));
    let requested = after("resulted in")
        .or_else(|| after("requested about"))
        .or_else(|| after("request ("))
        .or_else(|| sum_before(text, '>'));
    (requested, limit)
}

fn first_number(text: &str) -> Option<u64> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let digits: String = text[start..].chars().take_while(char::is_ascii_digit).collect();
    // Only a number close to the marker belongs to it.
    (start <= 3).then(|| digits.parse().ok()).flatten()
}

/// The sum of the numbers in the clause before `sign` ("prompt is too long: 208310 tokens > …", "188240 + 21333 >").
fn sum_before(text: &str, sign: char) -> Option<u64> {
    let clause = text.split(sign).next()?;
    let clause = clause.rsplit(':').next()?;
    let numbers: Vec<u64> = clause.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect();
    (!numbers.is_empty()).then(|| numbers.iter().sum())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sizes(e: Option<NoeticError>) -> Option<(Option<u64>, Option<u64>)> {
        match e? {
            NoeticError::ContextLengthExceeded { requested, limit, .. } => Some((requested, limit)),
            _ => None,
        }
    }

    #[test]
    fn each_providers_context_length_answer_is_recognised_with_its_numbers() {
        let openai = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 \
                      tokens. Please reduce the length of the messages.";
        assert_eq!(
            sizes(context_refusal("", openai, Some("context_length_exceeded"), &json!({}))),
            Some((Some(130_532), Some(128_000)))
        );
        let openrouter = "This endpoint's maximum context length is 8192 tokens. However, you requested about 9001 \
                          tokens (8001 of text input, 1000 in the output).";
        assert_eq!(sizes(context_refusal("", openrouter, None, &json!({}))), Some((Some(9_001), Some(8_192))));
        let llama = json!({"code":400,"message":"request (6010 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6010,"n_ctx":4096});
        let message = llama["message"].as_str().unwrap_or_default();
        assert_eq!(
            sizes(context_refusal("", message, Some("exceed_context_size_error"), &llama)),
            Some((Some(6_010), Some(4_096)))
        );
        let anthropic = "prompt is too long: 208310 tokens > 200000 maximum";
        assert_eq!(
            sizes(context_refusal("", anthropic, Some("invalid_request_error"), &json!({}))),
            Some((Some(208_310), Some(200_000)))
        );
        let anthropic = "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input \
                         length or `max_tokens` and try again";
        assert_eq!(sizes(context_refusal("", anthropic, None, &json!({}))), Some((Some(209_573), Some(200_000))));
    }

    #[test]
    fn other_answers_are_not_taken_for_a_context_length_error() {
        assert!(context_refusal("", "Invalid API key", Some("invalid_request_error"), &json!({})).is_none());
        assert!(context_refusal("", "max_tokens must be at most 4096", None, &json!({})).is_none());
    }
}
