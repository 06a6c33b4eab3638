//! Streaming translation, event by event: the JSON of each server-sent event of a streamed Messages response →
//! [`StreamDelta`]s, and the assembled [`ModelResponse`] at the end. Free of sockets and of SSE framing (see
//! [`crate::stream_deltas`] for that).

use std::collections::HashMap;

use noetic_core::NoeticError;
use noetic_core::model::{ModelResponse, StreamDelta, ToolCall};
use serde_json::Value;

use crate::error::error_from_body;
use crate::response::{Parts, usage};

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        /// Position of the call among the response's tool calls.
        position: usize,
        /// The `input` of `content_block_start`, used when no `input_json_delta` arrives.
        initial_input: String,
    },
    /// A block this crate does not surface (`thinking`, server tools …).
    Ignored,
}

/// Assembles a streamed Messages response from its events.
///
/// Feed each event's JSON to [`StreamAccumulator::push`] in order; it returns the deltas to pass on. After
/// `message_stop`, [`StreamAccumulator::finish`] gives the complete response (the same one
/// [`crate::parse_response`] gives for the equivalent non-streamed body).
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    parts: Parts,
    /// Content blocks in the order they started.
    blocks: Vec<Block>,
    /// The position in `blocks` of the latest block with each `index`: an event finds its block at once, however
    /// many came before (a search made a stream of many blocks quadratic).
    block_at: HashMap<u64, usize>,
    /// Argument text of each tool call, by position.
    arguments: Vec<String>,
    started: bool,
    stopped: bool,
}

impl StreamAccumulator {
    /// A fresh accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once `message_stop` has arrived.
    pub fn is_complete(&self) -> bool {
        self.stopped
    }

    /// Handles one event. `data` is the event's JSON; its `type` field names the event (the SSE `event:` line
    /// is redundant in Anthropic's streams and is ignored).
    ///
    /// # Errors
    ///
    /// An `error` event, or data that is not JSON, becomes a non-retryable [`NoeticError::ModelFailed`] with the
    /// provider's message and the raw event: part of the answer may already have been passed on, so trying again
    /// is the caller's decision, never this crate's.
    pub fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        let event: Value = serde_json::from_str(data).map_err(|e| NoeticError::ModelFailed {
            message: format!(
                "Anthropic sent a stream event that is not JSON ({e}); the raw event is attached — check that the \
                 base URL points at an Anthropic Messages API"
            ),
            status: None,
            raw: Some(data.to_owned()),
            retryable: false,
            source: None,
        })?;
        let mut deltas = Vec::new();
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.started = true;
                self.parts.usage = usage(&event["message"]["usage"]);
                self.parts.model =
                    event["message"]["model"].as_str().filter(|m| !m.is_empty()).map(ModelResponse::shared_model_name);
            }
            "content_block_start" => {
                let index = event["index"].as_u64().unwrap_or(self.blocks.len() as u64);
                let block = &event["content_block"];
                let kind = match block["type"].as_str() {
                    Some("text") => {
                        let text = block["text"].as_str().unwrap_or_default();
                        if !text.is_empty() {
                            self.parts.text.push_str(text);
                            deltas.push(StreamDelta::Text { text: text.to_owned() });
                        }
                        Block::Text
                    }
                    Some("tool_use") => {
                        let position = self.parts.calls.len();
                        let call = ToolCall::new(
                            block["id"].as_str().unwrap_or_default(),
                            block["name"].as_str().unwrap_or_default(),
                            "",
                        );
                        deltas.push(StreamDelta::ToolCall {
                            index: position,
                            id: Some(call.id.to_string()),
                            name: Some(call.name.to_string()),
                            arguments: String::new(),
                        });
                        self.parts.calls.push(call);
                        self.arguments.push(String::new());
                        let initial_input = match &block["input"] {
                            Value::Object(o) if o.is_empty() => String::new(),
                            Value::Null => String::new(),
                            input => input.to_string(),
                        };
                        Block::ToolUse { position, initial_input }
                    }
                    _ => Block::Ignored,
                };
                self.block_at.insert(index, self.blocks.len());
                self.blocks.push(kind);
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match (self.block(&event["index"]), delta["type"].as_str()) {
                    (Some(Block::Text), Some("text_delta")) => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        if !text.is_empty() {
                            self.parts.text.push_str(text);
                            deltas.push(StreamDelta::Text { text: text.to_owned() });
                        }
                    }
                    (Some(Block::ToolUse { position, .. }), Some("input_json_delta")) => {
                        let position = *position;
                        let piece = delta["partial_json"].as_str().unwrap_or_default();
                        if let Some(args) = self.arguments.get_mut(position)
                            && !piece.is_empty()
                        {
                            args.push_str(piece);
                            deltas.push(StreamDelta::ToolCall {
                                index: position,
                                id: None,
                                name: None,
                                arguments: piece.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(Block::ToolUse { position, initial_input }) = self.block(&event["index"]) {
                    let position = *position;
                    let initial = initial_input.clone();
                    self.finish_call(position, initial);
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.parts.stop_reason = Some(reason.to_owned());
                }
                // `output_tokens` here is cumulative; newer API versions may repeat the input counts too.
                let u = &event["usage"];
                if u["output_tokens"].is_u64() {
                    self.parts.usage.output_tokens = u["output_tokens"].as_u64().unwrap_or(0);
                }
                if u["input_tokens"].is_u64() || u["cache_read_input_tokens"].is_u64() {
                    let full = usage(u);
                    self.parts.usage.input_tokens = full.input_tokens;
                    self.parts.usage.cached_tokens = full.cached_tokens;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = error_from_body(None, &event, data).unwrap_or_else(|| NoeticError::other(data));
                return Err(mid_stream(error));
            }
            // `ping` and event types added after this crate was written.
            _ => {}
        }
        Ok(deltas)
    }

    /// The complete response.
    ///
    /// # Errors
    ///
    /// A stream that ended before `message_stop` is incomplete: a non-retryable [`NoeticError::ModelFailed`].
    pub fn finish(mut self) -> Result<ModelResponse, NoeticError> {
        if !self.stopped {
            return Err(NoeticError::ModelFailed {
                message: if self.started {
                    "the Anthropic stream ended before message_stop, so the response is incomplete; try again"
                } else {
                    "the Anthropic stream ended without any event; check that the base URL points at an Anthropic \
                     Messages API"
                }
                .to_owned(),
                status: None,
                raw: None,
                retryable: false,
                source: None,
            });
        }
        // Blocks that never got their content_block_stop still keep what arrived.
        let open: Vec<(usize, String)> = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { position, initial_input } => Some((*position, initial_input.clone())),
                _ => None,
            })
            .collect();
        for (position, initial) in open {
            self.finish_call(position, initial);
        }
        Ok(self.parts.into_response())
    }

    /// The block with the `index` of an event.
    fn block(&self, index: &Value) -> Option<&Block> {
        self.blocks.get(*self.block_at.get(&index.as_u64()?)?)
    }

    /// Sets the arguments of a finished tool call: the streamed JSON, else the start block's input, else `{}`.
    fn finish_call(&mut self, position: usize, initial_input: String) {
        let streamed = self.arguments.get(position).cloned().unwrap_or_default();
        if let Some(call) = self.parts.calls.get_mut(position) {
            call.arguments = if !streamed.is_empty() {
                streamed.into()
            } else if !initial_input.is_empty() {
                initial_input.into()
            } else {
                "{}".into()
            };
        }
    }
}

