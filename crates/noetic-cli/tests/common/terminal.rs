//! A real terminal for the binary: tmux runs it in a detached session of its own server, `type_*` sends keys and
//! `wait_for` reads the screen as a person would see it (`capture-pane`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

/// How long to wait for expected screen text before failing (a guard against hanging, not a timing assertion).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A program running in a tmux pane of 120 × 40 characters, on a tmux server only this test uses.
pub struct Terminal {
    socket: String,
    _config: tempfile::NamedTempFile,
}

impl Terminal {
    /// Starts `cmd` (its program, arguments and environment changes) in a new pane; `None` (after
    /// [`super::skip`]) when tmux is not installed.
    pub fn start(cmd: &Command) -> Option<Terminal> {
        if Command::new("tmux").arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
            return super::skip("tmux is not installed (apt-get install tmux)");
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("noetic-test-{}-{n}", std::process::id());
        // The pane stays after the program ends, so its exit status and last screen can be read.
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), "set -g remain-on-exit on\nset -g history-limit 10000\n").unwrap();
        // `env -u NAME …` first: env takes its options before the assignments.
        let mut line = vec!["env".to_owned()];
        let mut set = Vec::new();
        for (key, value) in cmd.get_envs() {
            let key = key.to_str().unwrap();
            match value {
                Some(value) => set.push(format!("{key}={}", value.to_str().unwrap())),
                None => line.extend(["-u".to_owned(), key.to_owned()]),
            }
        }
        line.extend(set);
        line.push("TERM=xterm-256color".to_owned());
        // The shell prints the exit status on the screen: tmux does not always learn it (it may see the terminal
        // close first).
        line.extend([
            "sh".to_owned(),
            "-c".to_owned(),
            "\"$0\" \"$@\"; s=$?; echo \"[exit status $s]\"; exit $s".to_owned(),
        ]);
        line.push(cmd.get_program().to_str().unwrap().to_owned());
        line.extend(cmd.get_args().map(|a| a.to_str().unwrap().to_owned()));
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", config.path().to_str().unwrap(), "new-session", "-d", "-x", "120", "-y", "40"])
            .arg("--")
            .args(&line)
            .status()
            .unwrap();
        assert!(status.success(), "tmux did not start");
        Some(Terminal { socket, _config: config })
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types text without pressing Enter.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-l", text]);
    }

    /// Types a line and presses Enter.
    pub fn type_line(&self, text: &str) {
        self.type_text(text);
        self.press("Enter");
    }

    /// Presses a key by its tmux name (`Enter`, `Escape`, `C-c`, `C-d`).
    pub fn press(&self, key: &str) {
        self.tmux(&["send-keys", key]);
    }

    /// The screen now, one string a row, trailing spaces removed.
    pub fn screen(&self) -> Vec<String> {
        self.tmux(&["capture-pane", "-p"]).lines().map(|l| l.trim_end().to_owned()).collect()
    }

    /// Everything the pane showed, scrolled-off rows included.
    pub fn history(&self) -> Vec<String> {
        self.tmux(&["capture-pane", "-p", "-S", "-"]).lines().map(|l| l.trim_end().to_owned()).collect()
    }

    /// The last row with text: the input line while the program runs.
    pub fn input_line(&self) -> String {
        self.screen().into_iter().rev().find(|l| !l.is_empty()).unwrap_or_default()
    }

    /// Waits until `seen` holds for the screen and its history; fails the test with the screen after [`DEADLINE`].
    pub fn wait_until(&self, what: &str, seen: impl Fn(&[String]) -> bool) -> Vec<String> {
        let start = Instant::now();
        loop {
            let rows = self.history();
            if seen(&rows) {
                return rows;
            }
            if start.elapsed() > DEADLINE {
                panic!("never saw {what} within {DEADLINE:?}; the terminal shows:\n{}", rows.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a row contains `needle`; returns that row.
    pub fn wait_for(&self, needle: &str) -> String {
        let rows = self.wait_until(&format!("{needle:?}"), |rows| rows.iter().any(|r| r.contains(needle)));
        rows.into_iter().find(|r| r.contains(needle)).unwrap()
    }

    /// Waits until the input line (the last row with text) is `expected`.
    pub fn wait_for_input_line(&self, expected: &str) {
        let start = Instant::now();
        while self.input_line() != expected {
            if start.elapsed() > DEADLINE {
                panic!("the input line never became {expected:?}; the terminal shows:\n{}", self.screen().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of the program the pane runs (the child of the pane's shell); `None` once it ended.
    pub fn program_pid(&self) -> Option<i32> {
        let shell = self.tmux(&["display-message", "-p", "#{pane_pid}"]).trim().to_owned();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Keeps what the pane showed (its history) as test-artefacts/chat/NAME.txt (git-ignored), for people to
    /// look at; returns the path.
    pub fn keep_capture(&self, name: &str) -> std::path::PathBuf {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test-artefacts/chat");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, self.history().join("\n")).unwrap();
        path
    }

    /// Waits for the program to end; returns its exit status.
    pub fn exit_status(&self) -> i32 {
        // The shell's line, or tmux's own when the pane closed before tmux read that line (it can lose the last
        // output of a shell that ends at once); the shell exits with the program's status.
        const SHELL: &str = "[exit status ";
        const TMUX: &str = "Pane is dead (status ";
        let rows =
            self.wait_until("the exit status", |rows| rows.iter().any(|r| r.contains(SHELL) || r.contains(TMUX)));
        let status = rows.iter().find_map(|row| match row.split_once(SHELL) {
            Some((_, rest)) => rest.strip_suffix(']').and_then(|s| s.parse().ok()),
            None => row.split_once(TMUX).and_then(|(_, rest)| rest.split(',').next()?.parse().ok()),
        });
        status.unwrap_or_else(|| panic!("no exit status in {rows:?}"))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}
