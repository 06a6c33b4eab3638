//! The live steering queue: the agent starts a batch of three slow tools; while the first runs, a second task
//! (standing in for a user typing) steers it. The first tool finishes, the other two are skipped, and the model
//! sees the new instruction at once.
//!
//! Run it with `cargo run --example steering_queue`.

use std::sync::Arc;
use std::time::Duration;

use noetic::prelude::*;
use serde_json::json;

fn slow_tool(name: &'static str) -> Result<Arc<dyn Tool>, ConfigError> {
    let tool = FnTool::builder(name, "Fetches a page slowly.")
        .handler(move |args, _| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(json!(format!("{name}: fetched {}", args["url"].as_str().unwrap_or("?"))))
        })
        .build()?;
    Ok(Arc::new(tool))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("call-1", "fetch_a", json!({"url": "https://example.org/rust"})),
            ("call-2", "fetch_b", json!({"url": "https://example.org/go"})),
            ("call-3", "fetch_c", json!({"url": "https://example.org/zig"})),
        ])
        .with_text("I'll fetch all three pages."),
        ModelResponse::text("Understood: only Rust. The Rust page is fetched; I stopped the other two."),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tools([slow_tool("fetch_a")?, slow_tool("fetch_b")?, slow_tool("fetch_c")?])
        .build()?;
    let session = runtime.session("demo");
    let mut events = session.subscribe();

    // The "user": waits until the first tool is running, then types a correction.
    let typist = session.clone();
    let user = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            match &event.kind {
                EventKind::ToolCallStarted { call_id, tool, .. } => {
                    println!("  [tool started]   {call_id} {tool}");
                    if **call_id == *"call-1" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        println!("  [user types]     only Rust, skip the others");
                        if let Err(e) = typist.steer("Only Rust, skip the others.").await {
                            println!("  [steer refused]  {e}");
                        }
                    }
                }
                EventKind::ToolCallCompleted { call_id, .. } => println!("  [tool finished]  {call_id}"),
                EventKind::ToolSkipped { call_id, .. } => println!("  [tool skipped]   {call_id}"),
                EventKind::SteeringInjected { count, .. } => println!("  [injected]       {count} message(s)"),
                EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => break,
                _ => {}
            }
        }
    });

    let answer = session.send("Fetch the Rust, Go and Zig pages.").await?.await?;
    user.await?;

    println!("\ntranscript:");
    for item in session.history() {
        println!("  {item}");
    }
    println!("\nanswer: {answer}");
    Ok(())
}
