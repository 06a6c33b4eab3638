//! [`ModelRequest`] → chat-completions request body.

use noetic_core::model::ToolChoice;
use noetic_core::model::{Item, ModelRequest, Role};
use serde_json::{Map, Value, json};

use super::message::Message;

/// The JSON body of `POST /chat/completions` for `request`.
///
/// * `messages`: one leading `system` message holding the instructions and every `System`-role item (joined by a
///   blank line), then the context, history and tail items in order. `Developer` items become `system` messages
///   in place: chat completions has no `developer` role on most compatible servers (OpenAI accepts `system`
///   for it too). Assistant text followed by tool calls — or tool calls alone — become one assistant message
///   with `tool_calls` (content `null` when there is no text). Tool results become `tool` messages carrying
///   their `tool_call_id`; the error flag has no wire form (the content already says what went wrong).
/// * `tools` and `stop` only when non-empty; `tool_choice`, `temperature`, `top_p`, `max_tokens` only when set.
/// * `response_format` (`json_schema`, named `output`, not strict) when an output schema is set.
/// * `grammar` (llama.cpp's extension) when a grammar is set. [`OpenAiModel`](crate::OpenAiModel) removes it again
///   unless its config claims the `grammar` capability.
/// * `stream: true` and `stream_options.include_usage` when `stream` is true.
///
/// The model id is sent as given.
///
/// ```
/// use noetic::model::{Item, ModelRequest, History};
/// use serde_json::json;
///
/// let request = ModelRequest {
///     model: "openai/gpt-4o-mini".into(),
///     instructions: Some("Be brief.".into()),
///     history: History::new(vec![Item::user("hi")]),
///     ..ModelRequest::default()
/// };
/// assert_eq!(
///     noetic_openai::wire::request_body(&request, false),
///     json!({
///         "model": "openai/gpt-4o-mini",
///         "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
///     })
/// );
/// ```
pub fn request_body(request: &ModelRequest, stream: bool) -> Value {
    let mut body = fields(request, stream);
    body.insert("model".into(), Value::String(request.model.to_string()));
    body.insert("messages".into(), Value::Array(messages(request)));
    Value::Object(body)
}

/// Every field of the body but `model` and `messages`.
fn fields(request: &ModelRequest, stream: bool) -> Map<String, Value> {
    let mut body = Map::new();
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters}
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    let params = &request.params;
    if let Some(t) = params.temperature.and_then(float) {
        body.insert("temperature".into(), t);
    }
    if let Some(p) = params.top_p.and_then(float) {
        body.insert("top_p".into(), p);
    }
    if let Some(max) = params.max_tokens {
        body.insert("max_tokens".into(), Value::from(max));
    }
    if !params.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(params.stop_sequences));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": false}}),
        );
    }
    if let Some(grammar) = &request.grammar {
        body.insert("grammar".into(), Value::String(grammar.clone()));
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    body
}

/// An `f32` as the decimal a user wrote (`0.2`, not `0.20000000298023224`); `None` for NaN and infinities.
pub(super) fn float(x: f32) -> Option<Value> {
    let shortest: f64 = x.to_string().parse().ok()?;
    serde_json::Number::from_f64(shortest).map(Value::Number)
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// The leading `system` message: the instructions and every `System`-role item, joined by a blank line.
fn system_message(request: &ModelRequest) -> Option<Value> {
    let system: Vec<&str> = request
        .instructions
        .as_deref()
        .into_iter()
        .chain(request.messages().filter_map(|item| match item {
            Item::Message { role: Role::System, content } => Some(content.as_str()),
            _ => None,
        }))
        .filter(|text| !text.is_empty())
        .collect();
    (!system.is_empty()).then(|| json!({"role": "system", "content": system.join("\n\n")}))
}

fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out: Vec<Value> = system_message(request).into_iter().collect();
    for segment in [&request.context[..], request.history.as_slice(), &request.tail[..]] {
        walk(segment, |message, _| out.push(message.to_value(false)));
    }
    out
}

/// True when a message ends right after `item`, whatever follows: `walk` over the items before and after such a
/// point gives the same messages as over all of them (assistant text and tool calls may still merge with what
/// follows; `System` items, which live in the leading message, do not end the one before them).
pub(super) fn closes_message(item: &Item) -> bool {
    match item {
        Item::ToolResult(_) => true,
        Item::Message { role, .. } => !matches!(role, Role::System | Role::Assistant),
        Item::ToolCall(_) => false,
    }
}

