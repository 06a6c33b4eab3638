//! The chat at a terminal: keys from the [`Screen`](crate::output::screen::Screen)'s input line, echoed lines, and the prompt saying what a
//! typed line will do.

use super::{Action, Chat};
use crate::output::screen::Input;

impl Chat {
    /// Handles what was typed at the input line. A line is echoed as the user's, then handled as a piped line
    /// would be; Esc and the first Ctrl-C stop a running turn (as `/stop` does); at an idle prompt Ctrl-C clears
    /// the line, twice in a row quits, and so does Ctrl-D.
    pub(super) async fn on_input(&mut self, input: Input, running: bool) -> Action {
        let armed = std::mem::take(&mut self.interrupt_armed);
        match input {
            Input::Line(line) => {
                let text = line.trim();
                if !text.is_empty() {
                    let echo = self.style.cyan(&format!("you   {}", crate::output::render::printable(text)));
                    self.say(&echo);
                }
                self.on_line(&line, running).await
            }
            Input::Escape | Input::Interrupt if running => self.on_line("/stop", running).await,
            Input::Escape => Action::Nothing,
            Input::Interrupt if self.screen.as_ref().is_some_and(|s| s.has_input()) => {
                if let Some(screen) = &self.screen {
                    screen.clear_input();
                }
                Action::Nothing
            }
            Input::Interrupt if armed => self.on_line("/quit", running).await,
            Input::Interrupt => {
                self.interrupt_armed = true;
                self.say(&self.style.dim("press Ctrl-C again (or Ctrl-D) to quit"));
                Action::Nothing
            }
            Input::Eof => self.on_line("/quit", running).await,
        }
    }

    /// Sets the prompt for what a typed line does now: answer a question, steer the running turn, or start one.
    pub(super) fn show_prompt(&self, running: bool) {
        let Some(screen) = &self.screen else { return };
        let open_question = self.approvals.iter().any(|p| !p.reply.is_closed());
        screen.set_prompt(if open_question {
            "answer y/n/a or type what to do instead> "
        } else if running {
            "steer (Esc stops)> "
        } else {
            "> "
        });
    }
}
