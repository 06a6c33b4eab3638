//! `noetic chat`: an interactive agent on a real provider, steerable while it works.
//!
//! Stdin is read on its own thread, so the prompt stays live during a turn: a line typed while idle starts a
//! turn; a line typed while the agent works is steered into the running turn (it reaches the model after the
//! running tool call, and the rest of that batch is skipped). Commands: `/stop`, `/mode all|one-at-a-time`,
//! `/steer TEXT`, `/ledger`, `/status`, `/help`, `/quit`. End of input waits for the running turn, then exits.
//!
//! A bare answer (`y`, `n`, `a`, `yes`, `no`, `always`) typed while a turn runs and no question waits is not
//! sent: it was most likely typed a moment before a question appeared, and as a message it would tell the agent
//! only "y". The chat says so; `/steer y` sends it anyway.
//!
//! While an approval question waits, `y`/`yes` approves, `a`/`always` approves this call and the same call with
//! exactly these arguments later in this chat, `always matching "PATTERN"` this call and every later call of the
//! tool the pattern covers (see [`crate::agent::remembered`]), `n`/`no` or an empty line declines, a command runs (and the question stays open,
//! except after `/stop` and `/quit`, which decline), and any other line declines the call and is steered into
//! the turn, so it is not lost and the rest of the batch is skipped. A `write_file` question first shows the
//! diff the call would make.
//!
//! When stdin and stdout are both a terminal (and `--plain` is not given), the chat draws on a [`Screen`]: the
//! input line stays at the bottom, usable while the agent works, and output scrolls above it; typed lines are
//! echoed as the user's; Esc or Ctrl-C stops the running turn, and Ctrl-C twice at an idle prompt (or Ctrl-D)
//! quits (see `terminal.rs`). Otherwise output is plain lines and input is read line by line.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::time::Instant;

use noetic::agent::Session;
use noetic::steering::{LedgerEntry, SteeringLayer};
use noetic::{ExecutionId, NoeticError};
use tokio::sync::mpsc;

use crate::agent::approve::{self, Pending};
use crate::agent::workspace::Workspace;
use crate::agent::{self, AgentSpec};
use crate::config::Defaults;
use crate::output::render::{self, Style};
use crate::output::screen::Screen;
use crate::output::{out, outln};
use crate::provider;

type TurnFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, NoeticError>> + Send>>;

/// Arguments of `noetic chat`.
#[derive(clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub config: crate::config::ConfigArg,
    #[command(flatten)]
    model: provider::ModelArgs,
    #[command(flatten)]
    agent: agent::AgentArgs,
    /// Append each turn's steering ledger to FILE as JSON lines (show it with `noetic ledger FILE`).
    #[arg(long, value_name = "FILE")]
    ledger_out: Option<PathBuf>,
    /// No colours, even on a terminal.
    #[arg(long)]
    plain: bool,
    /// Continue this session (created if new); default: a new session, named at the start. `noetic sessions`
    /// lists them.
    #[arg(long, value_name = "NAME", conflicts_with = "no_store")]
    session: Option<String>,
    /// Pick the session to continue from a numbered list of the most recent ones.
    #[arg(long, conflicts_with_all = ["session", "no_store"])]
    resume: bool,
    /// Turns of a continued session shown at the start (its transcript).
    #[arg(long, value_name = "N", default_value_t = start::DEFAULT_HISTORY)]
    history: usize,
    #[command(flatten)]
    store: crate::sessions::StoreArgs,
}

pub const HELP: &str = "Type a message and press Enter. While the agent works, a line you type is steered into the \
                    running turn. Commands: /stop cancels the turn, /mode all|one-at-a-time, /steer TEXT sends TEXT \
                    as a message even when it is a bare y, n or a, /ledger shows the steering decisions, /status, \
                    /compact summarises the turns before the last one, /budget shows the session's budget and /budget turn.tool_calls=50 \
                    session.cost=2.5 … raises it (and runs what queued while it was paused), /model NAME switches the model (same provider), /rename TITLE titles the session, /clear starts a new session, /help, /quit. At an approval question: y or yes approves; a or always approves the same call \
                    (exactly these arguments) for the rest of the chat; always matching \"PATTERN\" approves the \
                    tool's calls the glob covers (run_command's command, a file tool's path); n, no or an empty line declines; any other line declines and goes to the \
                    agent as a message. While a turn runs and no question waits, a bare y, n or a is not sent (it \
                    was meant for a question). At a terminal: Esc or Ctrl-C stops the running \
                    turn; Ctrl-C twice or Ctrl-D at an idle prompt quits.";

