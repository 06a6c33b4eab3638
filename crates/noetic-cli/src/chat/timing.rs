//! How long things run, as the chat shows them: a tool's time leaves out the time its approval question waited
//! for the person (a 15 s command approved after a minute took 15 s), and the status row above the input line
//! spins while a turn runs, saying what runs and for how long.

use std::time::Duration;

use tokio::time::Instant;

use super::Chat;
use crate::output::render::{printable, short_id};

/// The spinner's frames, one a tick.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Time a call's approval question waited: what is over, and since when it waits now.
#[derive(Default, Clone, Copy)]
pub(super) struct Waited {
    over: Duration,
    since: Option<Instant>,
}

impl Waited {
    fn total(&self) -> Duration {
        self.over + self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

impl Chat {
    /// A question about `call_id` is asked now.
    pub(super) fn question_asked(&mut self, call_id: &str) {
        self.waits.entry(call_id.to_owned()).or_default().since.get_or_insert_with(Instant::now);
    }

    /// The question about `call_id` is answered (or dropped).
    pub(super) fn question_answered(&mut self, call_id: &str) {
        if let Some(waited) = self.waits.get_mut(call_id)
            && let Some(since) = waited.since.take()
        {
            waited.over += since.elapsed();
        }
    }

    /// How long the call `call_id` has run, leaving out the time its approval question waited.
    pub(super) fn tool_time(&self, call_id: &str) -> Option<Duration> {
        let (_, started) = self.tools.get(call_id)?;
        let waited = self.waits.get(call_id).map_or(Duration::ZERO, Waited::total);
        Some(started.elapsed().saturating_sub(waited))
    }

    /// The call ended: its time (see [`Chat::tool_time`]), and it is forgotten.
    pub(super) fn tool_ended(&mut self, call_id: &str) -> Option<Duration> {
        let time = self.tool_time(call_id);
        self.tools.remove(call_id);
        self.waits.remove(call_id);
        time
    }

    /// What the status row says now: a spinner, then each running tool (or the model call, or the turn) with its
    /// time; `None` when no turn runs.
    pub(super) fn status_row(&self, tick: usize) -> Option<String> {
        let started = self.turn_started?;
        let frame = FRAMES[tick % FRAMES.len()];
        let waiting = self.approvals.iter().any(|p| !p.reply.is_closed());
        let mut running: Vec<_> = self.tools.iter().collect();
        running.sort_by_key(|(_, (_, started))| *started);
        let mut parts = Vec::new();
        for (id, (tool, _)) in running {
            let time = self.tool_time(id).unwrap_or_default();
            parts.push(format!("{} [{}] {:.1} s", printable(tool), short_id(id), time.as_secs_f64()));
        }
        if parts.is_empty() {
            let what = if self.model_call_started.is_some() { "model" } else { "turn" };
            let since = self.model_call_started.unwrap_or(started);
            parts.push(format!("{what} {:.1} s", since.elapsed().as_secs_f64()));
        }
        let tail = if waiting { " · waiting for your answer" } else { " · Esc stops" };
        Some(format!("{frame} {}{tail}", parts.join(" · ")))
    }

    /// Redraws the status row (at a terminal): called every tick while a turn runs, and once when it ends.
    pub(super) fn show_status(&mut self, running: bool) {
        let Some(screen) = &self.screen else { return };
        self.tick = self.tick.wrapping_add(1);
        screen.set_status(if running { self.status_row(self.tick) } else { None });
    }
}
