//! The built-in tools, confined to a [`Workspace`]: `read_file`, `write_file`, `list_dir`, `delete_file` and
//! `run_command` (which always needs approval).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use noetic::tool::{FnTool, Tool, ToolError};
use serde_json::{Value, json};

use crate::command;
use crate::workspace::{Workspace, WsPath};

/// The names of the built-in tools.
pub const BUILT_IN: [&str; 5] = ["read_file", "write_file", "list_dir", "delete_file", "run_command"];

/// The arguments a built-in tool takes (`None` for a name that is not a built-in tool).
pub fn arguments(tool: &str) -> Option<&'static [&'static str]> {
    Some(match tool {
        "read_file" => &["path", "offset"],
        "write_file" => &["path", "content"],
        "list_dir" => &["path"],
        "delete_file" => &["path"],
        "run_command" => &["command", "timeout_secs"],
        _ => return None,
    })
}

/// The path a call of a built-in tool touches, resolved as the tool resolves it, shown workspace-relative
/// (`README.md`, `.` for the root): `None` unless `arg` is the `path` of a built-in file tool. Rules on path
/// arguments match this, not what the model wrote; `Some(Err)` says why the path cannot be resolved inside the
/// workspace (the tool refuses such a call too).
pub fn resolved_path(workspace: &Workspace, tool: &str, arg: &str, args: &Value) -> Option<Result<String, String>> {
    if !is_path_argument(tool, arg) {
        return None;
    }
    Some(target(workspace, tool, args).map(|path| path.to_string()))
}

/// True when `arg` is the path a built-in file tool works on.
pub fn is_path_argument(tool: &str, arg: &str) -> bool {
    arg == "path" && matches!(tool, "read_file" | "write_file" | "list_dir" | "delete_file")
}

/// What a file tool's call touches: `delete_file` removes the entry (a link itself), the others follow links.
fn target(workspace: &Workspace, tool: &str, args: &Value) -> Result<WsPath, String> {
    match tool {
        "delete_file" => workspace.resolve_entry(text_arg(args, "path")),
        "list_dir" => workspace.resolve(args["path"].as_str().unwrap_or(".")),
        _ => workspace.resolve(text_arg(args, "path")),
    }
}

/// Builds the named built-in tools (all of them for `None`). Tools in `needs_approval` wait for an approver;
/// `run_command` always does.
pub fn built_in(
    workspace: &Workspace,
    names: Option<&[String]>,
    needs_approval: &BTreeSet<String>,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let wanted: Vec<String> = match names {
        Some(names) => names.to_vec(),
        None => BUILT_IN.iter().map(|n| (*n).to_owned()).collect(),
    };
    let mut tools = Vec::new();
    for name in &wanted {
        let approval = needs_approval.contains(name.as_str());
        let tool = match name.as_str() {
            "read_file" => read_file(workspace),
            "write_file" => write_file(workspace),
            "list_dir" => list_dir(workspace),
            "delete_file" => delete_file(workspace),
            "run_command" => run_command(workspace),
            other => {
                return Err(format!("there is no built-in tool '{other}'; choose from {}", BUILT_IN.join(", ")));
            }
        };
        let tool = tool.needs_approval(approval || name == "run_command").build().map_err(|e| e.to_string())?;
        tools.push(Arc::new(tool) as Arc<dyn Tool>);
    }
    Ok(tools)
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn text_arg<'a>(args: &'a Value, key: &str) -> &'a str {
    args[key].as_str().unwrap_or("")
}

/// Runs a blocking file operation off the async threads.
async fn blocking(f: impl FnOnce() -> Result<String, String> + Send + 'static) -> Result<Value, ToolError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(text)) => Ok(Value::String(text)),
        Ok(Err(message)) => Err(ToolError::new(message)),
        Err(e) => Err(ToolError::new(format!("the tool stopped unexpectedly: {e}"))),
    }
}

