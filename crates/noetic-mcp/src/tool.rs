//! One MCP server tool as a noetic [`Tool`]: its call goes to the server, its result becomes a rich tool output.

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use noetic_core::model::ContentBlock;
use noetic_steps::tool::{Schema, Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest, ErrorCode, Request, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::Value;

use crate::config::tool_name;
use crate::result::limit;
use crate::shared::Shared;
use crate::stdio::{MESSAGE_TOO_LARGE, too_large_data};

/// A tool of an MCP server. Its name is `server__tool`; the arguments the runtime validated against its input
/// schema are sent as they are.
pub struct McpTool {
    name: String,
    remote: String,
    description: String,
    input: Schema,
    output: Option<Schema>,
    idempotent: bool,
    read_only: bool,
    needs_approval: bool,
    server: Weak<Shared>,
    server_name: String,
}

impl McpTool {
    /// The tool named in `listed` (an MCP `Tool` as JSON), or why it cannot be offered.
    pub(crate) fn from_listed(server: &Arc<Shared>, listed: &Value) -> Result<McpTool, String> {
        let remote = listed["name"].as_str().ok_or("a listed tool has no name")?.to_owned();
        let input = Schema::new(listed.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({})))
            .map_err(|e| format!("tool '{remote}' has an input schema that does not compile: {}", e.message))?;
        let output =
            match listed.get("outputSchema") {
                Some(schema) if !schema.is_null() => Some(Schema::new(schema.clone()).map_err(|e| {
                    format!("tool '{remote}' has an output schema that does not compile: {}", e.message)
                })?),
                _ => None,
            };
        let description = listed["description"].as_str().or(listed["title"].as_str()).unwrap_or_default().to_owned();
        let needs_approval = server.config.needs_approval(&remote);
        Ok(McpTool {
            name: tool_name(&server.config.name, &remote),
            remote,
            description,
            input,
            output,
            idempotent: listed["annotations"]["idempotentHint"].as_bool().unwrap_or(false),
            read_only: listed["annotations"]["readOnlyHint"].as_bool().unwrap_or(false),
            needs_approval,
            server: Arc::downgrade(server),
            server_name: server.config.name.clone(),
        })
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Schema {
        &self.input
    }

    fn output_schema(&self) -> Option<&Schema> {
        self.output.as_ref()
    }

    /// The server's `idempotentHint` annotation.
    fn idempotent(&self) -> bool {
        self.idempotent
    }

    /// The server's `readOnlyHint` annotation: a tool that changes nothing may run together with others.
    fn concurrent(&self) -> bool {
        self.read_only
    }

    /// Set by [`McpServerConfig::require_approval`](crate::McpServerConfig::require_approval).
    fn needs_approval(&self) -> bool {
        self.needs_approval
    }

    fn call(&self, args: Value, tcx: ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let server = self.server.upgrade();
        let (remote, server_name) = (self.remote.clone(), self.server_name.clone());
        let typed = self.output.is_some();
        Box::pin(async move {
            let Some(server) = server else {
                return Err(ToolError::of(
                    ToolErrorKind::Upstream,
                    format!("MCP server '{server_name}' was shut down; its tools can no longer be called"),
                ));
            };
            let peer = server.peer().ok_or_else(|| {
                ToolError::of(
                    ToolErrorKind::Upstream,
                    format!(
                        "MCP server '{server_name}' is not connected (it exited and is being restarted); try again \
                         in a moment"
                    ),
                )
            })?;
            let Value::Object(arguments) = args else {
                return Err(ToolError::of(ToolErrorKind::InvalidArguments, "send the arguments as one JSON object"));
            };
            let params = CallToolRequestParams::new(remote.clone()).with_arguments(arguments);
            let (timeout, max) = (server.config.timeout, server.config.max_result_bytes);
            // Dropping the call (at the timeout, or when the turn is cancelled) sends the server
            // `notifications/cancelled`.
            let answer = tokio::time::timeout(timeout, call_tool(&server, peer, params, tcx)).await;
            match answer {
                Err(_) => Err(ToolError::of(
                    ToolErrorKind::Timeout,
                    format!(
                        "MCP server '{server_name}' did not answer the call of '{remote}' within {} s, so it was \
                         cancelled; try again, perhaps with a smaller request",
                        timeout.as_secs_f64()
                    ),
                )),
                Ok(Err(e)) => Err(service_error(&server_name, &remote, &e)),
                Ok(Ok(result)) => output(result, &Limit { max, server: &server_name, typed }),
            }
        })
    }
}

/// Sends `tools/call` and waits for the answer, forwarding the server's progress notifications to the call's
/// context. If the future is dropped first, the server is sent `notifications/cancelled`.
async fn call_tool(
    server: &Shared,
    peer: Peer<RoleClient>,
    params: CallToolRequestParams,
    tcx: ToolContext,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = peer.send_request_with_option(request, PeerRequestOptions::no_options()).await?;
    let _progress = server.progress.register(&handle.progress_token, tcx);
    let mut cancel = CancelOnDrop { peer: Some(peer), id: handle.id.clone() };
    let answer = handle.await_response().await;
    cancel.peer = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(result),
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Tells the server a call was abandoned, unless disarmed (its peer taken) when the answer came.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the noetic turn was cancelled or the call timed out".to_owned()),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(params).await;
            });
        }
    }
}

