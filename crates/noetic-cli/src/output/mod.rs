//! Writing to stdout and stderr without panicking when the reader has gone (`noetic demo | head -1`).
//!
//! `println!` panics when its stream is a closed pipe: Rust ignores SIGPIPE, so the write fails with `EPIPE`,
//! and restoring the default signal action would need `unsafe`. Every line goes through here instead. The first
//! failed write marks the output closed and wakes `main`, which drops the running command (so its destructors
//! run: a local model server it started is stopped) and exits with [`CLOSED_STATUS`]; later writes are dropped.

pub(crate) mod render;
pub(crate) mod screen;

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::OnceLock;

use tokio::sync::Notify;

/// The exit status after a reader closed the output early: 141 (128 + SIGPIPE), what a shell reports for a
/// Unix tool that SIGPIPE ended, so `set -o pipefail` scripts see the command was cut short.
pub const CLOSED_STATUS: u8 = 141;

/// The first write that failed: which stream, and why.
static FAILED: OnceLock<(&'static str, io::Error)> = OnceLock::new();
/// Wakes [`closed`] when a write fails.
static WAKE: Notify = Notify::const_new();

/// Prints a line on stdout, like `println!`, ending the command quietly when stdout is closed.
macro_rules! outln {
    () => { $crate::output::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints on stdout without a newline (flushed at once), like `print!`.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*)) };
}

/// Prints a line on stderr, like `eprintln!`, ending the command quietly when stderr is closed.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints on stderr without a newline (flushed at once), like `eprint!`.
macro_rules! err {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!($($arg)*)) };
}

pub(crate) use {err, errln, out, outln};

/// Writes to stdout and flushes; a failure closes the output (see the module docs).
#[cfg(not(test))]
pub fn stdout(args: fmt::Arguments<'_>) {
    write("stdout", &mut io::stdout().lock(), args);
}

/// Writes to stderr and flushes; a failure closes the output (see the module docs).
#[cfg(not(test))]
pub fn stderr(args: fmt::Arguments<'_>) {
    write("stderr", &mut io::stderr().lock(), args);
}

/// In unit tests, through `print!`, which the test harness captures.
#[cfg(test)]
pub fn stdout(args: fmt::Arguments<'_>) {
    print!("{args}");
}

/// In unit tests, through `eprint!`, which the test harness captures.
#[cfg(test)]
pub fn stderr(args: fmt::Arguments<'_>) {
    eprint!("{args}");
}

#[cfg_attr(test, allow(dead_code))]
fn write(name: &'static str, stream: &mut impl Write, args: fmt::Arguments<'_>) {
    if FAILED.get().is_some() {
        return;
    }
    if let Err(error) = stream.write_fmt(args).and_then(|()| stream.flush()) {
        let _ = FAILED.set((name, error));
        // A stored permit: `closed` sees it even when it starts waiting after this write.
        WAKE.notify_one();
    }
}

/// Returns once a write to stdout or stderr has failed.
pub async fn closed() {
    while FAILED.get().is_none() {
        WAKE.notified().await;
    }
}

/// How the command ends after a failed write: quietly with [`CLOSED_STATUS`] when the reader closed the pipe,
/// else with a message and a failure. `None` while every write succeeded.
pub fn exit_code() -> Option<ExitCode> {
    let (name, error) = FAILED.get()?;
    if error.kind() == io::ErrorKind::BrokenPipe {
        return Some(ExitCode::from(CLOSED_STATUS));
    }
    // Best effort: the failed stream may be stderr itself.
    let _ = writeln!(io::stderr(), "noetic: cannot write to {name}: {error}; the command was stopped");
    Some(ExitCode::FAILURE)
}
