//! The steering layer guarding a `deleteFile` tool with the seed's `no-delete-outside-workspace` rule.
//!
//! An agent on the scripted model first asks to delete `/etc/passwd`: the rule denies it, the tool never runs, and
//! the model reads `Steering denied: Deletion outside /workspace/ is not allowed.` as the tool result. It then asks
//! to delete `/workspace/tmp/cache.txt`, which is allowed and runs, and answers. The example prints the transcript,
//! the `steering_denied` events, and the turn's steering ledger: one entry per evaluated tool call plus the entry
//! recording the execution's outcome.
//!
//! Run it with `cargo run --example steering`.

use std::sync::{Arc, Mutex};

use noetic::prelude::*;
use serde_json::json;

fn or_dash(text: Option<&str>) -> &str {
    text.unwrap_or("-")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The seed's rule: deny `deleteFile` on any path outside /workspace/, allow everything else.
    let layer = steering(SteeringConfig::new([SteeringRule::predicate(
        "no-delete-outside-workspace",
        [Hook::BeforeToolCall],
        |params| match params.tool_call() {
            Some(call) if call.name == "deleteFile" => {
                let path = call.args["path"].as_str().unwrap_or("");
                if path.starts_with("/workspace/") {
                    SteeringDecision::allow()
                } else {
                    SteeringDecision::deny("Deletion outside /workspace/ is not allowed.")
                }
            }
            _ => SteeringDecision::allow(),
        },
    )]))?;

    // A pretend file deleter that records what it was asked to delete.
    let deleted = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = deleted.clone();
    let delete_file = FnTool::builder("deleteFile", "Deletes a file.")
        .input_schema(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        }))
        .handler(move |args, _tcx| {
            let record = record.clone();
            async move {
                let path = args["path"].as_str().unwrap_or_default().to_owned();
                record.lock().map_err(|_| ToolError::new("the deletion log is poisoned"))?.push(path.clone());
                Ok::<_, ToolError>(json!(format!("Deleted {path}.")))
            }
        })
        .build()?;

    // The scripted model: a forbidden deletion, a permitted one, then the answer.
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("call-1", "deleteFile", json!({"path": "/etc/passwd"}))])
            .with_text("I'll delete the file."),
        ModelResponse::tool_calls([("call-2", "deleteFile", json!({"path": "/workspace/tmp/cache.txt"}))])
            .with_text("That path is off limits; I'll clear the workspace cache instead."),
        ModelResponse::text("I could not delete /etc/passwd, but /workspace/tmp/cache.txt is gone."),
    ]);

    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(Arc::new(delete_file))
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()?;
    let session = runtime.session("demo");
    let mut events = session.subscribe();
    let answer = session.send("Free up some disk space.").await?.await?;

    println!("transcript:");
    for item in session.history() {
        println!("  {item}");
    }
    println!("\nanswer: {answer}");
    let deleted = deleted.lock().map_err(|_| "the deletion log is poisoned")?.clone();
    println!("tool actually ran on: {deleted:?}");
    println!("model calls: {}", model.calls());

    // The turn's execution id comes with its `turn_started` event; the steering events come along the way.
    let mut execution_id = None;
    println!("\nsteering events:");
    while let Ok(event) = events.try_recv() {
        match &event.kind {
            EventKind::TurnStarted { .. } => execution_id = Some(event.execution_id),
            EventKind::SteeringDenied { call_id, tool, layers, error, .. } => {
                println!("  steering_denied {call_id} {tool} by {layers:?}: {error}")
            }
            _ => {}
        }
    }
    let execution_id = execution_id.ok_or("no turn_started event was received")?;

    println!("\nsteering ledger of execution {execution_id}:");
    for entry in layer.ledger(execution_id) {
        let args = entry.tool_args.as_ref().map(|a| a.to_string());
        println!(
            "  kind={:?} tool={} args={} action={:?} rule_id={} guidance={} outcome={}",
            entry.kind,
            or_dash(entry.tool_name.as_deref()),
            or_dash(args.as_deref()),
            entry.action,
            or_dash(entry.rule_id.as_deref()),
            or_dash(entry.guidance.as_deref()),
            entry.outcome.map(|o| format!("{o:?}")).as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}