/// A failed request as a tool error of the right kind, naming the server.
fn service_error(server: &str, tool: &str, error: &ServiceError) -> ToolError {
    if let ServiceError::McpError(e) = error
        && e.code == ErrorCode(MESSAGE_TOO_LARGE)
        && too_large_data(e.data.as_ref()).is_some()
    {
        let message =
            format!("MCP server '{server}' could not deliver its answer to the call of '{tool}': {}", e.message);
        return ToolError::of(ToolErrorKind::Upstream, message);
    }
    let kind = match error {
        ServiceError::McpError(e) if e.code == ErrorCode::INVALID_PARAMS => ToolErrorKind::InvalidArguments,
        ServiceError::McpError(e) if e.code == ErrorCode::METHOD_NOT_FOUND => ToolErrorKind::NotFound,
        ServiceError::Cancelled { .. } => ToolErrorKind::Cancelled,
        ServiceError::Timeout { .. } => ToolErrorKind::Timeout,
        _ => ToolErrorKind::Upstream,
    };
    let message = match error {
        ServiceError::McpError(e) => format!("MCP server '{server}' refused the call of '{tool}': {}", e.message),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            format!("MCP server '{server}' disconnected during the call of '{tool}'; it is being restarted, try again")
        }
        other => format!("MCP server '{server}' failed the call of '{tool}': {other}"),
    };
    ToolError::of(kind, message)
}

/// How much of a result the model may read.
struct Limit<'a> {
    /// Bytes (the server's `max_result_bytes`).
    max: usize,
    /// The server's name, for the note.
    server: &'a str,
    /// The tool declares an output schema, so its structured data cannot be left out.
    typed: bool,
}

/// A call's result as a tool output, kept to `limit.max` bytes with a note saying what was cut; `isError` makes
/// it a tool error with the result's text.
fn output(result: CallToolResult, limit_to: &Limit<'_>) -> Result<ToolOutput, ToolError> {
    let blocks: Vec<ContentBlock> = result.content.iter().map(|b| content_block(&serde_json::to_value(b))).collect();
    let had_structured = result.structured_content.is_some();
    let (mut output, cut) = limit(ToolOutput { blocks, structured: result.structured_content }, limit_to.max);
    if limit_to.typed && had_structured && output.structured.is_none() && result.is_error != Some(true) {
        return Err(ToolError::of(
            ToolErrorKind::Failed,
            format!(
                "MCP server '{}' returned structured data larger than its max_result_bytes ({} bytes); it cannot \
                 be cut and still match the tool's output schema, so the call failed: ask the tool for less, or \
                 raise max_result_bytes for the server",
                limit_to.server, limit_to.max
            ),
        ));
    }
    if let Some(cut) = cut {
        output.blocks.push(ContentBlock::text(format!(
            "[… truncated: the result has {} bytes; showing the first {} (max_result_bytes of MCP server '{}' is \
             {}); ask the tool for less]",
            cut.total, cut.kept, limit_to.server, limit_to.max
        )));
    }
    if result.is_error == Some(true) {
        let text = output.to_text();
        let text =
            if text.trim().is_empty() { "the tool reported an error without a message".to_owned() } else { text };
        return Err(ToolError::of(ToolErrorKind::Failed, text));
    }
    Ok(output)
}