/// The chat-completions messages of one segment of items (context, history or tail — an assistant message never
/// spans two), each with the number of the segment's items consumed when it ends.
pub(super) fn walk<'a>(items: &'a [Item], mut emit: impl FnMut(Message<'a>, usize)) {
    // The assistant message being assembled: its text, and where its tool calls start (it holds the tool calls,
    // and the `System` items skipped between them, up to where it ends).
    let mut pending: Option<(Option<&'a str>, usize)> = None;
    let assistant =
        |(text, from): (Option<&'a str>, usize), to: usize| Message::Assistant { text, calls: &items[from..to] };
    for (index, item) in items.iter().enumerate() {
        match item {
            Item::Message { role: Role::System, .. } => {}
            Item::Message { role: Role::Assistant, content } => {
                // Text after tool calls, or a second text, starts a new assistant message.
                if let Some(turn) = pending.take() {
                    emit(assistant(turn, index), index);
                }
                pending = Some((Some(content), index + 1));
            }
            Item::ToolCall(_) => {
                pending.get_or_insert((None, index));
            }
            Item::Message { role, content } => {
                if let Some(turn) = pending.take() {
                    emit(assistant(turn, index), index);
                }
                let role = match role {
                    Role::User => "user",
                    _ => "system",
                };
                emit(Message::Text { role, content }, index + 1);
            }
            Item::ToolResult(result) => {
                if let Some(turn) = pending.take() {
                    emit(assistant(turn, index), index);
                }
                emit(Message::Tool { call_id: &result.call_id, content: &result.content }, index + 1);
            }
        }
    }
    if let Some(turn) = pending.take() {
        emit(assistant(turn, items.len()), items.len());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use noetic_core::model::ModelParams;
    use noetic_core::model::{ContentBlock, History, ToolCall, ToolResult, ToolSpec};

    use super::*;

    #[test]
    fn a_tool_result_with_an_image_is_sent_as_its_text_since_tool_messages_take_only_text() {
        let result = ToolResult {
            blocks: vec![ContentBlock::text("The plot:"), ContentBlock::image_url("image/png", "https://x.test/p.png")],
            ..ToolResult::ok("c1", "The plot:\n[image image/png: https://x.test/p.png]")
        };
        let request = ModelRequest {
            model: "m".into(),
            history: History::new(vec![call("c1", "plot", "{}"), Item::ToolResult(result)]),
            ..ModelRequest::default()
        };
        let body = request_body(&request, false);
        assert_eq!(
            body["messages"][1],
            json!({"role": "tool", "tool_call_id": "c1", "content": "The plot:\n[image image/png: https://x.test/p.png]"})
        );
    }

    fn call(id: &str, name: &str, args: &str) -> Item {
        Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
    }

    #[test]
    fn text_and_tool_calls_of_one_turn_become_one_assistant_message() {
        let request = ModelRequest {
            model: "m".into(),
            history: History::new(vec![
                Item::user("weather?"),
                Item::assistant("Let me check."),
                call("c1", "weather", r#"{"city":"Paris"}"#),
                call("c2", "weather", r#"{"city":"Rome"}"#),
                Item::ToolResult(ToolResult::ok("c1", "sunny")),
                Item::ToolResult(ToolResult::error("c2", "boom")),
                call("c3", "clock", "{}"),
                Item::ToolResult(ToolResult::ok("c3", "noon")),
                Item::assistant("Sunny in Paris at noon."),
            ]),
            ..ModelRequest::default()
        };
        let body = request_body(&request, false);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "Let me check.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "c2", "content": "boom"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c3", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c3", "content": "noon"},
                {"role": "assistant", "content": "Sunny in Paris at noon."}
            ])
        );
    }

    #[test]
    fn system_items_join_the_instructions_and_developer_items_stay_in_place_as_system() {
        let request = ModelRequest {
            model: "m".into(),
            instructions: Some("Be brief.".into()),
            context: vec![Item::developer("<steering_feedback>x</steering_feedback>")],
            history: History::new(vec![Item::system("Answer in French."), Item::user("hi")]),
            tail: vec![Item::developer("Shorter, please.")],
            ..ModelRequest::default()
        };
        assert_eq!(
            request_body(&request, false)["messages"],
            json!([
                {"role": "system", "content": "Be brief.\n\nAnswer in French."},
                {"role": "system", "content": "<steering_feedback>x</steering_feedback>"},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Shorter, please."}
            ])
        );
    }

    #[test]
    fn absent_options_are_omitted_and_floats_keep_their_decimal_form() {
        let request = ModelRequest {
            model: "m".into(),
            params: ModelParams { temperature: Some(0.2), top_p: Some(f32::NAN), ..ModelParams::default() },
            tools: Arc::from(Vec::<ToolSpec>::new()),
            ..ModelRequest::default()
        };
        assert_eq!(request_body(&request, false), json!({"model": "m", "messages": [], "temperature": 0.2}));
    }

    #[test]
    fn streaming_asks_for_usage_and_tool_choice_names_a_function() {
        let request = ModelRequest {
            model: "m".into(),
            tool_choice: Some(ToolChoice::Named("weather".into())),
            ..ModelRequest::default()
        };
        let body = request_body(&request, true);
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "weather"}}));
        for (choice, wire) in
            [(ToolChoice::Auto, "auto"), (ToolChoice::Required, "required"), (ToolChoice::None, "none")]
        {
            let r = ModelRequest { tool_choice: Some(choice), ..ModelRequest::default() };
            assert_eq!(request_body(&r, false)["tool_choice"], json!(wire));
        }
    }

    #[test]
    fn a_past_call_with_malformed_arguments_is_sent_back_as_valid_json_that_keeps_what_the_model_wrote() {
        let broken =
            Item::ToolCall(ToolCall { id: "c1".into(), name: "list_dir".into(), arguments: "{\"path\": \"fo".into() });
        let fine =
            Item::ToolCall(ToolCall { id: "c2".into(), name: "list_dir".into(), arguments: "{\"path\":\".\"}".into() });
        let request = ModelRequest {
            model: "m".into(),
            history: History::new(vec![Item::user("hi"), broken, fine]),
            ..ModelRequest::default()
        };
        let body = request_body(&request, false);
        let calls = &body["messages"][1]["tool_calls"];
        let sent = calls[0]["function"]["arguments"].as_str().unwrap_or_default();
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(sent);
        assert_eq!(parsed.ok(), Some(json!({"_raw": "{\"path\": \"fo"})));
        assert_eq!(calls[1]["function"]["arguments"], "{\"path\":\".\"}", "valid arguments go back untouched");
    }
}