/// Marks an error met after the stream began as not retryable: output may already have reached the caller.
fn mid_stream(error: NoeticError) -> NoeticError {
    match error {
        NoeticError::ModelFailed { message, status, raw, source, .. } => NoeticError::ModelFailed {
            message: format!("{message} (the error arrived inside the stream, after the response had begun)"),
            status,
            raw,
            retryable: false,
            source,
        },
        NoeticError::ModelRateLimit { .. } => NoeticError::ModelFailed {
            message: "Anthropic reported a rate limit inside the stream, after the response had begun; wait and \
                      try again"
                .to_owned(),
            status: None,
            raw: None,
            retryable: false,
            source: None,
        },
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use noetic_core::model::{FinishReason, Item};
    use serde_json::json;

    use super::*;

    fn feed(events: &[Value]) -> (Vec<StreamDelta>, Result<ModelResponse, NoeticError>) {
        let mut acc = StreamAccumulator::new();
        let mut deltas = Vec::new();
        for e in events {
            match acc.push(&e.to_string()) {
                Ok(d) => deltas.extend(d),
                Err(e) => return (deltas, Err(e)),
            }
        }
        (deltas, acc.finish())
    }

    fn start() -> Value {
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}})
    }

    #[test]
    fn a_tool_call_without_argument_pieces_keeps_its_start_input_or_gets_an_empty_object() {
        let (_, response) = feed(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "a", "name": "now", "input": {}}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "b", "name": "f", "input": {"x": 1}}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ]);
        let response = response.unwrap_or_default();
        let args: Vec<_> = response.tool_calls_iter().map(|c| &*c.arguments).collect();
        assert_eq!(args, vec!["{}", r#"{"x":1}"#]);
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (7, 9));
    }

    #[test]
    fn thinking_blocks_and_unknown_events_are_ignored() {
        let (deltas, response) = feed(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "brand_new_event"}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "hi"}}),
            json!({"type": "message_stop"}),
        ]);
        assert_eq!(deltas, vec![StreamDelta::Text { text: "hi".into() }]);
        assert_eq!(response.map(|r| r.items).ok(), Some(vec![Item::assistant("hi")]));
    }

    #[test]
    fn an_error_event_is_a_non_retryable_error_with_the_provider_message() {
        let (_, response) =
            feed(&[start(), json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]);
        match response {
            Err(NoeticError::ModelFailed { message, retryable: false, raw: Some(_), .. }) => {
                assert!(message.contains("Overloaded"), "{message}");
            }
            other => panic!("expected a non-retryable ModelFailed, got {other:?}"),
        }
    }

    #[test]
    fn a_stream_without_message_stop_is_incomplete() {
        let (_, response) = feed(&[start()]);
        assert!(matches!(response, Err(NoeticError::ModelFailed { retryable: false, .. })));
    }

    #[test]
    fn event_data_that_is_not_json_is_an_error() {
        let mut acc = StreamAccumulator::new();
        assert!(matches!(acc.push("{oops"), Err(NoeticError::ModelFailed { raw: Some(_), .. })));
    }
}
