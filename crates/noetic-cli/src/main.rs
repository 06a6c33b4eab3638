//! The `noetic` command.

mod demo;
mod render;

use clap::{Parser, Subcommand};

/// Run steerable, rule-guarded agents from the terminal.
#[derive(Parser)]
#[command(name = "noetic", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the three capabilities on the built-in scripted model: a step-composed agent, steering rules (a
    /// predicate deny, an LLM-judged guide) and a live steering message that skips the rest of a tool batch.
    Demo {
        /// No colours, even on a terminal.
        #[arg(long)]
        plain: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("noetic: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo { plain } => demo::run(plain).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("noetic: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
