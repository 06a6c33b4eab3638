//! The context window's figures (#32): counting a 100 KB history (the estimate, OpenAI's tokenizer, and one new
//! item of a history already counted), and what fitting every request into a known window adds to a tool call.

use std::sync::Arc;
use std::time::Instant;

use noetic::model::{History, Item, ToolCall, ToolResult};
use noetic::prelude::*;
use noetic::window::{ContextWindow, Estimate, TokenCounter};

use crate::probe::{BenchResult, noop_tool, tool_calling_model};

/// A conversation of about 100 KB: turns of a question, a tool call, a 300-character result and an answer.
fn history_100kb() -> Vec<Item> {
    let mut items = Vec::new();
    let mut bytes = 0;
    let mut k = 0;
    while bytes < 100_000 {
        let turn = [
            Item::user(format!("Question {k}: what does the note in notes/{k}.txt say about the failing build?")),
            Item::ToolCall(ToolCall {
                id: format!("c{k}").into(),
                name: "read_file".into(),
                arguments: format!("{{\"path\":\"notes/{k}.txt\"}}").into(),
            }),
            Item::ToolResult(ToolResult::ok(format!("c{k}"), "The build failed because parse_args returns an error when the --config flag is missing; the fix is to fall back to noetic.toml in the working directory and to run the tests again before the release. ".repeat(2))),
            Item::assistant(format!("Note {k} says the build failed on a missing --config flag; fall back to noetic.toml.")),
        ];
        bytes += turn.iter().map(|i| serde_json::to_string(i).map_or(0, |s| s.len())).sum::<usize>();
        items.extend(turn);
        k += 1;
    }
    items
}

/// Microseconds to count `items` from nothing with `counter` (a fresh history: nothing counted before).
fn fresh_count_us(items: &[Item], counter: &dyn TokenCounter) -> f64 {
    let history = History::new(items.to_vec());
    let start = Instant::now();
    let tokens = history.tally().tokens_from(counter, history.as_slice(), 0);
    let us = start.elapsed().as_secs_f64() * 1e6;
    std::hint::black_box(tokens);
    us
}

/// Microseconds to count a history whose items were counted before, after one more item.
fn one_more_item_us(items: &[Item], counter: &dyn TokenCounter) -> f64 {
    let mut all = items.to_vec();
    let history = History::new(all.clone());
    history.tally().tokens_from(counter, history.as_slice(), 0);
    all.push(Item::user("And the next note?"));
    let start = Instant::now();
    let tokens = history.tally().tokens_from(counter, &all, 0);
    let us = start.elapsed().as_secs_f64() * 1e6;
    std::hint::black_box(tokens);
    us
}

/// Microseconds per tool call of one turn of `rounds` calls, the model's window known (`Some`) or not.
async fn tool_call_us(rounds: usize, window: Option<ContextWindow>) -> BenchResult<f64> {
    let llm = Step::llm("assistant", "m").max_rounds(rounds as u32 + 1).build()?;
    let model = tool_calling_model(rounds);
    let model = match window {
        Some(window) => model.with_context_window(window),
        None => model,
    };
    let ctx = StepContext::builder().model(Arc::new(model)).tools([noop_tool()?]).build();
    let start = Instant::now();
    llm.execute("go".to_owned(), &ctx).await?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / rounds as f64)
}

/// The figures.
pub async fn figures(report: impl Fn(&str, crate::Stats, &str, &str)) -> BenchResult<()> {
    let items = history_100kb();
    let stats = |f: &dyn Fn() -> f64| {
        let cold = f();
        crate::Stats::of((0..15).map(|_| f()).collect(), Some(cold))
    };
    report("token_count_100kb_history_us", stats(&|| fresh_count_us(&items, &Estimate)), "us", "<= 1000");
    let tiktoken = noetic_openai::Tiktoken::for_model("gpt-4o-mini").ok_or("no tokenizer for gpt-4o-mini")?;
    report("token_count_100kb_history_tiktoken_us", stats(&|| fresh_count_us(&items, &tiktoken)), "us", "");
    report("token_count_one_more_item_tiktoken_us", stats(&|| one_more_item_us(&items, &tiktoken)), "us", "<= 1000");
    // Interleaved pairs, so machine noise hits both sides of each difference alike.
    let window = ContextWindow::new(1_000_000);
    let mut differences = Vec::new();
    let mut cold = None;
    for _ in 0..16 {
        let fitted = tool_call_us(1000, Some(window)).await?;
        let plain = tool_call_us(1000, None).await?;
        if cold.is_none() {
            cold = Some(fitted - plain);
        } else {
            differences.push(fitted - plain);
        }
    }
    report("window_fit_overhead_per_tool_call_us", crate::Stats::of(differences, cold), "us", "");
    Ok(())
}
