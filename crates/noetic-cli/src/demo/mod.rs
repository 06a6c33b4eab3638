//! `noetic demo`: the three capabilities on the scripted model, in real time, with no key and no service.
//!
//! The agent is composed from steps: a fork of three research paths feeding a loop around an `llm` step. Two
//! steering rules guard its tools: a predicate denies deleting outside `/workspace/`, and an LLM-judged rule (the
//! scripted model plays the judge) guides a write to a draft folder. Mid-way the agent reads three slow files; a
//! user message arrives during the first read, the other two are skipped, and the model sees the message at once.
//!
//! At a terminal the demo is paced (each tool takes `--pace` seconds) and a person can steer it: an input line
//! stays at the bottom, a typed line is echoed and steered into the turn, and when the first slow read starts the
//! demo says it waits for the person; the scripted user types only when nobody did. Piped, or with `--plain`, it
//! is instant and deterministic. The model's replies are canned (the demo says so), but they follow the person:
//! a line the person typed ends the plan, quoted in the answer, and every answer claims only what the tool
//! results show (see `story.rs`).

mod story;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use noetic::steering::{ANSWER_FORMAT, SteeringState};
use serde_json::{Value, json};

use crate::output::render::{Style, event_line, printable};
use crate::output::screen::{Input, Screen};
use crate::output::{errln, outln};

/// Seconds each tool takes at a terminal unless `--pace` says otherwise.
pub const DEFAULT_PACE: Duration = Duration::from_secs(2);

/// How long the paced demo waits for a person to type at its first slow read.
const WAIT_FOR_THE_USER: Duration = Duration::from_secs(20);

/// Reads `--pace SECONDS`: a number from 0 (no pauses) to 60.
pub fn parse_pace(text: &str) -> Result<Duration, String> {
    const PACE: crate::config::duration::Range =
        crate::config::duration::Range { min: 0.0, min_allowed: true, max: 60.0, example: "2" };
    crate::config::duration::parse("--pace", text, PACE)
}

type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

const TASK: &str = "Tidy the workspace and write a short report on async runtimes.";
const STEER: &str = "Skip the other notes; summarise what you have.";

/// How long a tool takes: its own short time, or the pace when the demo is paced.
fn took(millis: u64, pace: Duration) -> Duration {
    if pace.is_zero() { Duration::from_millis(millis) } else { pace }
}

fn slow_tool(
    (name, description): (&str, &str),
    millis: u64,
    pace: Duration,
    answer: fn(&Value) -> String,
) -> DemoResult<Arc<dyn Tool>> {
    let tool = FnTool::builder(name, description)
        .handler(move |args, _| async move {
            tokio::time::sleep(took(millis, pace)).await;
            Ok(Value::String(answer(&args)))
        })
        .build()?;
    Ok(Arc::new(tool))
}

fn arg(args: &Value, key: &str) -> String {
    args[key].as_str().unwrap_or("?").to_owned()
}

/// `read_file` is slow; its first call also waits (at most 5 s longer than the demo waits for a person) until
/// the user has typed, so the demo shows the same thing however busy the machine is.
fn read_file(typed: Arc<tokio::sync::Notify>, pace: Duration) -> DemoResult<Arc<dyn Tool>> {
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let tool = FnTool::builder("read_file", "Reads a file.")
        .handler(move |args, _| {
            let (typed, first) = (typed.clone(), first.clone());
            async move {
                tokio::time::sleep(took(400, pace)).await;
                if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    let limit =
                        Duration::from_secs(5) + if pace.is_zero() { Duration::ZERO } else { WAIT_FOR_THE_USER };
                    let _ = tokio::time::timeout(limit, typed.notified()).await;
                }
                Ok(Value::String(format!("contents of {}", arg(&args, "path"))))
            }
        })
        .build()?;
    Ok(Arc::new(tool))
}

