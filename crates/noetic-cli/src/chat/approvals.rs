//! The chat's approval questions: asked one at a time, answered by a typed line.

use super::Chat;
use crate::approve::{self, Pending};

impl Chat {
    /// Queues a question, showing it when no other is open; declines at once when nobody is left to answer, and
    /// approves at once a tool the user answered "always" for.
    pub(super) fn ask(&mut self, pending: Pending) {
        if self.input_closed || self.quitting {
            let _ = pending.reply.send(approve::declined());
            return;
        }
        if self.always.contains(&pending.request.tool) {
            return self.approve_always(pending);
        }
        if self.approvals.is_empty() {
            self.show_question(&pending);
        }
        self.approvals.push_back(pending);
    }

    fn approve_always(&mut self, pending: Pending) {
        let tool = crate::render::visible(&pending.request.tool);
        let note = format!("approved without asking: you answered always for {tool} in this chat");
        self.say(&self.style.dim(&note));
        let _ = pending.reply.send(noetic::tool::Approval::Approve);
    }

    /// Shows a question: what the call would change (a `write_file` diff), then the question itself.
    fn show_question(&mut self, pending: &Pending) {
        if let Some(preview) = self.workspace.as_ref().and_then(|ws| approve::preview(&pending.request, ws)) {
            let lines: Vec<String> = preview.lines().map(|line| self.diff_line(line)).collect();
            self.say(&lines.join("\n"));
        }
        let question = approve::question(&pending.request);
        self.say(&self.style.yellow(&question));
    }

    /// A diff line coloured as diffs are: additions green, removals red, hunk headers cyan.
    fn diff_line(&self, line: &str) -> String {
        if line.starts_with("+++") || line.starts_with("---") {
            self.style.bold(line)
        } else if line.starts_with('+') {
            self.style.green(line)
        } else if line.starts_with('-') {
            self.style.red(line)
        } else if line.starts_with("@@") {
            self.style.cyan(line)
        } else {
            line.to_owned()
        }
    }

    /// Declines every call waiting for an answer (nobody is left to give one).
    pub(super) fn reject_waiting(&mut self) {
        for pending in self.approvals.drain(..) {
            let _ = pending.reply.send(approve::declined());
        }
    }

    /// Answers the oldest open question with a typed line (see [`approve::decide`]), then shows the next one.
    pub(super) async fn answer_question(&mut self, text: &str) {
        let Some(pending) = self.approvals.pop_front() else { return };
        match approve::answer(text) {
            approve::Answer::Message(_) => self.say(
                &self.style.dim("not y, n or a: the call is rejected and your line goes to the agent as a message"),
            ),
            approve::Answer::Always => {
                self.always.insert(pending.request.tool.clone());
            }
            _ => {}
        }
        let decision = approve::decide(text, Some(&self.session)).await.unwrap_or_else(|(decision, why)| {
            self.say(&self.style.red(&why));
            decision
        });
        let _ = pending.reply.send(decision);
        // Questions of a tool now always allowed need no answer.
        let (allowed, waiting): (Vec<Pending>, Vec<Pending>) =
            self.approvals.drain(..).partition(|p| self.always.contains(&p.request.tool));
        self.approvals = waiting.into();
        for pending in allowed {
            self.approve_always(pending);
        }
        if let Some(next) = self.approvals.pop_front() {
            self.show_question(&next);
            self.approvals.push_front(next);
        }
    }
}
