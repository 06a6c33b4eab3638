//! A small MCP server over stdio for noetic-mcp's tests: the cases the reference servers cannot produce (a call
//! that hangs until cancelled, a crash, a tool list that changes, progress, images, error results, a result of
//! any size).
//!
//! Environment: `FIXTURE_LOG` — a file each received call (`call <tool>`) and cancellation (`cancelled <tool>`)
//! is appended to; `FIXTURE_FAIL_START` — when set, write it to stderr and exit with status 2 before speaking MCP.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Fixture {
    /// `add_tool` was called: `late` is listed from then on.
    late: Arc<AtomicBool>,
}

fn log(line: &str) {
    if let Ok(path) = std::env::var("FIXTURE_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn tool(json: Value) -> Option<Tool> {
    serde_json::from_value(json).ok()
}

fn result(json: Value) -> Result<CallToolResponse, ErrorData> {
    serde_json::from_value::<CallToolResult>(json)
        .map(Into::into)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

impl Fixture {
    fn tools(&self) -> Vec<Tool> {
        let object = json!({"type": "object"});
        let mut tools = vec![
            json!({"name": "echo", "description": "Echoes text.",
                   "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                   "outputSchema": {"type": "object", "properties": {"echoed": {"type": "string"}}, "required": ["echoed"]},
                   "annotations": {"idempotentHint": true, "readOnlyHint": true}}),
            json!({"name": "slow", "description": "Runs until cancelled.", "inputSchema": object}),
            json!({"name": "crash", "description": "Exits the server.", "inputSchema": object}),
            json!({"name": "fail", "description": "Reports an error.", "inputSchema": object}),
            json!({"name": "image", "description": "Returns a picture.", "inputSchema": object}),
            json!({"name": "progress", "description": "Reports progress twice.", "inputSchema": object}),
            json!({"name": "add_tool", "description": "Lists one more tool.", "inputSchema": object}),
            json!({"name": "big", "description": "Returns `bytes` bytes of text.",
                   "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}},
                                   "required": ["bytes"]}}),
        ];
        if self.late.load(Ordering::SeqCst) {
            tools.push(json!({"name": "late", "description": "Added at run time.", "inputSchema": object}));
        }
        tools.into_iter().filter_map(tool).collect()
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        log(&format!("call {name}"));
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        match name.as_str() {
            "echo" => {
                let text = args["text"].as_str().unwrap_or_default();
                result(json!({"content": [{"type": "text", "text": text}], "structuredContent": {"echoed": text}}))
            }
            "slow" => {
                context.ct.cancelled().await;
                log(&format!("cancelled {name}"));
                Err(ErrorData::internal_error("cancelled", None))
            }
            "crash" => std::process::exit(3),
            "fail" => result(json!({"content": [{"type": "text", "text": "the disk is full"}], "isError": true})),
            "image" => result(json!({"content": [
                {"type": "text", "text": "a red dot:"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
            ]})),
            "progress" => {
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=2 {
                        let mut note = ProgressNotificationParam::new(token.clone(), f64::from(step));
                        note.total = Some(2.0);
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
                result(json!({"content": [{"type": "text", "text": "done"}]}))
            }
            "add_tool" => {
                self.late.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                result(json!({"content": [{"type": "text", "text": "added"}]}))
            }
            "late" => result(json!({"content": [{"type": "text", "text": "late result"}]})),
            "big" => {
                let bytes = args["bytes"].as_u64().and_then(|n| usize::try_from(n).ok()).unwrap_or_default();
                result(json!({"content": [{"type": "text", "text": "x".repeat(bytes)}]}))
            }
            other => Err(ErrorData::invalid_params(format!("no tool '{other}'"), None)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Ok(message) = std::env::var("FIXTURE_FAIL_START") {
        eprintln!("{message}");
        std::process::exit(2);
    }
    let Ok(running) = Fixture::default().serve(rmcp::transport::stdio()).await else {
        std::process::exit(1);
    };
    let _ = running.waiting().await;
}
