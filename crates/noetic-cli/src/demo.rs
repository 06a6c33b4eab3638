//! `noetic demo`: the three capabilities on the scripted model, in real time, with no key and no service.
//!
//! The agent is composed from steps: a fork of three research paths feeding a loop around an `llm` step. Two
//! steering rules guard its tools: a predicate denies deleting outside `/workspace/`, and an LLM-judged rule (the
//! scripted model plays the judge) guides a write to a draft folder. Mid-way the agent reads three slow files; a
//! user message arrives during the first read, the other two are skipped, and the model sees the message at once.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use noetic::steering::{ANSWER_FORMAT, SteeringState};
use serde_json::{Value, json};

use crate::output::{errln, outln};
use crate::render::{Style, event_line, ledger_line, printable};

type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

const TASK: &str = "Tidy the workspace and write a short report on async runtimes.";
const STEER: &str = "Skip the other notes; summarise what you have.";

fn slow_tool(name: &str, description: &str, millis: u64, answer: fn(&Value) -> String) -> DemoResult<Arc<dyn Tool>> {
    let tool = FnTool::builder(name, description)
        .handler(move |args, _| async move {
            tokio::time::sleep(Duration::from_millis(millis)).await;
            Ok(Value::String(answer(&args)))
        })
        .build()?;
    Ok(Arc::new(tool))
}

fn arg(args: &Value, key: &str) -> String {
    args[key].as_str().unwrap_or("?").to_owned()
}

/// `read_file` is slow; its first call also waits (at most 5 s) until the scripted user has typed, so the demo
/// shows the same thing however busy the machine is.
fn read_file(typed: Arc<tokio::sync::Notify>) -> DemoResult<Arc<dyn Tool>> {
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let tool = FnTool::builder("read_file", "Reads a file.")
        .handler(move |args, _| {
            let (typed, first) = (typed.clone(), first.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    let _ = tokio::time::timeout(Duration::from_secs(5), typed.notified()).await;
                }
                Ok(Value::String(format!("contents of {}", arg(&args, "path"))))
            }
        })
        .build()?;
    Ok(Arc::new(tool))
}

fn tools(typed: Arc<tokio::sync::Notify>) -> DemoResult<Vec<Arc<dyn Tool>>> {
    Ok(vec![
        slow_tool("search", "Searches the web.", 200, |a| format!("3 articles about {}", arg(a, "query")))?,
        slow_tool("delete_file", "Deletes a file.", 50, |a| format!("deleted {}", arg(a, "path")))?,
        slow_tool("write_file", "Writes a file.", 50, |a| format!("wrote {}", arg(a, "path")))?,
        read_file(typed)?,
    ])
}

fn rules() -> Vec<SteeringRule> {
    vec![
        SteeringRule::predicate("no-delete-outside-workspace", [Hook::BeforeToolCall], |p| match p.tool_call() {
            Some(c) if c.name == "delete_file" && !c.args["path"].as_str().unwrap_or("").starts_with("/workspace/") => {
                SteeringDecision::deny("Deletion outside /workspace/ is not allowed.")
            }
            _ => SteeringDecision::allow(),
        }),
        SteeringRule::llm(
            "reports-go-to-drafts",
            [Hook::BeforeToolCall],
            LlmEval::sync("Reports must be written under /workspace/drafts/ until a reviewer publishes them."),
        ),
    ]
}

/// The agent's part of the script, in order, then the judge's verdicts (the judge sees a prompt ending with the
/// answer format line).
fn scripted_model() -> ScriptedModel {
    let call = |id: &str, name: &str, args: Value| (id.to_owned(), name.to_owned(), args);
    let rounds: Vec<Vec<(String, String, Value)>> = vec![
        vec![
            call("c1", "search", json!({"query": "async runtimes"})),
            call("c2", "delete_file", json!({"path": "/etc/hosts"})),
            call("c3", "write_file", json!({"path": "/workspace/report.md", "content": "…"})),
        ],
        vec![
            call("c4", "delete_file", json!({"path": "/workspace/tmp/cache.bin"})),
            call("c5", "write_file", json!({"path": "/workspace/drafts/report.md", "content": "…"})),
        ],
        vec![
            call("c6", "read_file", json!({"path": "/workspace/notes/tokio.md"})),
            call("c7", "read_file", json!({"path": "/workspace/notes/smol.md"})),
            call("c8", "read_file", json!({"path": "/workspace/notes/glommio.md"})),
        ],
    ];
    let mut script: VecDeque<ModelResponse> = rounds
        .into_iter()
        .map(|calls| {
            let items = calls
                .into_iter()
                .map(|(id, name, args)| Item::ToolCall(ToolCall { id, name, arguments: args.to_string() }));
            ModelResponse { items: items.collect(), ..ModelResponse::default() }
        })
        .collect();
    script.push_back(ModelResponse::text(
        "Done: removed the cache, drafted /workspace/drafts/report.md (tokio leads; smol and glommio skipped as you \
         asked), and left /etc alone.",
    ));
    let script = Mutex::new(script);
    ScriptedModel::responder(move |request| {
        let prompt = request.history.last().and_then(Item::text).unwrap_or("");
        if prompt.ends_with(ANSWER_FORMAT) {
            let args = prompt.lines().find(|l| l.starts_with("Args: ")).unwrap_or("");
            let verdict = if prompt.contains("Tool: write_file") && !args.contains("/workspace/drafts/") {
                "GUIDE: Write the report under /workspace/drafts/ first."
            } else {
                "ALLOW"
            };
            return Ok(ModelResponse::text(verdict));
        }
        let next = script.lock().map_err(|e| NoeticError::other(e.to_string()))?.pop_front();
        Ok(next.unwrap_or_else(|| ModelResponse::text("(the script is over)")))
    })
}

