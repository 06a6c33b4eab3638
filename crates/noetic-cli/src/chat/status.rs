//! The chat's `/ledger` and `/status` reports.

use super::Chat;
use crate::output::render::{self, printable};

impl Chat {
    /// Prints the steering decisions of the finished turns and of the running one.
    pub(super) fn print_ledger(&mut self) {
        let mut entries = self.ledger.clone();
        if let Some(id) = self.execution {
            entries.extend(self.steering.ledger(id));
        }
        entries.extend(self.allowed.iter().cloned());
        if entries.is_empty() {
            return self.say("steering ledger: empty (no tool call or model answer has been checked yet)");
        }
        self.say(&self.style.bold(&format!("steering ledger ({} entries):", entries.len())));
        let how = "`noetic ledger --verbose` on a --ledger-out file";
        for line in crate::ledger::view(&self.style, &entries, false, how) {
            self.say(&line);
        }
    }

    /// Prints how long the turn and its running tools have run, and what is queued.
    pub(super) fn print_status(&mut self, running: bool) {
        let status = self.status_text(running);
        self.say(&status);
    }

    /// The `/status` text: what runs and for how long, what is queued, and what this chat is (model, provider,
    /// rules, workspace, session, steering mode).
    pub(super) fn status_text(&self, running: bool) -> String {
        let mut status = match self.turn_started.filter(|_| running) {
            Some(started) => {
                let mut status = format!("turn running for {:.1} s", started.elapsed().as_secs_f64());
                for (call_id, (tool, since)) in &self.tools {
                    let (tool, call_id) = (printable(tool), printable(call_id));
                    status
                        .push_str(&format!("; {tool} [{call_id}] running for {:.1} s", since.elapsed().as_secs_f64()));
                }
                status
            }
            None if running => "a turn is starting".to_owned(),
            None => "idle: type a message to start a turn".to_owned(),
        };
        let queued = self.session.queued();
        status.push_str(&format!("; {queued} steering message(s) queued"));
        status.push_str(&format!("; steering mode {}", self.session.steering_mode().as_str()));
        status.push_str(&format!("; session {}", printable(self.session.key())));
        if let Some(meter) = self.context_meter() {
            status.push_str(&format!("; context {meter} (the last model call's input and output)"));
        }
        if !self.about.is_empty() {
            status.push_str(&format!("; {}", self.about));
        }
        status
    }
}

impl Chat {
    /// `/compact`: everything before the last turn is replaced, in what later requests send, by a summary.
    pub(super) async fn compact(&mut self) {
        let Some(model) = self.model.as_ref().map(|choice| choice.current()) else {
            return self.say("this chat's model is not known here: nothing was compacted");
        };
        match self.session.compact(&model).await {
            Ok(Some(done)) => {
                let line = format!(
                    "compacted: {} older message(s) summarised ({} → {} tokens); the conversation keeps them all",
                    done.folded,
                    render::tokens_short(done.tokens_before),
                    render::tokens_short(done.tokens_after)
                );
                self.say(&self.style.cyan(&line));
            }
            Ok(None) => self.say("nothing to compact: the conversation has no turn before the last one"),
            Err(e) => self.say(&self.style.red(&format!("could not compact: {}", render::printable(&e.to_string())))),
        }
    }

    /// `/clear`: goes on in a new session (the current one stays as it is, and can be continued); returns the
    /// new session's events.
    pub(super) async fn clear(
        &mut self,
        runtime: &noetic::agent::Runtime,
    ) -> Result<noetic::EventReceiver, noetic::NoeticError> {
        let old = printable(self.session.key());
        let name = crate::sessions::new_name("chat");
        self.session = runtime.open(&name).await?;
        self.context_tokens = None;
        self.context_window = None;
        self.turn_usage = noetic::model::Usage::default();
        let note = if self.stored {
            format!("new session {}; the previous one stays: noetic chat --session {old}", printable(&name))
        } else {
            format!("new session {} (the previous conversation is gone: --no-store)", printable(&name))
        };
        self.say(&self.style.dim(&note));
        self.prompt(false);
        Ok(self.session.subscribe())
    }
}
