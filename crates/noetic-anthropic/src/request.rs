//! Request translation: a provider-neutral [`ModelRequest`] → the JSON body of `POST /v1/messages`.
//!
//! Everything here is pure: no I/O, no clock, no environment.

use noetic_core::model::ToolChoice;
use noetic_core::model::{ContentBlock, ImageSource, Item, ModelRequest, Role, ToolResult, ToolSpec};
use serde_json::{Map, Value, json};

/// `max_tokens` sent when the request sets none. Anthropic requires the field on every request; 4096 fits every
/// current Claude model and is long enough for tool-calling turns. Set `params.max_tokens` to change it.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Prefix of a developer message that sits inside the conversation (steering feedback, guidance, inbox
/// messages). Anthropic has only `user` and `assistant` turns after the system prompt, so such messages travel as
/// user text; the prefix tells the model they come from the application, not from the person it talks to.
pub const DEVELOPER_PREFIX: &str = "[Developer message from the application, not from the user]\n";

/// Prefix of a system message that sits inside the conversation (after the first user or assistant item); sent
/// as user text for the same reason as [`DEVELOPER_PREFIX`].
pub const SYSTEM_PREFIX: &str = "[System message from the application, not from the user]\n";

/// The model id Anthropic expects: a leading `anthropic/` (OpenRouter-style ids such as
/// `anthropic/claude-sonnet-4-5`) is removed, so the same step definition works against OpenRouter and Anthropic.
pub fn model_id(model: &str) -> &str {
    model.strip_prefix("anthropic/").unwrap_or(model)
}

/// The JSON body of `POST /v1/messages` for `request`; `stream` adds `"stream": true`.
///
/// Choices the Messages API forces (each documented here because the body is what the model sees):
///
/// * **System prompt.** `system` holds the instructions followed by every system or developer message that comes
///   before the first user, assistant or tool item (memory-layer context, for instance), joined by blank lines.
///   Developer and system messages *inside* the conversation become user text blocks starting with
///   [`DEVELOPER_PREFIX`] / [`SYSTEM_PREFIX`], since Anthropic has no developer role.
/// * **Turns.** Assistant text and the tool calls that follow it form one assistant message (`text` then
///   `tool_use` blocks); tool results become `tool_result` blocks of a user message. Adjacent messages of the same
///   role are merged, because Anthropic requires user and assistant turns to alternate, and in a merged user
///   message the `tool_result` blocks come first, as Anthropic requires. Empty text is left out (Anthropic
///   rejects empty text blocks), and a message left without blocks is dropped.
/// * **Tool-call arguments** are sent as the parsed JSON object. Arguments that are not a JSON object (malformed
///   text the model produced earlier) are sent as `{"_raw": "<the text>"}` so the conversation stays valid and
///   the model can see what it wrote; empty arguments are sent as `{}`.
/// * **`max_tokens`** is required by Anthropic: `params.max_tokens`, else [`DEFAULT_MAX_TOKENS`].
/// * **Floats** (`temperature`, `top_p`) are sent with their shortest decimal form (`0.2`, not
///   `0.20000000298023224`).
/// * **Tools and `tool_choice`** are sent only when the request has tools (Anthropic rejects a `tool_choice`
///   without tools). `Auto` → `{"type":"auto"}`, `Required` → `{"type":"any"}`, `None` → `{"type":"none"}`,
///   `Named(n)` → `{"type":"tool","name":n}`. A tool without a parameter schema gets an empty object schema.
/// * **Structured output.** The Messages API has no JSON-schema response format, so when `output_schema` is set
///   the system prompt ends with an instruction to answer with only JSON matching the schema (the `llm` step still
///   validates the answer).
pub fn request_body(request: &ModelRequest, stream: bool) -> Value {
    let items: Vec<&Item> = request.messages().collect();
    let leading = leading_system(&items);
    let mut body = fields(request, stream);
    body.insert("model".into(), json!(model_id(&request.model)));
    body.insert("max_tokens".into(), json!(request.params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if let Some(system) = system_prompt(request, &items[..leading]) {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(turns(&items[leading..]).into_iter().map(|(m, _)| m).collect()));
    Value::Object(body)
}

/// How many items at the start are system or developer messages (they join the system prompt).
pub(crate) fn leading_system(items: &[&Item]) -> usize {
    items.iter().take_while(|i| matches!(i.role(), Some(Role::System | Role::Developer))).count()
}

/// The system prompt: the instructions, the leading system and developer items, the structured-output sentence.
pub(crate) fn system_prompt(request: &ModelRequest, leading: &[&Item]) -> Option<String> {
    let mut system: Vec<String> = Vec::new();
    if let Some(instructions) = request.instructions.as_deref().filter(|s| !s.is_empty()) {
        system.push(instructions.to_owned());
    }
    system.extend(leading.iter().filter_map(|i| i.text()).filter(|t| !t.is_empty()).map(str::to_owned));
    if let Some(schema) = &request.output_schema {
        system.push(structured_output_instruction(schema));
    }
    (!system.is_empty()).then(|| system.join("\n\n"))
}

/// Every field but `model`, `max_tokens`, `system` and `messages`.
pub(crate) fn fields(request: &ModelRequest, stream: bool) -> Map<String, Value> {
    let mut body = Map::new();
    if let Some(t) = request.params.temperature {
        body.insert("temperature".into(), float(t));
    }
    if let Some(p) = request.params.top_p {
        body.insert("top_p".into(), float(p));
    }
    if !request.params.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(request.params.stop_sequences));
    }
    if !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(request.tools.iter().map(tool).collect()));
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    body
}

