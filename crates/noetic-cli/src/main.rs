//! The `noetic` command. One directory per command, and the pieces they share:
//!
//! * `noetic demo` — the three capabilities on the scripted model, no key needed ([`demo`]).
//! * `noetic chat` — an interactive agent on a real provider, steerable while it works ([`chat`]).
//! * `noetic run WORKFLOW --prompt TEXT` — one turn of an agent defined in a file ([`run`], [`run::workflow`]).
//! * `noetic serve` — the agent behind an HTTP API and a live web page ([`serve`]).
//! * `noetic sessions` — the sessions a store holds ([`sessions`]).
//! * `noetic ledger FILE` — a steering ledger written with `--ledger-out` ([`ledger`]); `noetic ledger verify`,
//!   `export` and `keygen` check its hash chain and signatures ([`ledger::audit`], [`ledger::key`]).
//! * `noetic rules FILE` — checks a rules file ([`rules`]).
//!
//! Shared: `chat`, `run` and `serve` assemble their agent in [`agent`]: the model from [`provider`] (the offline
//! one from [`provider::local`] with `--local`), the built-in tools confined to a workspace
//! ([`agent::tools`], [`agent::workspace`], [`agent::command`]), MCP servers and A2A agents, the rules as a
//! steering layer, and approvals asked at the terminal ([`agent::approve`]). [`config`] reads `noetic.toml` and
//! the other files; [`output`] writes to the terminal (plain lines, rendered markdown, the chat's screen);
//! [`telemetry`] exports traces.

mod agent;
mod chat;
mod config;
mod demo;
mod ledger;
mod output;
mod provider;
mod rules;
mod run;
mod serve;
mod sessions;
mod telemetry;

use clap::{Parser, Subcommand};

use crate::output::{errln, outln};

/// Run steerable, rule-guarded agents from the terminal.
#[derive(Parser)]
#[command(
    name = "noetic",
    version,
    about,
    after_help = "Examples:\n  noetic demo\n  noetic chat --model openai/gpt-4o-mini --rules rules.toml --workspace .\n  noetic chat \
                  --model llama3.2 --base-url http://localhost:11434/v1\n  noetic run workflow.toml --prompt \"Tidy up\" \
                  --json\n  noetic ledger ledger.jsonl\n  noetic ledger verify noetic.db --key ledger.key.pub\n  noetic \
                  rules rules.toml"
)]
struct Cli {
    /// Defaults file for chat, run, serve and sessions (default: ./noetic.toml when present); also accepted
    /// after those commands.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Export traces over OTLP/HTTP to this collector (base URL, e.g. http://localhost:4318); default:
    /// OTEL_EXPORTER_OTLP_ENDPOINT. Without either nothing is exported.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Let traces carry prompts, responses, tool arguments and results (default: only sizes and ids); also
    /// NOETIC_OTEL_CAPTURE_CONTENT=1.
    #[arg(long, global = true)]
    capture_content: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the three capabilities on the built-in scripted model: a step-composed agent, steering rules (a
    /// predicate deny, an LLM-judged guide) and a live steering message that skips the rest of a tool batch.
    Demo {
        /// No colours and no pauses, even on a terminal (as when piped).
        #[arg(long)]
        plain: bool,
        /// At a terminal, the seconds each tool takes (default 2; 0: no pauses).
        #[arg(long, value_name = "SECONDS", value_parser = demo::parse_pace)]
        pace: Option<std::time::Duration>,
    },
    /// Chat with an agent on a real provider; type while it works to steer it, /stop to cancel a turn.
    #[command(after_help = chat::HELP)]
    Chat(chat::ChatArgs),
    /// Run an agent defined in a workflow file (TOML or JSON) once on a prompt and print its answer.
    #[command(
        after_help = "Workflow keys: instructions, model (\"scripted\" answers from [[scripted.response]] tables \
                            with text and/or tool_calls, and judge requests from scripted.judge), provider \
                            (openai|anthropic), base_url, tools (built-in names), workspace and rules_file (relative to \
                            the workflow), [[rule]] tables (as in rules.toml), [[mcp_server]] tables (as in noetic.toml), \
                            max_rounds, max_iterations, steering_mode, timeout (seconds). Example: crates/noetic-cli/examples/workflow.toml."
    )]
    Run(run::RunArgs),
    /// Pretty-print a steering ledger written with --ledger-out (JSON lines); `verify`, `export` and `keygen`
    /// check its hash chain and signatures.
    #[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
    Ledger {
        /// The ledger file.
        #[arg(required = true)]
        file: Option<std::path::PathBuf>,
        /// No colours, even on a terminal.
        #[arg(long)]
        plain: bool,
        /// Print the entries as JSON lines (checked: a line that is not a ledger entry is an error).
        #[arg(long)]
        json: bool,
        /// Also show the model answers that passed every rule (left out by default, counted).
        #[arg(long)]
        verbose: bool,
        #[command(subcommand)]
        action: Option<LedgerAction>,
    },
    /// Check a rules file (`rules.toml`) and list what each rule does; mistakes are reported with line and column.
    #[command(
        after_help = "Each [[rule]] has an id and exactly one of: deny_tool = \"name\"; deny_arg = { tool, arg, \
                            glob | regex }; rewrite_arg = { tool, arg, regex, replace, unless } (the call runs with the string argument \
                            rewritten, judged by every rule again); require_approval = \"name\"; prompt = \"...\" (LLM-judged, with optional mode \
                            = \"sync\"|\"async\", model, on_failure = \"allow\"|\"deny\", tools = [...] to judge \
                            only those tools' calls). Optional: name, applies_to (default [\"before_tool_call\"]), \
                            guidance and action = \"deny\"|\"guide\" (programmatic rules), mode = \"shadow\" (evaluated \
                            and ledgered, never enforced; `noetic rules promote ID --file F` makes it live), \
                            escalate_after = N (a deny after N guides in a turn). Path globs match the path \
                            relative to the workspace, links followed. Example: crates/noetic-cli/examples/rules.toml."
    )]
    #[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
    Rules {
        /// The rules file (TOML, or JSON with a .json extension).
        #[arg(required = true)]
        file: Option<std::path::PathBuf>,
        /// Print `{"file", "rules": [{"id", "describes"}]}` instead of lines.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<RulesAction>,
    },
    /// Serve the agent over HTTP: a JSON/SSE API and a live web page to talk to, watch and steer it (and
    /// approve its tool calls) from a browser or another program.
    #[command(
        after_help = "Examples:\n  noetic serve --local\n  noetic serve --workflow crates/noetic-cli/examples/serve.toml\n  \
                      NOETIC_SERVER_TOKEN=... noetic serve --bind 0.0.0.0:8080 --allowed-host noetic.example.com \
                      --model openai/gpt-4o-mini\n\nThen open \
                      http://127.0.0.1:8080/ (with a token: http://HOST:PORT/#token=TOKEN)."
    )]
    Serve(serve::ServeArgs),
    /// List, show or delete the sessions kept on disk (what `chat --session NAME` continues).
    Sessions(sessions::SessionsArgs),
}

