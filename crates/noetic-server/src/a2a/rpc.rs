//! JSON-RPC 2.0 as A2A's JSON-RPC binding uses it: a request's envelope, and errors with A2A's codes, each with
//! our stable error code in `data.code` and a message that says what to do.

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

/// A JSON-RPC error.
#[derive(Debug)]
pub(crate) struct RpcError {
    /// The JSON-RPC / A2A code (-32001 task not found, -32602 invalid params, …).
    pub(crate) code: i64,
    /// Our stable code (`task_not_found`, `empty_message`, …).
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl RpcError {
    fn new(code: i64, reason: &'static str, message: impl Into<String>) -> Self {
        RpcError { code, reason, message: message.into() }
    }

    pub(crate) fn parse(message: impl Into<String>) -> Self {
        Self::new(-32700, "invalid_json", message)
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, "invalid_request", message)
    }

    pub(crate) fn method_not_found(method: &str) -> Self {
        Self::new(
            -32601,
            "method_not_found",
            format!(
                "this agent has no method '{}': it answers SendMessage, SendStreamingMessage, GetTask, CancelTask \
                 and SubscribeToTask (A2A 1.0)",
                method.escape_debug()
            ),
        )
    }

    pub(crate) fn invalid_params(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(-32602, reason, message)
    }

    pub(crate) fn task_not_found(id: &str) -> Self {
        Self::new(
            -32001,
            "task_not_found",
            format!("there is no task '{}': a task id is SESSION:TURN, as this server gave it", id.escape_debug()),
        )
    }

    pub(crate) fn not_cancelable(id: &str, state: &str) -> Self {
        Self::new(-32002, "task_not_cancelable", format!("task '{id}' is {state}: only a running task can be canceled"))
    }

    pub(crate) fn unsupported(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(-32004, reason, message)
    }

    pub(crate) fn content_type(message: String) -> Self {
        Self::new(-32005, "unsupported_content", message)
    }

    pub(crate) fn internal(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(-32603, reason, message)
    }

    /// A request the server refused before reading it (too large, too slow, not JSON by its type).
    pub(crate) fn refused(e: &crate::error::ApiError) -> Self {
        Self::new(-32600, e.code(), e.message())
    }

    /// From an API error (a session that cannot be had, a full queue).
    pub(crate) fn from_api(e: &crate::error::ApiError) -> Self {
        let code = if e.status().is_client_error() { -32602 } else { -32603 };
        Self::new(code, e.code(), e.message())
    }
}

/// The parts of a request envelope.
pub(crate) struct Request {
    pub(crate) id: Value,
    pub(crate) method: String,
    pub(crate) params: Value,
}

impl Request {
    /// Reads an envelope; an error comes with the id to answer it under (null when unknown).
    pub(crate) fn parse(body: Value) -> Result<Request, (Value, RpcError)> {
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        if !matches!(id, Value::String(_) | Value::Number(_)) {
            return Err((
                Value::Null,
                RpcError::invalid_request("a JSON-RPC request needs an id (a string or a number)"),
            ));
        }
        if body.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err((id, RpcError::invalid_request("a JSON-RPC request has \"jsonrpc\": \"2.0\"")));
        }
        let Some(method) = body.get("method").and_then(Value::as_str) else {
            return Err((id, RpcError::invalid_request("a JSON-RPC request names its method")));
        };
        let params = body.get("params").cloned().unwrap_or_else(|| json!({}));
        Ok(Request { id, method: method.to_owned(), params })
    }
}

/// A JSON-RPC response: a result or an error, under the request's id.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = RpcJson)]
pub(crate) enum Envelope {
    Success(Success),
    Failure(Failure),
}

/// What `/a2a` answers a request that is not JSON by its type (415): the cross-site guard's API error, or — for a
/// request that passed the guard — a JSON-RPC error. (A schema only: the two are built where they are refused.)
#[derive(ToSchema)]
#[serde(untagged)]
#[schema(as = A2aRefused)]
#[allow(dead_code)]
pub(crate) enum Refused {
    Guard(crate::bodies::Error),
    Rpc(Envelope),
}

/// `"2.0"`.
#[derive(Serialize, ToSchema)]
#[schema(as = JsonRpcVersion)]
pub(crate) enum Version {
    #[serde(rename = "2.0")]
    V2,
}

/// A result.
#[derive(Serialize, ToSchema)]
#[schema(as = RpcSuccess)]
#[serde(deny_unknown_fields)]
pub(crate) struct Success {
    jsonrpc: Version,
    #[schema(schema_with = answered_id)]
    id: Value,
    /// The method's result: `{"task": Task}` (SendMessage), a `Task` (GetTask, CancelTask), or in a stream a
    /// `StreamResponse` (`task`, `statusUpdate` or `artifactUpdate`), as A2A 1.0 defines them.
    #[schema(value_type = Object)]
    result: Value,
}

/// An error.
#[derive(Serialize, ToSchema)]
#[schema(as = RpcFailure)]
#[serde(deny_unknown_fields)]
pub(crate) struct Failure {
    jsonrpc: Version,
    #[schema(schema_with = answered_id)]
    id: Value,
    error: ErrorObject,
}

/// A JSON-RPC error object.
#[derive(Serialize, ToSchema)]
#[schema(as = RpcErrorObject)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorObject {
    /// The JSON-RPC / A2A code (-32001 task not found, -32602 invalid params, …).
    code: i64,
    message: String,
    data: ErrorData,
}

/// What the error object carries besides.
#[derive(Serialize, ToSchema)]
#[schema(as = RpcErrorData)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorData {
    /// The API's stable error code (`task_not_found`, `empty_message`, …).
    code: &'static str,
}

/// The id a response carries: the request's, or null when the request had none that could be read.
fn answered_id() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Integer, Type::Null])).build()
}

/// A JSON-RPC request, as [`Request::parse`] reads it (by hand, so that each malformed envelope gets its JSON-RPC
/// error under the request's id, and an unknown method `method_not_found` rather than a parse error).
#[derive(ToSchema)]
#[schema(as = RpcRequest)]
#[allow(dead_code)]
pub(crate) struct RequestSchema {
    jsonrpc: Version,
    #[schema(schema_with = request_id)]
    id: Value,
    method: Method,
    /// The method's parameters (A2A 1.0's `SendMessageRequest`, `GetTaskRequest`, …).
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
}

/// The methods this agent answers.
#[derive(ToSchema)]
#[schema(as = RpcMethod)]
#[allow(dead_code)]
enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    CancelTask,
    SubscribeToTask,
}

/// A request's id: a string or a number.
fn request_id() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Integer])).build()
}

/// A success envelope.
pub(crate) fn result(id: &Value, result: Value) -> Envelope {
    Envelope::Success(Success { jsonrpc: Version::V2, id: id.clone(), result })
}

/// An error envelope.
pub(crate) fn error(id: &Value, e: &RpcError) -> Envelope {
    let error = ErrorObject { code: e.code, message: e.message.clone(), data: ErrorData { code: e.reason } };
    Envelope::Failure(Failure { jsonrpc: Version::V2, id: id.clone(), error })
}
