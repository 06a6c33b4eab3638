//! The chat's approval questions: asked one at a time, answered by a typed line.

use super::Chat;
use crate::agent::approve::{self, Pending};

impl Chat {
    /// Queues a question, showing it when no other is open; declines at once when nobody is left to answer, and
    /// approves at once a call an "always" answer covers (see [`crate::agent::remembered`]).
    pub(super) fn ask(&mut self, pending: Pending) {
        if let Some(allow) = self.always.configured_covering(&pending.request) {
            return self.approve_configured(pending, &allow);
        }
        if !self.terminal {
            let _ = pending.reply.send(approve::no_terminal(&pending.request));
            return;
        }
        if self.input_closed || self.quitting {
            let _ = pending.reply.send(approve::declined());
            return;
        }
        if let Some(grant) = self.always.covering(&pending.request) {
            return self.approve_always(pending, &grant);
        }
        self.question_asked(&pending.request.call_id);
        if self.approvals.is_empty() {
            self.show_question(&pending);
        }
        self.approvals.push_back(pending);
    }

    fn approve_always(&mut self, pending: Pending, grant: &str) {
        let note = format!("approved without asking: you allowed {grant} in this chat");
        self.say(&self.style.dim(&note));
        self.question_answered(&pending.request.call_id);
        let _ = pending.reply.send(noetic::tool::Approval::Approve);
    }

    /// Approves a call an `[[allow]]` of noetic.toml covers, and keeps the decision in the ledger.
    fn approve_configured(&mut self, pending: Pending, allow: &str) {
        self.say(&self.style.dim(&format!("approved without asking: noetic.toml allows {allow}")));
        let entry = crate::agent::remembered::allowed_entry(&pending.request, allow);
        self.session.record_decision(&entry);
        self.allowed.push(entry);
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
        for pending in std::mem::take(&mut self.approvals) {
            self.question_answered(&pending.request.call_id);
            let _ = pending.reply.send(approve::declined());
        }
    }

    /// Answers the oldest open question with a typed line (see [`approve::decide_call`]), then shows the next one.
    pub(super) async fn answer_question(&mut self, text: &str) {
        let Some(pending) = self.approvals.pop_front() else { return };
        if let approve::Answer::Message(_) = approve::answer(text) {
            self.say(
                &self.style.dim("not y, n or a: the call is rejected and your line goes to the agent as a message"),
            );
        }
        let decided = approve::decide_call(text, &pending.request, Some(&self.session), &mut self.always).await;
        let decision = decided.unwrap_or_else(|(decision, why)| {
            self.say(&self.style.red(&why));
            decision
        });
        self.question_answered(&pending.request.call_id);
        let _ = pending.reply.send(decision);
        // Questions an "always" answer now covers need no answer.
        let waiting: Vec<Pending> = self.approvals.drain(..).collect();
        for pending in waiting {
            match self.always.covering(&pending.request) {
                Some(grant) => self.approve_always(pending, &grant),
                None => self.approvals.push_back(pending),
            }
        }
        if let Some(next) = self.approvals.pop_front() {
            self.show_question(&next);
            self.approvals.push_front(next);
        }
    }
}