fn agent() -> DemoResult<Step<String, String>> {
    let path = |source: &'static str, millis: u64| {
        Step::run(source, move |task: String, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(millis)).await;
            Ok(format!("- {source}: notes for \"{task}\""))
        })
        .build()
    };
    let research = Step::fork("research", ForkMode::All)
        .paths([path("web", 250)?, path("papers", 150)?, path("code", 100)?])
        .merge(|parts, _| Ok(format!("{TASK}\nResearch brief:\n{}", parts.join("\n"))))
        .build()?;
    let assistant = Step::llm("assistant", "scripted/demo")
        .instructions("You keep a workspace tidy and write reports. Use the tools.")
        .stream(true)
        .build()?;
    Ok(Step::loop_("agent", [research, assistant])
        .until(until::no_tool_calls())
        .prepare_next(|_, _, _| String::new())
        .build()?)
}

/// Runs the demo. `plain` turns colours off.
pub async fn run(plain: bool) -> DemoResult<()> {
    let style = Style::detect(plain);
    let layer = steering(SteeringConfig::new(rules()))?;
    let typed = Arc::new(tokio::sync::Notify::new());
    let runtime = Runtime::builder()
        .model(Arc::new(scripted_model()))
        .tools(tools(typed.clone())?)
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .agent(agent()?)
        .build()?;
    let session = runtime.session("demo");
    let mut events = session.subscribe();
    outln!("{}", style.bold("noetic demo — a step-composed agent, two steering rules, a live steering message"));
    outln!("{}", style.dim(&format!("task: {TASK}")));

    // The "user": types a message while the first of three slow reads runs (a person at a terminal can type too).
    let typist = session.clone();
    let printer_style = style;
    let printer = tokio::spawn(async move {
        let mut execution = None;
        let mut steered = false;
        while let Ok(event) = events.recv().await {
            if let Some(line) = event_line(&printer_style, &event.kind) {
                outln!("{line}");
            }
            match &event.kind {
                EventKind::TurnStarted { .. } => execution = Some(event.execution_id),
                EventKind::ToolCallStarted { call_id, .. } if call_id == "c6" && !steered => {
                    steered = true;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    outln!("{}", printer_style.cyan(&format!("  user  types: \"{STEER}\"")));
                    if let Err(e) = typist.steer(STEER) {
                        outln!("{}", printer_style.red(&format!("  steer refused: {e}")));
                    }
                    typed.notify_one();
                }
                EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => break,
                _ => {}
            }
        }
        execution
    });
    if std::io::stdin().is_terminal() {
        spawn_terminal_steering(session.clone());
    }

    let answer = session.send(TASK)?.await;
    let execution = printer.await?;
    outln!();
    match &answer {
        Ok(text) => outln!("{} {}", style.bold("answer:"), printable(text)),
        Err(e) => outln!("{} {e}", style.red("failed:")),
    }
    if let Some(id) = execution {
        let state: Option<SteeringState> = runtime.get_layer_state(id, "steering");
        outln!("\n{}", style.bold("steering ledger:"));
        for entry in state.map(|s| s.ledger).unwrap_or_default() {
            outln!("{}", ledger_line(&style, &entry));
        }
    }
    answer.map(drop).map_err(Into::into)
}

/// Lines typed at the terminal while the demo runs are steered into the session.
fn spawn_terminal_steering(session: Session) {
    outln!("(type a line and press Enter to steer the agent yourself)");
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            let text = line.trim().to_owned();
            line.clear();
            if !text.is_empty()
                && let Err(e) = session.steer(text)
            {
                errln!("steer refused: {e}");
            }
        }
    });
}