/// What `noetic ledger` does besides showing a file.
#[derive(clap::Subcommand)]
enum LedgerAction {
    /// Check each session's hash chain: names the first entry that was edited, removed, reordered or inserted and
    /// exits non-zero; with --key, also each turn end's signature.
    #[command(after_help = "Without --key the chain catches accidents and partial edits, not someone who rewrites \
                            every entry after a change; with --key a rewrite, or a ledger cut off after an unsigned \
                            entry, fails. A ledger cut off right after a signed turn end is seen only with --entries.")]
    Verify {
        /// A session database (SQLite file or postgres:// URL) or a JSON-lines ledger (--ledger-out, export).
        source: std::path::PathBuf,
        /// The public key (FILE.pub from `noetic ledger keygen`) whose signatures each turn end must carry.
        #[arg(long, value_name = "PUB")]
        key: Option<std::path::PathBuf>,
        /// Only this session (repeatable; default: all).
        #[arg(long = "session", value_name = "KEY")]
        sessions: Vec<String>,
        /// How many entries each session's chain must hold (to see entries cut off the end).
        #[arg(long, value_name = "N")]
        entries: Option<u64>,
    },
    /// Write a database's ledgers as JSON lines an auditor verifies without the database (each line carries its
    /// session key and index).
    Export {
        /// The session database: an SQLite file or a postgres:// URL.
        db: std::path::PathBuf,
        /// Only this session (repeatable; default: all).
        #[arg(long = "session", value_name = "KEY")]
        sessions: Vec<String>,
        /// Write to FILE instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Make an Ed25519 key pair for --ledger-key: FILE (private, mode 0600) and FILE.pub.
    Keygen {
        /// The signing key's file (default: ledger.key); the public key goes to FILE.pub.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
}

/// What `noetic rules` does besides checking a file.
#[derive(clap::Subcommand)]
enum RulesAction {
    /// Make a shadow rule live: its `mode = "shadow"` becomes `mode = "live"`, comments and layout kept.
    Promote {
        /// The rule's id.
        rule: String,
        /// The rules file.
        #[arg(long, default_value = "rules.toml")]
        file: std::path::PathBuf,
    },
    /// Replay recorded decisions through a rules file: every recorded before_tool_call and after_model_call
    /// decision of a session database (or a --ledger-out file) is decided again; the ones that change are
    /// printed (session, turn, tool and arguments, old → new action, deciding rule), then a summary. Exit status
    /// 1 when a decision changes, unless --accept-changes.
    #[command(
        after_help = "Predicates run for real. An LLM-judged rule whose definition is unchanged replays the verdict \
                      recorded with the decision (no judge call); a new or changed one is reported as not judged, \
                      unless --rejudge (which says how many judge calls it makes, and asks first). Examples:\n  \
                      noetic rules test rules.toml --against ~/.local/share/noetic/noetic.db\n  noetic rules test \
                      rules.toml --against ledger.jsonl --json"
    )]
    Test(Box<rules::TestArgs>),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Declared before the async runtime, so it is dropped after it: the turn's spans have ended when it flushes.
    // A server logs what an operator needs (lease lost, takeovers, store errors) to stderr by default.
    let log_default = matches!(cli.command, Command::Serve(_)).then_some(tracing::Level::WARN);
    let _telemetry = match telemetry::init(cli.otlp_endpoint.as_deref(), cli.capture_content, log_default) {
        Ok(guard) => guard,
        Err(e) => {
            errln!("noetic: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("noetic: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // `noetic --config FILE CMD` and `noetic CMD --config FILE` both work where a defaults file is read.
    let config = |own: &config::ConfigArg| config::load(own.path.as_deref().or(cli.config.as_deref()));
    let command = async {
        if cli.config.is_some()
            && matches!(cli.command, Command::Demo { .. } | Command::Rules { .. } | Command::Ledger { .. })
        {
            return Err(
                "--config applies to chat, run, serve and sessions; demo, rules and ledger read no defaults file"
                    .into(),
            );
        }
        match cli.command {
            Command::Demo { plain, pace } => demo::run(plain, pace).await,
            Command::Rules { action: Some(RulesAction::Promote { rule, file }), .. } => {
                outln!("{}", rules::promote(&file, &rule)?);
                Ok(())
            }
            Command::Rules { action: Some(RulesAction::Test(args)), .. } => rules::test(*args).await,
            Command::Rules { file: Some(file), json, action: None } => check_rules(&file, json),
            Command::Rules { file: None, .. } => Err("give the rules file to check: noetic rules FILE".into()),
            Command::Run(args) => {
                let defaults = config(&args.config)?;
                run::run(args, &defaults).await
            }
            Command::Chat(args) => {
                let defaults = config(&args.config)?;
                chat::run(args, &defaults).await
            }
            Command::Ledger { action: Some(action), .. } => ledger_action(action).await.map_err(Into::into),
            Command::Ledger { file: Some(file), plain, json, verbose, action: None } => {
                ledger::show(&file, plain, json, verbose).map_err(Into::into)
            }
            Command::Ledger { file: None, .. } => Err("give the ledger file to show: noetic ledger FILE".into()),
            Command::Serve(args) => {
                let defaults = config(&args.config)?;
                serve::run(args, &defaults).await
            }
            Command::Sessions(args) => {
                let defaults = config(&args.config)?;
                sessions::run(args, &defaults).await
            }
        }
    };
    // A closed output (`noetic demo | head -1`) drops the command at once: nobody reads what it would print.
    let result = runtime.block_on(async {
        tokio::select! {
            result = command => result,
            () = output::closed() => Ok(()),
        }
    });
    // Do not wait for blocking tool threads a cancelled turn left behind (a command being killed, a slow read).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    if let Some(code) = output::exit_code() {
        return code;
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote a provider's or a model's text.
            errln!("noetic: {}", output::render::printable(&e.to_string()));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn ledger_action(action: LedgerAction) -> Result<(), String> {
    match action {
        LedgerAction::Verify { source, key, sessions, entries } => {
            let args = ledger::audit::VerifyArgs {
                source: &source,
                key: key.as_deref(),
                sessions: &sessions,
                expected: entries,
            };
            ledger::audit::verify_command(args).await
        }
        LedgerAction::Export { db, sessions, out } => {
            ledger::audit::export_command(&db, &sessions, out.as_deref()).await
        }
        LedgerAction::Keygen { out } => ledger::key::keygen(out.as_deref()),
    }
}

fn check_rules(file: &std::path::Path, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    // No server is started here: a `<server>__<tool>` name is checked when chat, run or serve start theirs.
    let set = rules::load(&config::source::Source::read(file)?, &rules::ToolNames::any_server())?;
    if json {
        let rules: Vec<serde_json::Value> = set
            .ids()
            .into_iter()
            .zip(set.describe())
            .map(|(id, line)| serde_json::json!({ "id": id, "describes": line }))
            .collect();
        outln!("{}", serde_json::json!({ "file": file.display().to_string(), "rules": rules }));
        return Ok(());
    }
    outln!("{}: {} rule(s)", file.display(), set.len());
    for line in set.describe() {
        outln!("  {line}");
    }
    Ok(())
}
