//! Streamed chat completions: SSE `data:` payloads → [`StreamDelta`]s.

use std::borrow::Cow;
use std::collections::HashMap;

use noetic_core::NoeticError;
use noetic_core::model::{Item, ModelResponse, StreamDelta, Usage};
use serde_json::Value;

use super::answer::Answer;
use super::response::{ProviderError, arguments_text, content_text, finish_reason, tool_call, usage};

/// A tool call being assembled from pieces.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a streamed chat completion from its SSE `data:` payloads.
///
/// Feed each payload to [`push`](StreamAccumulator::push) and call [`finish`](StreamAccumulator::finish) when the
/// byte stream ends. Text pieces become [`StreamDelta::Text`]; tool-call pieces become [`StreamDelta::ToolCall`]
/// (with the id and name on the first piece of each call, arguments concatenated per call); `[DONE]` — or the end
/// of a stream that reported a finish reason — yields [`StreamDelta::Done`] with the assembled response. Usage is
/// taken from the last chunk that carries it (OpenAI sends it in a final chunk with no choices when
/// `stream_options.include_usage` is set; OpenRouter in the last choice chunk, with `cost`).
///
/// Tool-call pieces are matched to calls by `index`; servers that omit the index are matched by id, and a piece
/// with neither continues the last call.
///
/// ```
/// use noetic::model::StreamDelta;
/// use noetic_openai::wire::StreamAccumulator;
///
/// let mut acc = StreamAccumulator::new();
/// let mut deltas = Vec::new();
/// for data in [
///     r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
///     r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
///     "[DONE]",
/// ] {
///     deltas.extend(acc.push(data)?);
/// }
/// assert_eq!(deltas[0], StreamDelta::Text { text: "Hel".into() });
/// let Some(StreamDelta::Done { response }) = deltas.last() else { unreachable!() };
/// assert_eq!(response.text_output(), "Hello");
/// # Ok::<(), noetic::NoeticError>(())
/// ```
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    text: String,
    refusal: String,
    calls: Vec<PartialCall>,
    /// The position of the latest call at each wire `index`, and of the latest call with each id: a piece finds
    /// its call at once, however many calls came before (a search over the calls made a stream quadratic in them).
    by_index: HashMap<u64, usize>,
    by_id: HashMap<String, usize>,
    usage: Usage,
    finish: Option<String>,
    /// The model named by the chunks.
    model: Option<std::sync::Arc<str>>,
    done: bool,
}

