//! The agent's events as the chat prints them, and the end of a turn.

use tokio::time::Instant;

use noetic::{Event, EventKind, NoeticError};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::{Chat, TurnFuture};
use crate::output::out;
use crate::output::render::{event_line, printable};

/// A turn's token use, as the turn's last line ends with it, and its cost when the provider reported one.
fn tokens(usage: &noetic::model::Usage) -> String {
    let cached = if usage.cached_tokens > 0 { format!(" ({} cached)", usage.cached_tokens) } else { String::new() };
    let cost = usage.cost.map(|cost| format!(", {}", dollars(cost))).unwrap_or_default();
    format!("{} tokens in{cached}, {} out{cost}", usage.input_tokens, usage.output_tokens)
}

/// US dollars with two significant digits past the leading zeros (a call costs fractions of a cent): `$1.50`,
/// `$0.0012`, `$0.0000093`.
fn dollars(cost: f64) -> String {
    let leading_zeros = if cost > 0.0 && cost < 1.0 { (-cost.log10()).floor() as usize } else { 0 };
    format!("${cost:.*}", (leading_zeros + 2).clamp(2, 10))
}

impl Chat {
    /// Prints an event: streamed text as it comes, other events as lines (tool calls with their time, the
    /// turn's end with its tokens).
    pub(super) fn on_event(&mut self, event: Result<Event, RecvError>) {
        let event = match event {
            Ok(event) => event,
            Err(RecvError::Lagged(n)) => return self.say(&self.style.dim(&format!("({n} events not shown)"))),
            Err(RecvError::Closed) => return,
        };
        match &event.kind {
            EventKind::ModelTextDelta { text, .. } => {
                match &self.screen {
                    // At a terminal the markdown is rendered as each line ends; the unfinished line shows as is.
                    Some(screen) => {
                        let done = self.markdown.push(text);
                        screen.stream_rendered(&done, &self.markdown.partial());
                    }
                    None => out!("{}", printable(text)),
                }
                self.mid_line = !text.ends_with('\n');
                self.streamed = true;
                return;
            }
            // The model's streamed text is a line of its own; notes about the user's messages may come while it
            // streams and go above it.
            EventKind::SteeringQueued { .. } | EventKind::SteeringRejected { .. } => {}
            _ => self.end_text(),
        }
        match &event.kind {
            EventKind::TurnStarted { .. } => {
                self.execution = Some(event.execution_id);
                self.turn_started.get_or_insert_with(Instant::now);
                self.turn_usage = noetic::model::Usage::default();
            }
            EventKind::ModelCallStarted { context_tokens, context_window, .. } => {
                self.streamed = false;
                self.model_call_started = Some(Instant::now());
                // The request as counted; the provider's usage replaces it when the call completes.
                if context_tokens.is_some() {
                    self.context_tokens = *context_tokens;
                }
                self.context_window = *context_window;
            }
            EventKind::ModelCallCompleted { usage, .. } => {
                self.turn_usage.add(usage);
                self.model_call_started = None;
                // What the model read and wrote this call is what the next call starts from.
                if let Some(used) = Some(usage.input_tokens + usage.output_tokens).filter(|n| *n > 0) {
                    self.context_tokens = Some(used);
                }
            }
            EventKind::ToolCallStarted { call_id, tool, .. } => {
                self.tools.insert(call_id.clone(), (tool.clone(), Instant::now()));
            }
            _ => {}
        }
        let Some(mut line) = event_line(&self.style, &event.kind) else {
            if let EventKind::ToolCallCompleted { call_id, .. } = &event.kind {
                self.tool_ended(call_id);
            }
            return;
        };
        if let EventKind::ToolCallCompleted { call_id, .. } = &event.kind
            && let Some(time) = self.tool_ended(call_id)
        {
            line.push_str(&self.style.dim(&format!(" ({} ms)", time.as_millis())));
        }
        if matches!(event.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. }) {
            line.push_str(&self.style.dim(&format!(" · {}", tokens(&self.turn_usage))));
            if let Some(meter) = self.context_meter() {
                line.push_str(&self.style.dim(&format!(" · context {meter}")));
            }
        }
        self.say(&line);
    }

    /// Ends the model's streamed text: at a terminal its unfinished line is rendered and printed, and an open
    /// code fence closed.
    pub(super) fn end_text(&mut self) {
        let Some(screen) = &self.screen else { return };
        let done = self.markdown.finish();
        if !done.is_empty() {
            screen.stream_rendered(&done, "");
        }
    }

    /// Runs what other processes queued for this idle session (`noetic sessions steer`), if anything.
    pub(super) async fn run_queued_elsewhere(&mut self) -> Option<TurnFuture> {
        match self.session.continue_session().await {
            Ok(Some(turn)) => {
                let line = self.style.dim("a message another process queued for this session: running it");
                self.say(&line);
                Some(turn.into_future())
            }
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "not running messages queued elsewhere");
                None
            }
        }
    }

    /// Prints what is left of the turn's events and its answer, saves its ledger, and starts a continuation when
    /// messages arrived after the turn's last checkpoint.
    pub(super) async fn on_turn_end(
        &mut self,
        result: Result<String, NoeticError>,
        events: &mut noetic::EventReceiver,
    ) -> Option<TurnFuture> {
        loop {
            match events.try_recv() {
                Ok(event) => self.on_event(Ok(event)),
                Err(TryRecvError::Lagged(n)) => self.on_event(Err(RecvError::Lagged(n))),
                Err(_) => break,
            }
        }
        self.end_text();
        if let Ok(answer) = &result
            && !self.streamed
            && !answer.is_empty()
        {
            let shown = match self.screen {
                Some(_) => crate::output::render::markdown::render(self.style, answer),
                None => printable(answer),
            };
            self.say(&shown);
        }
        if let Some(id) = self.execution.take() {
            let mut entries = self.steering.ledger(id);
            entries.append(&mut self.allowed);
            if let Some(file) = &mut self.ledger_out
                && let Err(e) = file.flush(&self.session)
            {
                self.say(&self.style.red(&e));
            }
            self.ledger.extend(entries);
        }
        if let Some(before) = self.resuming.take() {
            self.say_interrupted(before);
        }
        self.turn_started = None;
        self.model_call_started = None;
        self.tools.clear();
        self.waits.clear();
        self.show_status(false);
        if self.session.queued() > 0
            && let Ok(Some(turn)) = self.session.continue_session().await
        {
            return Some(turn.into_future());
        }
        self.prompt(false);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_shown_to_two_significant_digits_and_only_when_reported() {
        let shown: Vec<String> = [1.5, 0.5, 0.00123, 0.0000093, 0.0].into_iter().map(dollars).collect();
        assert_eq!(shown, ["$1.50", "$0.50", "$0.0012", "$0.0000093", "$0.00"]);
        let usage = noetic::model::Usage { input_tokens: 10, output_tokens: 5, cached_tokens: 0, cost: None };
        assert_eq!(tokens(&usage), "10 tokens in, 5 out");
        assert_eq!(tokens(&noetic::model::Usage { cost: Some(0.00123), ..usage }), "10 tokens in, 5 out, $0.0012");
    }
}
