//! Approving tool calls at the terminal (`run_command`, and tools a `require_approval` rule names).

use std::io::{BufRead, IsTerminal};
use std::sync::Arc;

use noetic::tool::{Approval, ApprovalRequest, Approver, FnApprover};
use tokio::sync::{mpsc, oneshot};

use crate::output::err;

/// A call waiting for the user's answer, and where the answer goes.
pub struct Pending {
    /// The call.
    pub request: ApprovalRequest,
    /// Receives the decision.
    pub reply: oneshot::Sender<Approval>,
}

/// The question shown to the user.
pub fn question(request: &ApprovalRequest) -> String {
    let what = match request.arguments.get("command").and_then(|c| c.as_str()) {
        Some(command) if request.tool == "run_command" => format!("run `{command}`"),
        _ => format!("call {} with {}", request.tool, request.arguments),
    };
    format!("approve: {what}? [y/N] ")
}

/// The decision a typed line means: `y`/`yes` approve, anything else rejects.
pub fn answer(line: &str) -> Approval {
    if matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Approval::Approve
    } else {
        Approval::Reject { reason: "the user declined it at the terminal; ask what to do instead".to_owned() }
    }
}

/// Rejects every call: there is no terminal to ask.
pub fn without_terminal() -> Arc<dyn Approver> {
    Arc::new(FnApprover(|request: ApprovalRequest| async move {
        Approval::Reject {
            reason: format!(
                "'{}' needs the user's approval and stdin is not a terminal, so nobody can approve it; do without it",
                request.tool
            ),
        }
    }))
}

/// Sends each call to `tx` (the chat loop asks the user) and waits for the answer.
pub fn via_channel(tx: mpsc::UnboundedSender<Pending>) -> Arc<dyn Approver> {
    Arc::new(FnApprover(move |request: ApprovalRequest| {
        let tx = tx.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            if tx.send(Pending { request, reply }).is_err() {
                return Approval::Reject { reason: "the terminal is gone; nobody can approve the call".to_owned() };
            }
            answer.await.unwrap_or(Approval::Reject { reason: "the question was dropped unanswered".to_owned() })
        }
    }))
}

/// Asks on the terminal (stderr for the question, a line of stdin for the answer); rejects without a terminal.
pub fn at_terminal() -> Arc<dyn Approver> {
    if !std::io::stdin().is_terminal() {
        return without_terminal();
    }
    Arc::new(FnApprover(|request: ApprovalRequest| async move {
        let asked = tokio::task::spawn_blocking(move || {
            err!("{}", question(&request));
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| answer(&line))
        })
        .await;
        match asked {
            Ok(Ok(decision)) => decision,
            _ => Approval::Reject { reason: "the terminal could not be read".to_owned() },
        }
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    #[test]
    fn yes_approves_and_anything_else_rejects() {
        assert_eq!(answer(" Y\n"), Approval::Approve);
        assert_eq!(answer("yes"), Approval::Approve);
        assert!(matches!(answer("n"), Approval::Reject { .. }));
        assert!(matches!(answer(""), Approval::Reject { .. }));
    }

    #[test]
    fn the_question_shows_the_command() {
        let request = ApprovalRequest {
            tool: "run_command".into(),
            call_id: "c1".into(),
            arguments: json!({"command": "cargo test"}),
        };
        assert_eq!(question(&request), "approve: run `cargo test`? [y/N] ");
    }

    #[tokio::test]
    async fn a_channel_approver_waits_for_the_answer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let approver = via_channel(tx);
        let request = ApprovalRequest { tool: "t".into(), call_id: "c".into(), arguments: json!({}) };
        let decision = tokio::spawn(approver.approve(request));
        let Some(pending) = rx.recv().await else { panic!("no question") };
        let _ = pending.reply.send(Approval::Approve);
        assert_eq!(decision.await.ok(), Some(Approval::Approve));
    }
}