/// An MCP content block (as JSON) as a noetic one: text, image, embedded resource and resource link map to their
/// kind; audio becomes a line naming it; anything newer is kept as JSON.
pub(crate) fn content_block(block: &Result<Value, serde_json::Error>) -> ContentBlock {
    let Ok(block) = block else {
        return ContentBlock::text("[a content block that could not be read]");
    };
    let str_of = |v: &Value, key: &str| v[key].as_str().map(str::to_owned);
    match block["type"].as_str() {
        Some("text") => ContentBlock::text(str_of(block, "text").unwrap_or_default()),
        Some("image") => ContentBlock::image_base64(
            str_of(block, "mimeType").unwrap_or_else(|| "image/png".to_owned()),
            str_of(block, "data").unwrap_or_default(),
        ),
        Some("audio") => ContentBlock::text(format!(
            "[audio {}, {} base64 characters]",
            str_of(block, "mimeType").unwrap_or_default(),
            block["data"].as_str().map_or(0, str::len)
        )),
        Some("resource") => {
            let resource = &block["resource"];
            ContentBlock::resource(
                str_of(resource, "uri").unwrap_or_default(),
                str_of(resource, "mimeType"),
                str_of(resource, "text"),
            )
        }
        Some("resource_link") => {
            ContentBlock::resource(str_of(block, "uri").unwrap_or_default(), str_of(block, "mimeType"), None)
        }
        _ => ContentBlock::json(block.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    #[test]
    fn mcp_content_blocks_become_noetic_blocks_of_the_same_kind() {
        let cases = [
            (json!({"type": "text", "text": "hi"}), ContentBlock::text("hi")),
            (
                json!({"type": "image", "data": "AAAA", "mimeType": "image/gif"}),
                ContentBlock::image_base64("image/gif", "AAAA"),
            ),
            (
                json!({"type": "resource", "resource": {"uri": "file:///a", "mimeType": "text/plain", "text": "x"}}),
                ContentBlock::resource("file:///a", Some("text/plain".into()), Some("x".into())),
            ),
            (
                json!({"type": "resource_link", "uri": "file:///b", "name": "b"}),
                ContentBlock::resource("file:///b", None, None),
            ),
            (
                json!({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}),
                ContentBlock::text("[audio audio/wav, 4 base64 characters]"),
            ),
            (json!({"type": "hologram", "x": 1}), ContentBlock::json(json!({"type": "hologram", "x": 1}))),
        ];
        for (mcp, expected) in cases {
            assert_eq!(content_block(&Ok(mcp)), expected);
        }
    }

    #[test]
    fn an_error_result_becomes_a_tool_error_with_its_text_and_a_success_keeps_structured_content() {
        let failed: CallToolResult =
            serde_json::from_value(json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}))
                .unwrap();
        let err = output(failed, &Limit { max: 1000, server: "s", typed: false }).unwrap_err();
        assert_eq!((err.kind, err.message.as_str()), (ToolErrorKind::Failed, "no such file"));
        let ok: CallToolResult = serde_json::from_value(
            json!({"content": [{"type": "text", "text": "{\"n\":2}"}], "structuredContent": {"n": 2}}),
        )
        .unwrap();
        let out = output(ok, &Limit { max: 1000, server: "s", typed: true }).unwrap();
        assert_eq!(out.structured, Some(json!({"n": 2})));
        assert_eq!(out.to_text(), "{\"n\":2}");
    }
}
