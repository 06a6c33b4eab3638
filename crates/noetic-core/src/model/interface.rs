//! The provider-neutral model interface: requests, responses, streaming deltas and the [`Model`] trait.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{History, Item, ToolCall, Usage};
use super::{ModelParams, ToolChoice};
use crate::error::NoeticError;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments, shared with the tool's schema (a spec is made for every tool set a model is
    /// offered, and copied per thread: the schema is not).
    pub parameters: Arc<Value>,
}

/// One model call.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRequest {
    /// The model id, e.g. `openai/gpt-4o-mini`.
    pub model: Arc<str>,
    /// System instructions.
    pub instructions: Option<Arc<str>>,
    /// Context recalled by memory layers, placed after the instructions and before the history.
    pub context: Vec<Item>,
    /// The conversation.
    pub history: History,
    /// Messages placed after the history (e.g. a correction asked for by a steering rule).
    pub tail: Vec<Item>,
    /// Tools the model may call (empty = none).
    pub tools: Arc<[ToolSpec]>,
    /// Sampling parameters.
    pub params: ModelParams,
    /// Whether and which tool the model must call.
    pub tool_choice: Option<ToolChoice>,
    /// A JSON Schema the answer must match (structured output).
    pub output_schema: Option<Value>,
    /// A GBNF grammar the answer must follow, for backends that constrain decoding with one (llama.cpp's server).
    /// Providers whose [`Model::capabilities`] do not list `grammar` leave it out of the request.
    pub grammar: Option<String>,
    /// The step making the request (set by the `llm` step; `None` for a request made outside one), so a provider
    /// names it in the errors it raises ([`ModelRequest::step_id`]). Shared, not copied per call; not serialised.
    #[serde(skip)]
    pub step: Option<Arc<str>>,
}

impl Default for ModelRequest {
    fn default() -> Self {
        ModelRequest {
            model: "".into(),
            instructions: None,
            context: Vec::new(),
            history: History::default(),
            tail: Vec::new(),
            tools: Arc::from(Vec::new()),
            params: ModelParams::default(),
            tool_choice: None,
            output_schema: None,
            grammar: None,
            step: None,
        }
    }
}

impl ModelRequest {
    /// All messages in the order the model sees them: context, history, tail (instructions excluded).
    pub fn messages(&self) -> impl Iterator<Item = &Item> {
        self.context.iter().chain(self.history.iter()).chain(self.tail.iter())
    }

    /// The id of the step making the request, empty when none is ([`ModelRequest::step`]): what a provider puts
    /// in the `step_id` of the errors it raises.
    pub fn step_id(&self) -> &str {
        self.step.as_deref().unwrap_or_default()
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end.
    #[default]
    Stop,
    /// It asked for tools.
    ToolCalls,
    /// It hit the token limit.
    Length,
    /// A content filter stopped it.
    ContentFilter,
    /// Something else the provider reported.
    Other(String),
}

/// What a model call returned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// New items: usually an assistant message and/or tool calls.
    pub items: Vec<Item>,
    /// Tokens used, and the cost when the provider reports it.
    pub usage: Usage,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// A refusal message, when the model refused.
    pub refusal: Option<String>,
    /// The model that answered, as the provider names it (it may differ from the one asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Arc<str>>,
}

impl ModelResponse {
    /// An answer made of one assistant message.
    pub fn text(text: impl Into<String>) -> Self {
        ModelResponse { items: vec![Item::assistant(text)], ..Default::default() }
    }

