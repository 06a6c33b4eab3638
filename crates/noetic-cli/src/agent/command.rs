//! Running a shell command for `run_command`: in the workspace, with a time limit and bounded output.
//!
//! The async runtime has no process support compiled in, so the command runs on a blocking thread with
//! `std::process`, polling for its end so that a time limit or a cancelled turn can kill it.
//!
//! On Unix the command runs in a process group of its own, and nothing it starts outlives it: when it ends (or
//! times out, or is cancelled) the whole group is killed, background children included. A watcher in the group
//! holds the read end of a pipe whose write end only this process has; when this process dies, also by
//! `kill -9`, the pipe closes and the watcher kills the group, so a chat's `sleep 30` dies with the chat.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The time limit when the call gives none.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// The largest time limit a call may ask for.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// Bytes kept of each of stdout and stderr; the rest is counted and cut with a marker.
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;

/// How often the blocking thread checks for the command's end, its deadline and cancellation.
const POLL: Duration = Duration::from_millis(10);
/// How long to wait for the output pipes after the command ended (a background child may hold them open).
const DRAIN: Duration = Duration::from_secs(2);

enum Ended {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
}

/// Runs `command` with the platform shell in `cwd`. `Ok` carries the exit status and output for the model
/// (also for a non-zero exit); `Err` says why there is no result (it could not start, it timed out, it was
/// cancelled).
pub fn run(command: &str, cwd: &Path, timeout: Duration, stop: &AtomicBool) -> Result<String, String> {
    let mut cmd = shell(command);
    // Stdin is the watcher's pipe (the command itself reads /dev/null).
    cmd.current_dir(cwd).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("the command could not start: {e}"))?;
    let lifeline = child.stdin.take();
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || tx.send((0, read_capped(out))));
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || tx.send((1, read_capped(err))));
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let ended = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ended::Exited(status),
            Ok(None) => {}
            Err(e) => {
                kill(&mut child);
                return Err(format!("lost track of the command: {e}"));
            }
        }
        if stop.load(Ordering::SeqCst) {
            kill(&mut child);
            break Ended::Cancelled;
        }
        if Instant::now() >= deadline {
            kill(&mut child);
            break Ended::TimedOut;
        }
        std::thread::sleep(POLL);
    };
    // The command is over: what it left running goes with it.
    kill_group(&child);
    drop(lifeline);
    let mut streams: [Option<(Vec<u8>, usize)>; 2] = [None, None];
    let drain_until = Instant::now() + DRAIN;
    while streams.iter().any(Option::is_none) {
        let left = drain_until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, captured)) => streams[i] = Some(captured),
            Err(_) => break,
        }
    }
    let [stdout, stderr] = streams;
    let output = format_output(stdout, stderr);
    match ended {
        Ended::Exited(status) => {
            let code = status.code().map_or_else(|| "killed by a signal".to_owned(), |c| c.to_string());
            Ok(format!("exit status: {code}{output}"))
        }
        Ended::TimedOut => Err(format!(
            "the command did not finish within {} s and was killed; give a larger timeout_secs (at most \
             {MAX_TIMEOUT_SECS}) or run something quicker{output}",
            timeout.as_secs()
        )),
        Ended::Cancelled => Err(format!("the command was cancelled and killed{output}")),
    }
}

/// The shell script that runs a command (`$1`) under a watcher: the watcher reads the pipe on stdin (as fd 3)
/// until it closes, then kills the process group; the command replaces the shell and reads /dev/null.
#[cfg(unix)]
const GUARDED: &str = "exec 3<&0; { cat <&3 >/dev/null 2>&1; kill -KILL 0; } </dev/null >/dev/null 2>&1 & exec 3<&-; \
                       exec sh -c \"$1\" </dev/null";

#[cfg(unix)]
fn shell(command: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(GUARDED).arg("sh").arg(command).process_group(0);
    cmd
}

