//! The chat's approval questions: asked one at a time, answered by a typed line.

use super::Chat;
use crate::approve::{self, Pending};

impl Chat {
    /// Queues a question, showing it when no other is open; declines at once when nobody is left to answer.
    pub(super) fn ask(&mut self, pending: Pending) {
        if self.input_closed || self.quitting {
            let _ = pending.reply.send(approve::declined());
            return;
        }
        if self.approvals.is_empty() {
            let question = approve::question(&pending.request);
            self.say(&self.style.yellow(&question));
        }
        self.approvals.push_back(pending);
    }

    /// Declines every call waiting for an answer (nobody is left to give one).
    pub(super) fn reject_waiting(&mut self) {
        for pending in self.approvals.drain(..) {
            let _ = pending.reply.send(approve::declined());
        }
    }

    /// Answers the oldest open question with a typed line (see [`approve::decide`]), then shows the next one.
    pub(super) fn answer_question(&mut self, text: &str) {
        let Some(pending) = self.approvals.pop_front() else { return };
        if let approve::Answer::Message(_) = approve::answer(text) {
            self.say(&self.style.dim("not y or n: the call is rejected and your line goes to the agent as a message"));
        }
        let decision = approve::decide(text, Some(&self.session)).unwrap_or_else(|(decision, why)| {
            self.say(&self.style.red(&why));
            decision
        });
        let _ = pending.reply.send(decision);
        if let Some(next) = self.approvals.front() {
            let question = approve::question(&next.request);
            self.say(&self.style.yellow(&question));
        }
    }
}