/// Runs the chat until `/quit` or the end of input.
pub async fn run(mut args: ChatArgs, defaults: &Defaults) -> Result<(), Box<dyn std::error::Error>> {
    // Flags win over noetic.toml and its environment overrides.
    args.ledger_out = args.ledger_out.or_else(|| defaults.ledger_out.clone());
    let timeout = args.agent.timeout(defaults)?;
    // `_local_server` lives until the chat ends: dropping it stops a server this chat started.
    let provider::Resolved { model_id, described: provider_name, model, local_server: _local_server } =
        args.model.resolve(defaults, timeout).await?;
    let choice = model_choice::ModelChoice::new(&model_id);
    let model = choice.wrap(model);
    let rules = args.agent.rules(defaults)?;
    let terminal = std::io::stdin().is_terminal();
    let store = crate::sessions::open(&args.store, defaults).await?;
    if args.resume
        && let Some(store) = &store
    {
        args.session = start::pick_session(store).await?;
    }
    let name = args.session.clone().unwrap_or_else(|| crate::sessions::new_name("chat"));
    if let Some(store) = &store {
        start::refuse_if_held(store, &name).await?;
    }
    let (approval_tx, mut approvals) = mpsc::unbounded_channel();
    let rule_count = rules.len();
    let workspace = args.agent.workspace(defaults, None)?;
    let agent = agent::build(AgentSpec {
        model,
        model_id: model_id.clone(),
        instructions: args.agent.instructions(defaults, None),
        tools: None,
        tool_sources: crate::agent::a2a::start_with_mcp(&defaults.mcp_servers, &defaults.a2a_agents, &rules).await?,
        rules,
        workspace: workspace.clone(),
        max_rounds: None,
        max_iterations: None,
        steering_mode: args.agent.mode(defaults, None)?,
        approver: Some(approve::via_channel(approval_tx)),
        store: store.as_ref().map(|s| s.shared()),
        lease_term: args.store.lease,
        first_round_tool_call: args.model.local,
        max_idle_sessions: None,
        budget: defaults.budget,
        ledger_key: args.agent.ledger_key()?,
        chain_ledger: args.ledger_out.is_some(),
    })?;
    let stored = store.is_some();
    let session = agent.runtime.open(&name).await?;
    let mut events = session.subscribe();
    let style = Style::detect(args.plain);
    outln!(
        "{}",
        style.bold(&format!(
            "noetic chat — {model_id} ({provider_name}), workspace {}, {rule_count} rule(s), steering mode {}",
            workspace.root().display(),
            session.steering_mode().as_str()
        ))
    );
    if start::first_start() {
        outln!("{}", style.dim(HELP));
    } else {
        outln!("{}", style.dim("type a message; /help lists the commands"));
    }
    if stored {
        for line in start::transcript(style, &session.history(), args.history) {
            outln!("{line}");
        }
        outln!(
            "{}",
            style.dim(&format!(
                "session {}; continue it later with: noetic chat --session {}",
                render::visible(&name),
                render::visible(&name)
            ))
        );
        if session.unfinished_turn().is_some() {
            outln!(
                "{}",
                style.yellow(
                    "this session has a turn a stopped process left unfinished: /resume finishes it, /discard drops it"
                )
            );
        }
    }
    let mut chat = Chat::new(session, agent.steering.clone(), style, args.ledger_out.clone(), terminal);
    chat.workspace = Some(workspace.clone());
    chat.model = Some(choice);
    chat.stored = stored;
    chat.always = crate::agent::remembered::Remembered::configured(&defaults.allow)?;
    let full_screen = terminal && !args.plain && std::io::stdout().is_terminal();
    // At a terminal the screen reads the keys; `_no_lines` keeps the line channel open (and silent) meanwhile.
    let (mut keys, mut lines, _no_lines) = match full_screen.then(|| Screen::open("> ")).flatten() {
        Some((screen, keys)) => {
            chat.screen = Some(screen);
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(keys), rx, Some(tx))
        }
        None => (None, spawn_stdin_reader(), None),
    };
    chat.about = format!(
        "model {model_id} ({provider_name}); {rule_count} rule(s); workspace {}; {}",
        workspace.root().display(),
        if stored { "kept in the session database" } else { "in memory only" }
    );
    let mut turn: Option<TurnFuture> = None;
    chat.prompt(turn.is_some());
    // While idle, a kept session looks every second for messages other processes queued for it
    // (`noetic sessions steer`) and runs them.
    let mut elsewhere = tokio::time::interval(std::time::Duration::from_secs(1));
    elsewhere.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The status row's spinner, at a terminal while a turn runs.
    let mut spinner = tokio::time::interval(std::time::Duration::from_millis(100));
    spinner.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let spins = chat.screen.is_some();
    loop {
        // Biased, events first: what the agent already did is printed before a question or a typed line is
        // handled, so the transcript reads in order.
        tokio::select! {
            biased;
            event = events.recv() => chat.on_event(event),
            result = async { match turn.as_mut() { Some(t) => t.await, None => std::future::pending().await } }, if turn.is_some() => {
                turn = chat.on_turn_end(result, &mut events).await;
                if turn.is_none() && std::mem::take(&mut chat.clear_after_turn) {
                    events = chat.clear(&agent.runtime).await?;
                }
            },
            Some(pending) = approvals.recv() => chat.ask(pending),
            _ = elsewhere.tick(), if stored && turn.is_none() && !chat.quitting => turn = chat.run_queued_elsewhere().await,
            _ = spinner.tick(), if spins && turn.is_some() => chat.show_status(true),
            Some(input) = async { match keys.as_mut() { Some(k) => k.recv().await, None => std::future::pending().await } }, if !chat.quitting => {
                match chat.on_input(input, turn.is_some()).await {
                    Action::Start(t) => turn = Some(t),
                    Action::Quit => {
                        chat.quitting = true;
                        chat.reject_waiting();
                    }
                    Action::Clear => events = chat.clear(&agent.runtime).await?,
                    Action::Nothing => {}
                }
            }
            line = lines.recv(), if !chat.input_closed && !chat.quitting => match line {
                Some(line) => match chat.on_line(&line, turn.is_some()).await {
                    Action::Start(t) => turn = Some(t),
                    Action::Quit => {
                        chat.quitting = true;
                        chat.reject_waiting();
                    }
                    Action::Clear => events = chat.clear(&agent.runtime).await?,
                    Action::Nothing => {}
                },
                None => {
                    chat.input_closed = true;
                    chat.reject_waiting();
                }
            },
        }
        if turn.is_none() && (chat.quitting || chat.input_closed) {
            break;
        }
        chat.show_prompt(turn.is_some());
    }
    if let Some(screen) = chat.screen.take() {
        screen.close();
    }
    let key = render::visible(chat.session.key());
    if stored {
        outln!("{}", style.dim(&format!("session {key} is kept; come back to it with: noetic chat --session {key}")));
    } else {
        outln!("{}", style.dim("this chat was kept in memory only (--no-store): it cannot be continued"));
    }
    Ok(())
}