    /// A response asking for tool calls: `(id, name, arguments JSON)` each.
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, &'a str, Value)>) -> Self {
        let items = calls
            .into_iter()
            .map(|(id, name, args)| Item::ToolCall(ToolCall::new(id, name, args.to_string())))
            .collect();
        ModelResponse { items, finish_reason: FinishReason::ToolCalls, ..Default::default() }
    }

    /// `name` as a response's shared model name: the very string an earlier response on this thread was given when
    /// the name is one of the last few (a provider names the same model in every answer), so a parser allocates
    /// no name for it; else a new one, kept in place of the least recently given.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use noetic_core::model::ModelResponse;
    ///
    /// let first = ModelResponse::shared_model_name("gpt-4o-mini-2024-07-18");
    /// assert!(Arc::ptr_eq(&first, &ModelResponse::shared_model_name("gpt-4o-mini-2024-07-18")));
    /// ```
    pub fn shared_model_name(name: &str) -> Arc<str> {
        thread_local! {
            /// The model names given last.
            static MODELS: std::cell::RefCell<crate::sync::Recent> = const { std::cell::RefCell::new(crate::sync::Recent::new()) };
        }
        MODELS.with(|models| super::shared_from(&mut models.borrow_mut(), name))
    }

    /// Adds an assistant message before the items (text said alongside tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.items.insert(0, Item::assistant(text));
        self
    }

    /// Sets the usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The tool calls in the response, in order.
    pub fn tool_calls_iter(&self) -> impl Iterator<Item = &ToolCall> {
        self.items.iter().filter_map(|i| match i {
            Item::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// The text of the last assistant message (empty when there is none).
    pub fn text_output(&self) -> &str {
        self.items
            .iter()
            .rev()
            .find_map(|i| match i {
                Item::Message { role: super::Role::Assistant, content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }
}

/// A piece of a streamed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamDelta {
    /// More answer text.
    Text {
        /// The new text.
        text: String,
    },
    /// A piece of a tool call (the id and name come with the first piece of each call).
    ToolCall {
        /// Position of the call in the response.
        index: usize,
        /// The call id, on the first piece.
        id: Option<String>,
        /// The tool name, on the first piece.
        name: Option<String>,
        /// More argument JSON text.
        arguments: String,
    },
    /// The complete response, always last.
    Done {
        /// The assembled response.
        response: ModelResponse,
    },
}

/// What a backend can enforce on its output, beyond sampling. Callers that want a constrained answer (the steering
/// judge) look here to choose between [`ModelRequest::grammar`] and [`ModelRequest::output_schema`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The backend honours [`ModelRequest::grammar`] (a GBNF grammar).
    pub grammar: bool,
    /// The backend constrains decoding to [`ModelRequest::output_schema`] (not only asks for it).
    pub json_schema: bool,
}

/// A language model. Implementations translate [`ModelRequest`]s to a provider's wire format.
///
/// Cancellation is by dropping: the runtime drops the returned future when the step is cancelled, which must abort
/// any request in flight.
pub trait Model: Send + Sync + 'static {
    /// Calls the model and returns the whole response.
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>>;

    /// What the backend can enforce on its output. The default promises nothing.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// The provider's name as the OpenTelemetry GenAI conventions spell it (`openai`, `anthropic` …), for traces;
    /// `None` (the default) when unknown, and then traces leave it out.
    fn provider_name(&self) -> Option<&str> {
        None
    }

    /// The context window of `model` (an id this backend serves): the backend's configuration, or what its server
    /// reports, or the table of well-known models ([`known_window`](super::known_window), the default). `None`:
    /// the window is not known, and requests are sent as they are (nothing is counted or compacted).
    fn context_window(&self, model: &str) -> Option<super::ContextWindow> {
        super::known_window(model)
    }

    /// How tokens are counted for `model`: the provider's tokenizer where the backend has one; `None` (the default)
    /// for [`Estimate`](super::Estimate), calibrated by the usage responses report.
    fn token_counter(&self, _model: &str) -> Option<Arc<dyn super::TokenCounter>> {
        None
    }

    /// True when [`Model::stream`] really streams (text arrives while the model writes) rather than replaying a
    /// whole response. An `llm` step with no explicit streaming setting streams exactly when this is true.
    fn streams_natively(&self) -> bool {
        false
    }

    /// Calls the model and streams the response. The default calls [`Model::call`] and replays the result as
    /// deltas; streaming providers override it.
    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let call = self.call(request);
        futures::stream::once(call)
            .flat_map(|result| {
                let deltas: Vec<Result<StreamDelta, NoeticError>> = match result {
                    Err(e) => vec![Err(e)],
                    Ok(response) => replay(response).into_iter().map(Ok).collect(),
                };
                futures::stream::iter(deltas)
            })
            .boxed()
    }
}

/// The deltas that would have produced `response`, ending with [`StreamDelta::Done`]: text, then each tool call
/// whole. Providers use it when a server answers a streaming request with a plain response.
pub fn replay(response: ModelResponse) -> Vec<StreamDelta> {
    let mut deltas = Vec::new();
    let mut index = 0;
    for item in &response.items {
        match item {
            Item::Message { role: super::Role::Assistant, content } => {
                deltas.push(StreamDelta::Text { text: content.clone() });
            }
            Item::ToolCall(c) => {
                deltas.push(StreamDelta::ToolCall {
                    index,
                    id: Some(c.id.to_string()),
                    name: Some(c.name.to_string()),
                    arguments: c.arguments.to_string(),
                });
                index += 1;
            }
            _ => {}
        }
    }
    deltas.push(StreamDelta::Done { response });
    deltas
}
