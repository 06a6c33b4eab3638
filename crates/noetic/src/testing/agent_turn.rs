//! The agent turn the providers' tests and the library's steering tests all run: a `deleteFile` tool that counts
//! its runs, and a rule that denies deleting outside `/workspace/`. Only the wire differs between them, so the
//! scaffolding lives here once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use crate::error::ConfigError;
use crate::layer::Hook;
use crate::steering::{SteeringDecision, SteeringRule};
use crate::tool::{FnTool, Tool};

/// What [`workspace_rule`] tells the model when it denies a call.
pub const OUTSIDE_WORKSPACE: &str = "Deletion outside /workspace/ is not allowed.";

/// A tool `deleteFile` (`{"path": string}`) that deletes nothing: it counts the run in `runs` and returns
/// `"deleted <path>"`.
pub fn delete_file_tool(runs: &Arc<AtomicUsize>) -> Result<Arc<dyn Tool>, ConfigError> {
    let runs = runs.clone();
    let tool = FnTool::builder("deleteFile", "Deletes a file.")
        .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
        .handler(move |args, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!(format!("deleted {}", args["path"].as_str().unwrap_or("")))) }
        })
        .build()?;
    Ok(Arc::new(tool))
}

/// The rule `no-delete-outside-workspace`: before a tool call, denies a `deleteFile` whose path does not start with
/// `/workspace/` ([`OUTSIDE_WORKSPACE`]); allows everything else.
pub fn workspace_rule() -> SteeringRule {
    SteeringRule::predicate("no-delete-outside-workspace", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "deleteFile" && !c.args["path"].as_str().unwrap_or("").starts_with("/workspace/") => {
            SteeringDecision::deny(OUTSIDE_WORKSPACE)
        }
        _ => SteeringDecision::allow(),
    })
}
