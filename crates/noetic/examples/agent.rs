//! An agent with two typed tools, run on the scripted model, printing the transcript.
//!
//! Run it with `cargo run --example agent`.

use std::sync::Arc;

use noetic::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Arguments of the `weather` tool.
#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

/// Result of the `weather` tool.
#[derive(Serialize, JsonSchema)]
struct Weather {
    city: String,
    celsius: f64,
}

/// Arguments of the `convert` tool.
#[derive(Deserialize, JsonSchema)]
struct ConvertArgs {
    celsius: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let weather = tool_fn("weather", "Current temperature in a city.", |args: WeatherArgs, _tcx| async move {
        let celsius = if args.city == "Oslo" { -3.5 } else { 21.0 };
        Ok::<_, ToolError>(Weather { city: args.city, celsius })
    })?;
    let convert = tool_fn("to_fahrenheit", "Converts Celsius to Fahrenheit.", |args: ConvertArgs, _tcx| async move {
        Ok::<_, ToolError>(args.celsius * 9.0 / 5.0 + 32.0)
    })?;

    // The scripted model plays the part of a real one: two tool calls in one response, one more, then an answer.
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("call-1", "weather", json!({"city": "Oslo"})),
            ("call-2", "weather", json!({"city": "Lisbon"})),
        ])
        .with_text("Let me look both up."),
        ModelResponse::tool_calls([("call-3", "to_fahrenheit", json!({"celsius": -3.5}))]),
        ModelResponse::text("Oslo is -3.5 °C (25.7 °F); Lisbon is 21 °C."),
    ]);

    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tools([Arc::new(weather) as Arc<dyn Tool>, Arc::new(convert)])
        .instructions("You answer weather questions with tools.")
        .build()?;
    let session = runtime.session("demo");
    let answer = session.send("How cold is Oslo compared with Lisbon, in °F too?").await?.await?;

    println!("transcript:");
    for item in session.history() {
        println!("  {item}");
    }
    println!("\nanswer: {answer}");
    println!("model calls: {}", model.calls());
    Ok(())
}
