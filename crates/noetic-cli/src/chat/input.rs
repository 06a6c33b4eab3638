//! What the chat does with a typed line: answer the open approval question, run a command, or send a message
//! (steered into the running turn, or the start of a new one).

use std::future::IntoFuture;
use tokio::time::Instant;

use noetic::agent::SteeringMode;

use super::{Action, Chat, HELP, TurnFuture};
use crate::agent::approve;
use crate::output::render;

impl Chat {
    /// Routes a typed line: an answer to the open approval question, a command, or a message.
    pub(super) async fn on_line(&mut self, line: &str, running: bool) -> Action {
        let text = line.trim();
        // Questions of calls that ended meanwhile (their turn failed or was stopped) are no longer open.
        self.approvals.retain(|pending| !pending.reply.is_closed());
        if !self.approvals.is_empty() && !text.starts_with('/') {
            self.answer_question(text).await;
            return Action::Nothing;
        }
        if text.is_empty() {
            self.prompt(running);
            return Action::Nothing;
        }
        let (command, rest) = text.split_once(' ').map_or((text, ""), |(c, r)| (c, r.trim()));
        // Counted before a resumed turn can add its own: the chat names only the calls it interrupted.
        let interrupted_before =
            if command == "/resume" { super::resume::interrupted(&self.session.history()).len() } else { 0 };
        match command {
            "/quit" | "/exit" => {
                if running {
                    self.session.stop("the user quit").await;
                    self.say(&self.style.dim("stopping the running turn, then quitting"));
                }
                return Action::Quit;
            }
            "/stop" => {
                // Cancel first, so no later call of the batch starts once the waiting ones are declined.
                let (dropped, was_running) = self.session.stop("stopped by the user").await;
                self.reject_waiting();
                let note = match (was_running, dropped) {
                    (false, 0) => "no turn is running".to_owned(),
                    (false, n) => format!("dropped {n} queued message(s)"),
                    (true, n) => format!("stopping the turn (dropped {n} queued message(s))"),
                };
                self.say(&self.style.dim(&note));
            }
            "/mode" => match rest {
                "" => self.say(&format!("steering mode: {}", self.session.steering_mode().as_str())),
                "all" | "one-at-a-time" => {
                    self.session
                        .set_steering_mode(if rest == "all" { SteeringMode::All } else { SteeringMode::OneAtATime })
                        .await;
                    self.say(&self.style.dim(&format!("steering mode: {rest}")));
                }
                other => self.say(&format!("unknown mode '{other}'; use /mode all or /mode one-at-a-time")),
            },
            "/resume" if !running => match self.session.resume().await {
                Ok(Some(turn)) => {
                    self.turn_started = Some(Instant::now());
                    self.resuming = Some(interrupted_before);
                    return Action::Start(turn.into_future());
                }
                Ok(None) => self.say("there is no unfinished turn to resume"),
                Err(e) => self.say(&self.style.red(&e.to_string())),
            },
            "/discard" if !running => match self.session.discard_unfinished().await {
                Ok(true) => {
                    self.say(&self.style.dim("dropped the unfinished turn; its open tool calls are marked interrupted"))
                }
                Ok(false) => self.say("there is no unfinished turn"),
                Err(e) => self.say(&self.style.red(&e.to_string())),
            },
            "/model" if rest.is_empty() => match &self.model {
                Some(choice) => self.say(&format!("model: {}", render::printable(&choice.current()))),
                None => self.say("this chat's model cannot be switched"),
            },
            "/model" => match &self.model {
                Some(choice) => {
                    choice.choose(rest);
                    let note = format!("model: {} from the next model call on", render::printable(rest));
                    self.say(&self.style.dim(&note));
                }
                None => self.say("this chat's model cannot be switched"),
            },
            // Typed while the turn ends (its last line may show before it is over) or runs: after it.
            "/clear" if running => {
                self.clear_after_turn = true;
                self.say(&self.style.dim("a new session starts when the running turn ends (/stop ends it now)"));
            }
            "/clear" => return Action::Clear,
            "/ledger" => self.print_ledger(),
            "/rename" if rest.is_empty() => match self.session.title() {
                Some(title) => self.say(&format!("title: {}; /rename TITLE changes it", render::printable(&title))),
                None => self.say("this session has no title; /rename TITLE gives it one"),
            },
            // Allowed while a turn runs: the title is a fact any process may add to the log.
            "/rename" => match self.session.set_title(rest).await {
                Ok(()) => {
                    let title = self.session.title().unwrap_or_default();
                    let note = format!(
                        "session {} is now titled {}",
                        render::printable(self.session.key()),
                        render::printable(&title)
                    );
                    self.say(&self.style.dim(&note));
                }
                Err(e) => self.say(&self.style.red(&e.to_string())),
            },
            "/compact" if running => {
                self.say("a turn is running; /compact between turns (a turn compacts by itself when it must)")
            }
            "/compact" => self.compact().await,
            "/status" => self.print_status(running),
            "/budget" if rest.is_empty() => self.say(&crate::config::budget::describe(&self.session.budget())),
            "/budget" => match crate::config::budget::parse_command(&self.session.budget().budget, rest) {
                Err(e) => self.say(&self.style.red(&e)),
                // Set now; the running turn keeps the budget it started with, the next one has the new.
                Ok(budget) if running => match self.session.set_budget(budget).await {
                    Ok(()) => self.say(&self.style.dim("budget set; it holds from the next turn")),
                    Err(e) => self.say(&self.style.red(&e.to_string())),
                },
                Ok(budget) => match self.session.raise_budget(budget).await {
                    Ok(Some(turn)) => {
                        self.say(&self.style.dim("budget raised; the queued messages run now"));
                        self.turn_started = Some(Instant::now());
                        return Action::Start(turn.into_future());
                    }
                    Ok(None) => self.say(&crate::config::budget::describe(&self.session.budget())),
                    Err(e) => self.say(&self.style.red(&e.to_string())),
                },
            },
            "/help" => self.say(HELP),
            "/steer" if rest.is_empty() => self.say("/steer needs the text to send, e.g. /steer y"),
            "/steer" => {
                if let Some(turn) = self.message(rest, running).await {
                    return Action::Start(turn);
                }
            }
            _ if command.starts_with('/') => self.say(&format!("unknown command {command}; {HELP}")),
            // Most likely meant for a question about to appear: sent, "y" would reach the agent as a message.
            _ if running && approve::is_answer(text) => {
                let shown = render::printable(text);
                let note = format!(
                    "no approval question is waiting, so '{shown}' was not sent; to send it to the agent as a \
                     message, type /steer {shown}"
                );
                self.say(&self.style.yellow(&note));
            }
            _ => {
                if let Some(turn) = self.message(text, running).await {
                    return Action::Start(turn);
                }
            }
        }
        match self.approvals.front() {
            // A command typed at a question leaves it open: ask it again.
            Some(pending) => self.say(&self.style.yellow(&approve::question(&pending.request))),
            None => self.prompt(running),
        }
        Action::Nothing
    }

    /// Sends a message: steered into the running turn, or the start of a new one.
    async fn message(&mut self, text: &str, running: bool) -> Option<TurnFuture> {
        if running {
            if let Err(e) = self.session.steer(text).await {
                self.say(&self.style.red(&format!("not steered: {e}")));
            }
            return None;
        }
        match self.session.send(text).await {
            Ok(turn) => {
                self.turn_started = Some(Instant::now());
                Some(turn.into_future())
            }
            Err(e) => {
                self.say(&self.style.red(&e.to_string()));
                None
            }
        }
    }
}