impl StreamAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        StreamAccumulator::default()
    }

    /// True once [`StreamDelta::Done`] was produced; later payloads are ignored.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds one SSE `data:` payload (a JSON chunk or `[DONE]`) and returns the deltas it produced.
    ///
    /// # Errors
    ///
    /// [`NoeticError::ModelFailed`] carrying the payload when it is a provider error object
    /// (`{"error": {...}}`) or not JSON. Not retryable: part of the answer may have been delivered.
    pub fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        let data = data.trim();
        if self.done || data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            return Ok(vec![self.done_delta()]);
        }
        match Answer::read(data) {
            Some(chunk) => Ok(self.push_typed(chunk)),
            None => self.push_value(data),
        }
    }

    /// [`push`](StreamAccumulator::push) of a chunk the typed view took.
    fn push_typed(&mut self, mut chunk: Answer<'_>) -> Vec<StreamDelta> {
        if let Some(usage) = &chunk.usage {
            self.usage = usage.usage();
        }
        if self.model.is_none() {
            self.model = chunk.model.take().filter(|m| !m.is_empty()).map(|m| ModelResponse::shared_model_name(&m));
        }
        let mut deltas = Vec::new();
        if let Some(choice) = chunk.choice() {
            if let Some(delta) = choice.delta {
                let text = delta.content.map(|c| c.0).unwrap_or_default();
                if !text.is_empty() {
                    self.text.push_str(&text);
                    deltas.push(StreamDelta::Text { text });
                }
                if let Some(refusal) = delta.refusal {
                    self.refusal.push_str(&refusal);
                }
                for piece in delta.tool_calls.unwrap_or_default() {
                    let (name, arguments) = piece.function.map_or((None, None), |f| (f.name, f.arguments));
                    let id = piece.id.as_deref().filter(|s| !s.is_empty());
                    let name = name.as_deref().filter(|s| !s.is_empty());
                    let arguments = arguments.map(Cow::into_owned).unwrap_or_default();
                    deltas.extend(self.tool_piece(piece.index, id, name, arguments));
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason.into_owned());
            }
        }
        deltas
    }

    /// [`push`](StreamAccumulator::push) by walking a `Value`: any JSON, error objects included.
    pub(super) fn push_value(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        let chunk: Value = serde_json::from_str(data).map_err(|e| NoeticError::ModelFailed {
            message: format!(
                "a streamed chunk is not valid JSON ({e}); the chunk is attached as raw — check that the server \
                 speaks OpenAI-compatible streaming"
            ),
            status: None,
            raw: Some(data.to_owned()),
            retryable: false,
            source: None,
        })?;
        if let Some(error) = ProviderError::find(&chunk) {
            let mut error = error.into_error(None, data);
            if let NoeticError::ModelFailed { message, retryable, .. } = &mut error {
                // Some of the answer may already be out; a retry would repeat it.
                *retryable = false;
                message.push_str(" (the error arrived inside the stream; it was not retried)");
            }
            return Err(error);
        }
        if chunk["usage"].is_object() {
            self.usage = usage(&chunk["usage"]);
        }
        if self.model.is_none()
            && let Some(model) = chunk["model"].as_str().filter(|m| !m.is_empty())
        {
            self.model = Some(ModelResponse::shared_model_name(model));
        }
        let mut deltas = Vec::new();
        let first = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first());
        if let Some(choice) = first {
            let delta = &choice["delta"];
            let text = content_text(&delta["content"]);
            if !text.is_empty() {
                self.text.push_str(&text);
                deltas.push(StreamDelta::Text { text });
            }
            if let Some(refusal) = delta["refusal"].as_str() {
                self.refusal.push_str(refusal);
            }
            if let Some(pieces) = delta.get("tool_calls").and_then(Value::as_array) {
                for piece in pieces {
                    let id = piece["id"].as_str().filter(|s| !s.is_empty());
                    let name = piece["function"]["name"].as_str().filter(|s| !s.is_empty());
                    let arguments = arguments_text(&piece["function"]["arguments"]);
                    deltas.extend(self.tool_piece(piece["index"].as_u64(), id, name, arguments));
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish = Some(reason.to_owned());
            }
        }
        Ok(deltas)
    }

    /// Ends the stream: yields `Done` if it was not produced yet and the response is complete.
    ///
    /// # Errors
    ///
    /// [`NoeticError::ModelFailed`] when the stream ended without `[DONE]` and without a finish reason (the
    /// connection was cut short).
    pub fn finish(&mut self) -> Result<Option<StreamDelta>, NoeticError> {
        if self.done {
            return Ok(None);
        }
        if self.finish.is_some() {
            return Ok(Some(self.done_delta()));
        }
        Err(NoeticError::ModelFailed {
            message: "the response stream ended before the model finished (no finish reason and no [DONE]); the \
                      partial answer was discarded and not retried — call again"
                .to_owned(),
            status: None,
            raw: None,
            retryable: false,
            source: None,
        })
    }

    /// The response assembled so far.
    pub fn response(&self) -> ModelResponse {
        let mut items = Vec::new();
        if !self.text.is_empty() {
            items.push(Item::assistant(self.text.clone()));
        }
        for (index, call) in self.calls.iter().enumerate() {
            items.push(Item::ToolCall(tool_call(index, &call.id, &call.name, &call.arguments)));
        }
        ModelResponse {
            items,
            usage: self.usage,
            finish_reason: finish_reason(self.finish.as_deref(), !self.calls.is_empty()),
            refusal: Some(self.refusal.clone()).filter(|r| !r.is_empty()),
            model: self.model.clone(),
        }
    }

    fn done_delta(&mut self) -> StreamDelta {
        self.done = true;
        StreamDelta::Done { response: self.response() }
    }

    /// Adds one tool-call piece (its wire index, its id and name when not empty, its argument text); returns the
    /// delta when it carried anything new.
    fn tool_piece(
        &mut self,
        wire_index: Option<u64>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: String,
    ) -> Option<StreamDelta> {
        let existing = match (wire_index, id) {
            (Some(i), _) => self.by_index.get(&i).copied(),
            (None, Some(id)) => self.by_id.get(id).copied(),
            (None, None) => self.calls.len().checked_sub(1),
        };
        // A new id at a known index is a new call (some servers send every call with index 0).
        let existing = existing.filter(|&pos| match (id, self.calls.get(pos)) {
            (Some(id), Some(call)) => call.id.is_empty() || call.id == id,
            _ => true,
        });
        let index = match existing {
            Some(pos) => pos,
            None => {
                let position = self.calls.len();
                self.calls.push(PartialCall::default());
                if let Some(wire_index) = wire_index {
                    self.by_index.insert(wire_index, position);
                }
                position
            }
        };
        let call = self.calls.get_mut(index)?;
        let new_id = id.filter(|_| call.id.is_empty()).map(|id| {
            call.id = id.to_owned();
            // An id may reach an older call after a newer one took it: the newest keeps it.
            let latest = self.by_id.entry(call.id.clone()).or_insert(index);
            *latest = (*latest).max(index);
            call.id.clone()
        });
        // Names come whole on the first piece; some servers repeat them on later pieces.
        let new_name = name.filter(|_| call.name.is_empty()).map(|name| {
            call.name = name.to_owned();
            call.name.clone()
        });
        call.arguments.push_str(&arguments);
        if new_id.is_none() && new_name.is_none() && arguments.is_empty() {
            return None;
        }
        Some(StreamDelta::ToolCall { index, id: new_id, name: new_name, arguments })
    }
}

/// The deltas a streaming call would have produced for `response` (text, then tool calls, then `Done`); used when
/// a server answers a streaming request with a plain JSON response.
pub use noetic_core::model::replay;

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)]
mod tests;