/// Lines of stdin, read on a thread so the async side never blocks on the terminal.
fn spawn_stdin_reader() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

enum Action {
    Start(TurnFuture),
    Quit,
    /// `/clear`: go on in a new session.
    Clear,
    Nothing,
}

struct Chat {
    /// What this chat runs (model, provider, rules, workspace), for `/status`.
    about: String,
    /// Tokens the running turn's model calls used so far.
    turn_usage: noetic::model::Usage,
    session: Session,
    steering: Arc<SteeringLayer>,
    style: Style,
    /// Entries of the finished turns.
    ledger: Vec<LedgerEntry>,
    /// Approvals an `[[allow]]` of noetic.toml gave in the running turn, as ledger entries.
    allowed: Vec<LedgerEntry>,
    ledger_out: Option<crate::ledger::LedgerOut>,
    /// The running turn's execution.
    execution: Option<ExecutionId>,
    turn_started: Option<Instant>,
    /// Running tool calls: call id → (tool, start).
    tools: HashMap<Arc<str>, (Arc<str>, Instant)>,
    /// How long each call's approval question waited (left out of the call's time).
    waits: HashMap<String, timing::Waited>,
    /// When the running model call started.
    model_call_started: Option<Instant>,
    /// Tokens the last model call read and wrote: the conversation's size, for the context meter.
    context_tokens: Option<u64>,
    /// The model's context window, when known: the meter shows `12.3k / 128k`.
    context_window: Option<u64>,
    /// The spinner's tick.
    tick: usize,
    /// The model's streamed markdown, rendered line by line at a terminal.
    markdown: render::markdown::Markdown,
    /// The model id `/model` switches.
    model: Option<model_choice::ModelChoice>,
    /// Sessions are kept in a store (else in memory only).
    stored: bool,
    /// A `/resume`d turn runs: how many interrupted calls the conversation had before it.
    resuming: Option<usize>,
    /// `/clear` was typed while a turn ran: a new session starts when it ends.
    clear_after_turn: bool,
    approvals: VecDeque<Pending>,
    /// The last thing printed was streamed text without a newline.
    mid_line: bool,
    /// Text streamed since the last model call started.
    streamed: bool,
    terminal: bool,
    /// Stdin has ended: calls needing approval are declined.
    input_closed: bool,
    /// `/quit` was typed: calls needing approval are declined.
    quitting: bool,
    /// The terminal screen, when input and output are a terminal (else plain lines).
    screen: Option<Screen>,
    /// Where the tools work, for the diff a `write_file` question shows.
    workspace: Option<Workspace>,
    /// The calls the user answered "always" for: they run without a question.
    always: crate::agent::remembered::Remembered,
    /// Ctrl-C was pressed once at an idle prompt: a second one quits.
    interrupt_armed: bool,
}