fn read_file(ws: &Workspace) -> noetic::tool::FnToolBuilder {
    let ws = ws.clone();
    FnTool::builder(
        "read_file",
        "Reads a text file in the workspace. Paths are relative to the workspace root. Large files are cut at \
         64 KiB; pass `offset` (bytes) to read further.",
    )
    .input_schema(object(
        json!({
            "path": {"type": "string", "description": "File path relative to the workspace root."},
            "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start reading at."}
        }),
        &["path"],
    ))
    .handler(move |args, _| {
        let ws = ws.clone();
        async move {
            let offset = args["offset"].as_u64().unwrap_or(0);
            blocking(move || ws.read_resolved(&target(&ws, "read_file", &args)?, offset)).await
        }
    })
}

fn write_file(ws: &Workspace) -> noetic::tool::FnToolBuilder {
    let ws = ws.clone();
    FnTool::builder(
        "write_file",
        "Writes a text file in the workspace, replacing it if it exists and creating missing folders.",
    )
    .input_schema(object(
        json!({
            "path": {"type": "string", "description": "File path relative to the workspace root."},
            "content": {"type": "string", "description": "The whole new content of the file."}
        }),
        &["path", "content"],
    ))
    .handler(move |args, _| {
        let ws = ws.clone();
        async move {
            blocking(move || ws.write_resolved(&target(&ws, "write_file", &args)?, text_arg(&args, "content"))).await
        }
    })
}

fn list_dir(ws: &Workspace) -> noetic::tool::FnToolBuilder {
    let ws = ws.clone();
    FnTool::builder("list_dir", "Lists a folder of the workspace (folders end with '/').")
        .input_schema(object(
            json!({"path": {"type": "string", "description": "Folder relative to the workspace root; \".\" for the root."}}),
            &[],
        ))
        .handler(move |args, _| {
            let ws = ws.clone();
            async move { blocking(move || ws.list_resolved(&target(&ws, "list_dir", &args)?)).await }
        })
}

fn delete_file(ws: &Workspace) -> noetic::tool::FnToolBuilder {
    let ws = ws.clone();
    FnTool::builder("delete_file", "Deletes a file in the workspace (not a folder).")
        .input_schema(object(
            json!({"path": {"type": "string", "description": "File path relative to the workspace root."}}),
            &["path"],
        ))
        .handler(move |args, _| {
            let ws = ws.clone();
            async move { blocking(move || ws.delete_resolved(&target(&ws, "delete_file", &args)?)).await }
        })
}

/// Sets the stop flag when dropped: a cancelled turn drops the tool's future, and the command must die with it.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn run_command(ws: &Workspace) -> noetic::tool::FnToolBuilder {
    let root = ws.root().to_path_buf();
    FnTool::builder(
        "run_command",
        "Runs a shell command with the workspace as its working directory (the user approves each command). \
         Returns the exit status, stdout and stderr (each cut at 32 KiB).",
    )
    .input_schema(object(
        json!({
            "command": {"type": "string", "description": "The shell command line."},
            "timeout_secs": {"type": "integer", "minimum": 1, "maximum": command::MAX_TIMEOUT_SECS,
                "description": "Time limit in seconds (default 60)."}
        }),
        &["command"],
    ))
    .handler(move |args, _| {
        let root = root.clone();
        async move {
            let secs = args["timeout_secs"].as_u64().unwrap_or(command::DEFAULT_TIMEOUT_SECS);
            let timeout = Duration::from_secs(secs.min(command::MAX_TIMEOUT_SECS));
            let stop = Arc::new(AtomicBool::new(false));
            let _guard = StopOnDrop(stop.clone());
            let line = text_arg(&args, "command").to_owned();
            if line.trim().is_empty() {
                return Err(ToolError::new("the command is empty; pass the shell command line in `command`"));
            }
            blocking(move || command::run(&line, &root, timeout, &stop)).await
        }
    })
}