/// The sentence appended to the system prompt when the request asks for structured output.
fn structured_output_instruction(schema: &Value) -> String {
    format!(
        "Answer with only a JSON value that matches this JSON Schema, with no other text and no code fences:\n{schema}"
    )
}

/// One Anthropic message under construction.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

/// The conversation as alternating Anthropic messages, each with the index of the first item it holds. A message
/// is final once the next one has started: items added later can only join the last one.
pub(crate) fn turns(items: &[&Item]) -> Vec<(Value, usize)> {
    let mut turns: Vec<(Turn, usize)> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let (role, block) = match item {
            Item::Message { role, content } => {
                let (anthropic_role, text) = match role {
                    Role::User => ("user", content.clone()),
                    Role::Assistant => ("assistant", content.clone()),
                    Role::Developer if !content.is_empty() => ("user", format!("{DEVELOPER_PREFIX}{content}")),
                    Role::System if !content.is_empty() => ("user", format!("{SYSTEM_PREFIX}{content}")),
                    Role::Developer | Role::System => continue,
                };
                if text.is_empty() {
                    continue;
                }
                (anthropic_role, json!({"type": "text", "text": text}))
            }
            Item::ToolCall(call) => (
                "assistant",
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments)}),
            ),
            Item::ToolResult(result) => (
                "user",
                json!({
                    "type": "tool_result",
                    "tool_use_id": result.call_id,
                    "content": tool_result_content(result),
                    "is_error": result.is_error,
                }),
            ),
        };
        match turns.last_mut() {
            Some((last, _)) if last.role == role => last.blocks.push(block),
            _ => turns.push((Turn { role, blocks: vec![block] }, index)),
        }
    }
    turns
        .into_iter()
        .map(|(turn, start)| {
            let mut blocks = turn.blocks;
            // Anthropic wants the tool results of a user turn before any text in it; the sort is stable.
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            (json!({"role": turn.role, "content": blocks}), start)
        })
        .collect()
}

/// The image types Anthropic accepts in an image block.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// The `content` of a `tool_result` block: the text, or — when the result has blocks the text cannot carry —
/// text and image blocks (JSON and resources as their text, an image of a type Anthropic does not take as its
/// placeholder text).
fn tool_result_content(result: &ToolResult) -> Value {
    if !result.has_rich_blocks() {
        return Value::String(result.content.to_string());
    }
    let blocks: Vec<Value> = result
        .blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Image { media_type, source } if IMAGE_TYPES.contains(&media_type.as_str()) => {
                let source = match source {
                    ImageSource::Base64(data) => json!({"type": "base64", "media_type": media_type, "data": data}),
                    ImageSource::Url(url) => json!({"type": "url", "url": url}),
                };
                json!({"type": "image", "source": source})
            }
            other => json!({"type": "text", "text": other.to_text()}),
        })
        .collect();
    Value::Array(blocks)
}

/// The `input` object of a `tool_use` block from the raw argument text.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"_raw": arguments}),
    }
}

/// A tool definition in Anthropic's shape.
fn tool(spec: &ToolSpec) -> Value {
    let schema = match &*spec.parameters {
        Value::Null => json!({"type": "object", "properties": {}}),
        other => other.clone(),
    };
    json!({"name": spec.name, "description": spec.description, "input_schema": schema})
}

/// `tool_choice` in Anthropic's shape.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
    }
}

/// An `f32` as the JSON number a person would write: via its shortest decimal representation.
fn float(x: f32) -> Value {
    x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests;