impl Chat {
    fn new(
        session: Session,
        steering: Arc<SteeringLayer>,
        style: Style,
        ledger_out: Option<PathBuf>,
        terminal: bool,
    ) -> Self {
        let ledger_out = ledger_out.map(|path| crate::ledger::LedgerOut::new(path, &session));
        Chat {
            about: String::new(),
            turn_usage: noetic::model::Usage::default(),
            session,
            steering,
            style,
            ledger: Vec::new(),
            allowed: Vec::new(),
            ledger_out,
            execution: None,
            turn_started: None,
            tools: HashMap::new(),
            waits: HashMap::new(),
            model_call_started: None,
            context_tokens: None,
            context_window: None,
            tick: 0,
            markdown: render::markdown::Markdown::new(style),
            model: None,
            stored: false,
            resuming: None,
            clear_after_turn: false,
            approvals: VecDeque::new(),
            mid_line: false,
            streamed: false,
            terminal,
            input_closed: false,
            quitting: false,
            screen: None,
            workspace: None,
            always: Default::default(),
            interrupt_armed: false,
        }
    }

    fn say(&mut self, line: &str) {
        if let Some(screen) = &self.screen {
            return screen.line(line);
        }
        if self.mid_line {
            outln!();
            self.mid_line = false;
        }
        outln!("{line}");
    }

    /// The context meter: `12.3k / 128k` (`12.3k tokens` when the window is not known).
    fn context_meter(&self) -> Option<String> {
        let used = render::tokens_short(self.context_tokens?);
        Some(match self.context_window {
            Some(window) => format!("{used} / {}", render::tokens_short(window)),
            None => format!("{used} tokens"),
        })
    }

    fn prompt(&self, running: bool) {
        if self.screen.is_some() {
            return self.show_prompt(running);
        }
        if self.terminal && !running {
            out!("> ");
        }
    }
}

mod approvals;
mod events;
mod input;
mod model_choice;
mod resume;
mod start;
mod status;
mod terminal;
mod timing;

#[cfg(test)]
mod tests;
