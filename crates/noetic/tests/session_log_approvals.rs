//! Approvals in the session log (#30, #31): a call that waits for a person's decision is logged with the hash of its
//! arguments before anyone is asked, and the decision after; the projection lists the calls still waiting, so a
//! session opened elsewhere (another worker, after a restart) knows what waits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::log::{Entry, LogStore, MemoryLogStore, Projection};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::tool::{Approval, ApprovalRequest, FnApprover};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

fn delete_tool() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::builder("delete", "Deletes a file.")
            .needs_approval(true)
            .handler(|_, _| async { Ok(json!("deleted")) })
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn an_approval_is_logged_with_its_arguments_hash_while_it_waits_and_its_decision_after() {
    let store = MemoryLogStore::new();
    let (asked_tx, mut asked) = mpsc::unbounded_channel::<(ApprovalRequest, oneshot::Sender<Approval>)>();
    let approver = FnApprover(move |request: ApprovalRequest| {
        let (answer, decision) = oneshot::channel();
        let _ = asked_tx.send((request, answer));
        async move { decision.await.unwrap_or(Approval::Reject { reason: "gone".into() }) }
    });
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "delete", json!({"path": "/tmp/x"}))]),
        ModelResponse::tool_calls([("c2", "delete", json!({"path": "/etc/hosts"}))]),
        ModelResponse::text("done"),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tool(delete_tool())
        .approver(Arc::new(approver))
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    let turn = runtime.open("s").await.unwrap().send("clean up").await.unwrap();

    let (first, answer) = asked.recv().await.unwrap();
    // While it waits, the log says so: a session opened elsewhere lists the call with what it is bound to.
    let mut waiting = Vec::new();
    for _ in 0..10_000 {
        waiting = Projection::load(&store, "s").await.unwrap().approvals;
        if !waiting.is_empty() {
            break;
        }
        // The log's writer runs on its own task.
        tokio::task::yield_now().await;
    }
    assert_eq!(waiting.len(), 1);
    assert_eq!((waiting[0].call_id.as_str(), waiting[0].tool.as_str()), ("c1", "delete"));
    assert_eq!(waiting[0].arguments_sha256.as_deref(), Some(first.arguments_sha256.as_str()));
    answer.send(Approval::Approve).unwrap();

    let (_, answer) = asked.recv().await.unwrap();
    answer.send(Approval::Reject { reason: "not /etc".into() }).unwrap();
    assert_eq!(turn.await.unwrap(), "done");

    let records = store.read("s", 0, usize::MAX).await.unwrap();
    let approvals: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::ApprovalAsked { call_id, .. } => Some(format!("asked {call_id}")),
            Entry::ApprovalDecided { call_id, approved, reason, .. } => {
                Some(format!("decided {call_id} {approved} {}", reason.as_deref().unwrap_or("-")))
            }
            _ => None,
        })
        .collect();
    assert_eq!(approvals, ["asked c1", "decided c1 true -", "asked c2", "decided c2 false not /etc"]);
    assert!(Projection::load(&store, "s").await.unwrap().approvals.is_empty(), "nothing waits once decided");
}