/// Kills the command's process group (what it started in the background too).
#[cfg(unix)]
fn kill_group(child: &Child) {
    let pid = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

#[cfg(not(unix))]
fn kill_group(_child: &Child) {}

#[cfg(not(unix))]
fn shell(command: &str) -> Command {
    let mut cmd = Command::new("cmd");
    cmd.arg("/C").arg(command);
    cmd
}

/// Kills the command (and its group) and reaps it.
fn kill(child: &mut Child) {
    kill_group(child);
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a stream to its end, keeping the first [`MAX_OUTPUT_BYTES`]; returns them and the total length.
fn read_capped(mut stream: impl Read) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut total = 0;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n;
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, total)
}

fn format_output(stdout: Option<(Vec<u8>, usize)>, stderr: Option<(Vec<u8>, usize)>) -> String {
    let mut text = String::new();
    for (name, stream) in [("stdout", stdout), ("stderr", stderr)] {
        let Some((bytes, total)) = stream else { continue };
        if total == 0 {
            continue;
        }
        text.push_str(&format!("\n--- {name} ---\n{}", String::from_utf8_lossy(&bytes)));
        if total > bytes.len() {
            text.push_str(&format!("\n[… {} more bytes of {name} not shown]", total - bytes.len()));
        }
    }
    text
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_command_runs_in_the_directory_and_reports_status_and_output() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("here.txt"), "").unwrap();
        let stop = AtomicBool::new(false);
        let out = run("ls; echo oops >&2; exit 3", dir.path(), Duration::from_secs(30), &stop).unwrap();
        assert!(out.starts_with("exit status: 3"), "{out}");
        assert!(out.contains("--- stdout ---\nhere.txt"), "{out}");
        assert!(out.contains("--- stderr ---\noops"), "{out}");
    }

    #[test]
    fn large_output_is_cut_with_a_marker() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let out = run("head -c 40000 /dev/zero | tr '\\0' x", dir.path(), Duration::from_secs(30), &stop).unwrap();
        assert!(out.contains(&format!("[… {} more bytes of stdout not shown]", 40000 - MAX_OUTPUT_BYTES)), "{out}");
    }

    #[test]
    fn a_stopped_command_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(true);
        let err = run("sleep 30", dir.path(), Duration::from_secs(60), &stop).unwrap_err();
        assert!(err.contains("cancelled"), "{err}");
    }

    /// Whether `pid` still runs (a zombie nobody reaped does not).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| stat.rsplit(") ").next().is_some_and(|rest| !rest.starts_with('Z')))
            .unwrap_or(false)
    }

    /// Waits (bounded) until `path` holds a pid.
    fn pid_in(path: &Path) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
                return pid;
            }
            assert!(Instant::now() < deadline, "{} never held a pid", path.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn what_a_command_starts_in_the_background_is_killed_when_it_ends_or_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let out = run("sleep 300 & echo $! > ended.pid", dir.path(), Duration::from_secs(30), &stop).unwrap();
        assert!(out.starts_with("exit status: 0"), "{out}");
        let pid = pid_in(&dir.path().join("ended.pid"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) {
            assert!(Instant::now() < deadline, "the background sleep {pid} outlived its command");
            std::thread::sleep(Duration::from_millis(10));
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (root, flag) = (dir.path().to_owned(), stop.clone());
        let running = std::thread::spawn(move || {
            run("sleep 300 & echo $! > stopped.pid; wait", &root, Duration::from_secs(60), &flag)
        });
        let pid = pid_in(&dir.path().join("stopped.pid"));
        stop.store(true, Ordering::SeqCst);
        assert!(running.join().unwrap().unwrap_err().contains("cancelled"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) {
            assert!(Instant::now() < deadline, "the background sleep {pid} outlived the stopped command");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_command_past_its_time_limit_is_killed_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let err = run("sleep 30", dir.path(), Duration::ZERO, &stop).unwrap_err();
        assert!(err.contains("did not finish within 0 s"), "{err}");
    }
}
