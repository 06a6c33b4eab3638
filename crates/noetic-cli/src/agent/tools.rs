//! The built-in tools, confined to a [`Workspace`]: `read_file`, `write_file`, `list_dir`, `delete_file` and
//! `run_command` (which always needs approval).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use noetic::steering::SteeringAction;
use noetic::tool::{FnTool, Tool, ToolError};
use serde_json::{Value, json};

use crate::agent::command;
use crate::agent::workspace::{Failure, Located, Workspace};
use crate::rules::PathRules;

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

/// The path a rule on `arg` of a call of a built-in tool checks, located as the tool locates it and shown
/// workspace-relative (`README.md`, `.` for the root): `None` unless `arg` is the `path` of a built-in file tool.
/// What was located is pinned for the tool, which acts on it (see `workspace::pins`). Rules on path arguments
/// match this, not what the model wrote; `Some(Err)` says why the path cannot be located inside the workspace (the
/// tool refuses such a call too).
pub fn pinned_path(
    workspace: &Workspace,
    rule_id: &str,
    (call_id, tool): (&str, &str),
    arg: &str,
    args: &Value,
) -> Option<Result<String, String>> {
    if !is_path_argument(tool, arg) {
        return None;
    }
    let located = workspace.locate_for_rule(rule_id, (call_id, tool), raw_path(tool, args), follows_last(tool));
    Some(located.map(|path| path.to_string()))
}

/// True when `arg` is the path a built-in file tool works on.
pub fn is_path_argument(tool: &str, arg: &str) -> bool {
    arg == "path" && matches!(tool, "read_file" | "write_file" | "list_dir" | "delete_file")
}

/// The path argument of a file tool's call as written (`list_dir` lists the root without one).
fn raw_path<'a>(tool: &str, args: &'a Value) -> &'a str {
    match tool {
        "list_dir" => args["path"].as_str().unwrap_or("."),
        _ => text_arg(args, "path"),
    }
}

/// Whether a file tool follows a link in the last part of its path: `delete_file` removes the link itself.
fn follows_last(tool: &str) -> bool {
    tool != "delete_file"
}

/// How many times a file tool locates its path when what it found changed before it could act on it.
const ATTEMPTS: usize = 3;

/// Runs a file tool's call with `act`: on what the rules pinned for it when they checked it, else on its path
/// located now. The path rules are checked (again) on the path of what it acts on, so a path that changed after
/// the steering layer's check is still held to them; a target that changed before `act` could open it (a link
/// swapped in) is located and checked again.
fn on_target(
    (ws, rules): (&Workspace, &PathRules),
    (call_id, tool): (&str, &str),
    args: &Value,
    act: impl Fn(Located) -> Result<String, Failure>,
) -> Result<String, String> {
    let raw = raw_path(tool, args);
    let mut pinned = ws.take_pinned(call_id, tool, raw);
    for _ in 0..ATTEMPTS {
        let target = match pinned.take() {
            Some(target) => target,
            None => ws.locate(raw, follows_last(tool))?,
        };
        if let Some(decision) = rules.check(tool, &target.path().to_string()) {
            let guidance = decision.guidance.unwrap_or_default();
            return Err(match decision.action {
                SteeringAction::Guide => format!("Steering guidance: {guidance}"),
                _ => format!("Steering denied: {guidance}"),
            });
        }
        match act(target) {
            Ok(text) => return Ok(text),
            Err(Failure::Refused(why)) => return Err(why),
            Err(Failure::Changed) => {}
        }
    }
    Err(format!(
        "'{raw}' changed each time {tool} opened it (a symbolic link or folder was swapped in meanwhile); try again"
    ))
}

/// Builds the named built-in tools (all of them for `None`). Tools in `needs_approval` wait for an approver;
/// `run_command` always does. The file tools check `path_rules` on what they act on.
pub fn built_in(
    workspace: &Workspace,
    names: Option<&[String]>,
    needs_approval: &BTreeSet<String>,
    path_rules: &PathRules,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let wanted: Vec<String> = match names {
        Some(names) => names.to_vec(),
        None => BUILT_IN.iter().map(|n| (*n).to_owned()).collect(),
    };
    let mut tools = Vec::new();
    for name in &wanted {
        let approval = needs_approval.contains(name.as_str());
        let tool = match name.as_str() {
            "read_file" => read_file(workspace, path_rules),
            "write_file" => write_file(workspace, path_rules),
            "list_dir" => list_dir(workspace, path_rules),
            "delete_file" => delete_file(workspace, path_rules),
            "run_command" => run_command(workspace),
            other => {
                return Err(format!("there is no built-in tool '{other}'; choose from {}", BUILT_IN.join(", ")));
            }
        };
        let tool = tool.needs_approval(approval || name == "run_command");
        // The read-only tools may run together (an llm step with parallel_tools above 1).
        let tool = if matches!(name.as_str(), "read_file" | "list_dir") { tool.concurrent() } else { tool };
        let tool = tool.build().map_err(|e| e.to_string())?;
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

fn read_file(ws: &Workspace, rules: &PathRules) -> noetic::tool::FnToolBuilder {
    let (ws, rules) = (ws.clone(), rules.clone());
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
    .handler(move |args, tcx| {
        let (ws, rules) = (ws.clone(), rules.clone());
        async move {
            let offset = args["offset"].as_u64().unwrap_or(0);
            blocking(move || {
                on_target((&ws, &rules), (&tcx.call_id, "read_file"), &args, |target| ws.read(target, offset))
            })
            .await
        }
    })
}

fn write_file(ws: &Workspace, rules: &PathRules) -> noetic::tool::FnToolBuilder {
    let (ws, rules) = (ws.clone(), rules.clone());
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
    .handler(move |args, tcx| {
        let (ws, rules) = (ws.clone(), rules.clone());
        async move {
            blocking(move || {
                let content = text_arg(&args, "content");
                on_target((&ws, &rules), (&tcx.call_id, "write_file"), &args, |target| ws.write(target, content))
            })
            .await
        }
    })
}

fn list_dir(ws: &Workspace, rules: &PathRules) -> noetic::tool::FnToolBuilder {
    let (ws, rules) = (ws.clone(), rules.clone());
    FnTool::builder("list_dir", "Lists a folder of the workspace (folders end with '/').")
        .input_schema(object(
            json!({"path": {"type": "string", "description": "Folder relative to the workspace root; \".\" for the root."}}),
            &[],
        ))
        .handler(move |args, tcx| {
            let (ws, rules) = (ws.clone(), rules.clone());
            async move {
                blocking(move || on_target((&ws, &rules), (&tcx.call_id, "list_dir"), &args, |target| ws.list(target)))
                    .await
            }
        })
}

fn delete_file(ws: &Workspace, rules: &PathRules) -> noetic::tool::FnToolBuilder {
    let (ws, rules) = (ws.clone(), rules.clone());
    FnTool::builder("delete_file", "Deletes a file in the workspace (not a folder).")
        .input_schema(object(
            json!({"path": {"type": "string", "description": "File path relative to the workspace root."}}),
            &["path"],
        ))
        .handler(move |args, tcx| {
            let (ws, rules) = (ws.clone(), rules.clone());
            async move {
                blocking(move || {
                    on_target((&ws, &rules), (&tcx.call_id, "delete_file"), &args, |target| ws.delete(target))
                })
                .await
            }
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

#[cfg(all(test, target_os = "linux"))]
mod tests;
