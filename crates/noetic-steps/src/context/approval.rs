//! Approval of tool calls that need it: a service the context carries, implemented by whoever decides (a
//! terminal prompt, an HTTP endpoint, a policy). Re-exported by the tool module, where it is used.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;

/// A tool call waiting for a decision.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    /// The tool's name.
    pub tool: String,
    /// The call id.
    pub call_id: String,
    /// The validated arguments (written by the model: untrusted, escape them wherever they are shown).
    pub arguments: Value,
    /// The session whose turn made the call (`None` outside a session turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The SHA-256 of the canonical JSON of `arguments` ([`crate::digest::json_sha256`]): what an approval is
    /// bound to. A decision given for one hash never covers arguments with another.
    pub arguments_sha256: String,
}

impl ApprovalRequest {
    /// A request for a call of `tool` with `arguments`, hashed.
    ///
    /// ```
    /// use noetic::tool::ApprovalRequest;
    /// use serde_json::json;
    ///
    /// let a = ApprovalRequest::new("run_command", "c1", json!({"command": "cargo test", "cwd": "."}), None);
    /// let b = ApprovalRequest::new("run_command", "c2", json!({"cwd": ".", "command": "cargo test"}), None);
    /// assert_eq!(a.arguments_sha256, b.arguments_sha256, "key order does not matter");
    /// ```
    pub fn new(tool: impl Into<String>, call_id: impl Into<String>, arguments: Value, session: Option<String>) -> Self {
        let arguments_sha256 = crate::digest::json_sha256(&arguments);
        ApprovalRequest { tool: tool.into(), call_id: call_id.into(), arguments, session, arguments_sha256 }
    }
}

/// An approver's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call.
    Approve,
    /// Do not run it; the reason is shown to the model.
    Reject {
        /// Why.
        reason: String,
    },
}

/// Decides on calls of tools with `needs_approval`. The call waits (cancellably) for the answer.
pub trait Approver: Send + Sync + 'static {
    /// Approve or reject one call.
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval>;
}

/// An approver from an async function.
pub struct FnApprover<F>(pub F);

impl<F, Fut> Approver for FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Approval> + Send + 'static,
{
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        Box::pin((self.0)(request))
    }
}