fn tools(typed: Arc<tokio::sync::Notify>, pace: Duration) -> DemoResult<Vec<Arc<dyn Tool>>> {
    Ok(vec![
        slow_tool(("search", "Searches the web."), 200, pace, |a| format!("3 articles about {}", arg(a, "query")))?,
        slow_tool(("delete_file", "Deletes a file."), 50, pace, |a| format!("deleted {}", arg(a, "path")))?,
        slow_tool(("write_file", "Writes a file."), 50, pace, |a| format!("wrote {}", arg(a, "path")))?,
        read_file(typed, pace)?,
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
fn scripted_model(typed: Typed) -> ScriptedModel {
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
    let script: VecDeque<ModelResponse> = rounds
        .into_iter()
        .map(|calls| {
            let items =
                calls.into_iter().map(|(id, name, args)| Item::ToolCall(ToolCall::new(id, name, args.to_string())));
            ModelResponse { items: items.collect(), ..ModelResponse::default() }
        })
        .collect();
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
        let typed = typed.lock().map(|t| t.clone()).unwrap_or_default();
        if let Some(answer) = story::answer_to_the_person(request.history.as_slice(), &typed) {
            return Ok(ModelResponse::text(answer));
        }
        let next = script.lock().map_err(|e| NoeticError::other(e.to_string()))?.pop_front();
        Ok(next.unwrap_or_else(|| ModelResponse::text(story::final_answer(request.history.as_slice()))))
    })
}

/// The lines the person typed, in order (the scripted model reads them to follow the person).
type Typed = Arc<Mutex<Vec<String>>>;

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

/// Where the demo's lines go: plain lines, or above the input line at a terminal.
#[derive(Clone)]
struct Printer(Option<Screen>);

impl Printer {
    fn line(&self, line: &str) {
        match &self.0 {
            Some(screen) => screen.line(line),
            None => outln!("{line}"),
        }
    }
}

/// What the person at the terminal did, for the demo's scripted user to know whether to type.
#[derive(Default)]
struct Person {
    typed: std::sync::atomic::AtomicBool,
    wakes: tokio::sync::Notify,
    /// Esc, Ctrl-C or Ctrl-D stopped the demo: its cancelled turn is the user's doing, not a failure.
    stopped: std::sync::atomic::AtomicBool,
}

/// Runs the demo. `plain` turns colours off and, like a pipe, keeps it instant; at a terminal each tool takes
/// `pace` seconds (default [`DEFAULT_PACE`]).
pub async fn run(plain: bool, pace: Option<Duration>) -> DemoResult<()> {
    let style = Style::detect(plain);
    let interactive = !plain && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let pace = if interactive { pace.unwrap_or(DEFAULT_PACE) } else { Duration::ZERO };
    let layer = steering(SteeringConfig::new(rules()))?;
    let typed = Arc::new(tokio::sync::Notify::new());
    let lines_typed = Typed::default();
    let runtime = Runtime::builder()
        .model(Arc::new(scripted_model(lines_typed.clone())))
        .tools(tools(typed.clone(), pace)?)
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .agent(agent()?)
        .build()?;
    let session = runtime.session("demo");
    let mut events = session.subscribe();
    outln!("{}", style.bold("noetic demo — a step-composed agent, two steering rules, a live steering message"));
    outln!("{}", style.dim(&format!("task: {TASK}")));
    let person = Arc::new(Person::default());
    let (printer, keys) = match interactive.then(|| Screen::open("steer> ")).flatten() {
        Some((screen, keys)) => {
            screen.line(&style.dim(&format!(
                "each tool takes {} s (--pace changes it). Type a line and press Enter at any time to steer the \
                 agent yourself; Esc or Ctrl-C stops it.",
                pace.as_secs_f64()
            )));
            screen.line(&style.dim(
                "the model is scripted: its replies are canned, but they follow what you type (a line you send \
                 ends its plan)",
            ));
            (Printer(Some(screen)), Some(keys))
        }
        None => (Printer(None), None),
    };
    let listener = keys.map(|keys| {
        let heard = Heard { printer: printer.clone(), person: person.clone(), lines: lines_typed.clone(), style };
        tokio::spawn(listen(keys, session.clone(), heard))
    });
    let stopped_by_user = {
        let person = person.clone();
        move || person.stopped.load(std::sync::atomic::Ordering::SeqCst)
    };
    if listener.is_none() && std::io::stdin().is_terminal() {
        spawn_terminal_steering(session.clone(), lines_typed.clone());
    }

    // The "user": types a message while the first of three slow reads runs, unless the person at the terminal
    // has typed one.
    let typist = session.clone();
    let out = printer.clone();
    let waits = !pace.is_zero();
    let printer_task = tokio::spawn(async move {
        let mut execution = None;
        let mut steered = false;
        while let Ok(event) = events.recv().await {
            if let Some(line) = event_line(&style, &event.kind) {
                out.line(&line);
            }
            match &event.kind {
                EventKind::TurnStarted { .. } => execution = Some(event.execution_id),
                EventKind::ToolCallStarted { call_id, .. } if &**call_id == "c6" && !steered => {
                    steered = true;
                    let typed_already = person.typed.load(std::sync::atomic::Ordering::SeqCst);
                    if waits && !typed_already {
                        out.line(&style.yellow(&format!(
                            "  demo  waiting up to {} s for you: type a line and press Enter to steer the agent \
                             while it reads (else the scripted user types)",
                            WAIT_FOR_THE_USER.as_secs()
                        )));
                        let _ = tokio::time::timeout(WAIT_FOR_THE_USER, person.wakes.notified()).await;
                    } else if !waits {
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                    let stopped = person.stopped.load(std::sync::atomic::Ordering::SeqCst);
                    if !stopped && !person.typed.load(std::sync::atomic::Ordering::SeqCst) {
                        out.line(&style.cyan(&format!("  user  types: \"{STEER}\"")));
                        if let Err(e) = typist.steer(STEER).await {
                            out.line(&style.red(&format!("  steer refused: {e}")));
                        }
                    }
                    typed.notify_one();
                }
                EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => break,
                _ => {}
            }
        }
        execution
    });

    let answer = session.send(TASK).await?.await;
    let execution = printer_task.await?;
    if let Some(listener) = listener {
        listener.abort();
    }
    if let Some(screen) = printer.0 {
        screen.close();
    }
    outln!();
    // A stop is the user's choice: said as such, and the demo exits 0; any other error still fails it.
    let stopped = matches!(&answer, Err(e) if e.is_cancelled()) && stopped_by_user();
    match &answer {
        Ok(text) => outln!("{} {}", style.bold("answer:"), printable(text)),
        Err(_) if stopped => outln!("{}", style.yellow("stopped: you stopped the demo before it finished")),
        Err(e) => outln!("{} {e}", style.red("failed:")),
    }
    if let Some(id) = execution {
        let state: Option<SteeringState> = runtime.get_layer_state(id, "steering");
        outln!("\n{}", style.bold("steering ledger:"));
        let entries = state.map(|s| s.ledger).unwrap_or_default();
        for line in crate::ledger::view(&style, &entries, false, "`noetic ledger --verbose` on a --ledger-out file") {
            outln!("{line}");
        }
    }
    if stopped {
        return Ok(());
    }
    answer.map(drop).map_err(Into::into)
}

/// Where the listener says and keeps what the person does.
struct Heard {
    printer: Printer,
    person: Arc<Person>,
    lines: Typed,
    style: Style,
}

/// The person at the terminal: a typed line is echoed and steered into the session; Esc, Ctrl-C or Ctrl-D stop
/// the demo's turn (and the demo then ends with status 0: a stop is no failure).
async fn listen(mut keys: tokio::sync::mpsc::UnboundedReceiver<Input>, session: Session, heard: Heard) {
    let Heard { printer, person, lines, style } = heard;
    while let Some(input) = keys.recv().await {
        match input {
            Input::Line(line) => {
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                printer.line(&style.cyan(&format!("you   {}", printable(text))));
                if let Ok(mut lines) = lines.lock() {
                    lines.push(text.to_owned());
                }
                match session.steer(text).await {
                    Ok(_) => {
                        person.typed.store(true, std::sync::atomic::Ordering::SeqCst);
                        person.wakes.notify_one();
                    }
                    Err(e) => printer.line(&style.red(&format!("  steer refused: {e}"))),
                }
            }
            Input::Escape | Input::Interrupt | Input::Eof => {
                person.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
                printer.line(&style.dim("stopping the demo"));
                session.stop("stopped by the user").await;
                // The demo may be waiting for the person to type: it need not wait any more.
                person.wakes.notify_one();
            }
        }
    }
}

/// Lines typed at a terminal while the demo's output goes elsewhere are steered into the session.
fn spawn_terminal_steering(session: Session, lines: Typed) {
    outln!("(type a line and press Enter to steer the agent yourself)");
    // The thread blocks on the terminal; each line is steered on the runtime it came from.
    let runtime = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            let text = line.trim().to_owned();
            line.clear();
            if !text.is_empty()
                && let Ok(mut typed) = lines.lock()
            {
                typed.push(text.clone());
            }
            if !text.is_empty()
                && let Err(e) = runtime.block_on(session.steer(text))
            {
                errln!("steer refused: {e}");
            }
        }
    });
}
