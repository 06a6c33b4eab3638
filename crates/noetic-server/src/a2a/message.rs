//! The messages an A2A client sends (`SendMessageRequest`), as far as this server reads them: the text, the
//! context (a session key), the task it answers or steers, whether to wait for the task, and — for a task that
//! waits for approval — the decision the reply gives.

use serde_json::Value;

use super::rpc::RpcError;

/// A `SendMessageRequest`, read.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// The message's text (its text parts, joined).
    pub(crate) text: String,
    /// Its data parts.
    pub(crate) data: Vec<Value>,
    pub(crate) context_id: Option<String>,
    pub(crate) task_id: Option<String>,
    /// `configuration.returnImmediately`: answer with the task as it is, without waiting for it.
    pub(crate) return_immediately: bool,
}

/// What a reply to an input-required task decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) approved: bool,
    pub(crate) reason: Option<String>,
    /// The one call it answers (all the task waits on when `None`).
    pub(crate) call_id: Option<String>,
}

fn text_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl Incoming {
    /// Reads the `params` of `SendMessage` / `SendStreamingMessage`.
    pub(crate) fn parse(params: &Value, max_chars: usize) -> Result<Incoming, RpcError> {
        let message = params.get("message").filter(|m| m.is_object()).ok_or_else(|| {
            RpcError::invalid_params("missing_message", "SendMessage needs params.message (an A2A Message)")
        })?;
        if message.get("role").and_then(Value::as_str).is_some_and(|r| r != "ROLE_USER") {
            return Err(RpcError::invalid_params("invalid_role", "a message sent to the agent has role ROLE_USER"));
        }
        let parts = message.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let mut text = String::new();
        let mut data = Vec::new();
        for part in parts {
            if let Some(t) = part.get("text").and_then(Value::as_str) {
                text.push_str(t);
            } else if let Some(d) = part.get("data") {
                data.push(d.clone());
            } else {
                return Err(RpcError::content_type(
                    "this agent reads text and data parts only; send the content as text".to_owned(),
                ));
            }
        }
        if text.chars().count() > max_chars {
            return Err(RpcError::invalid_params(
                "message_too_long",
                format!("a message may have at most {max_chars} characters; send a shorter one"),
            ));
        }
        let return_immediately = params
            .get("configuration")
            .and_then(|c| c.get("returnImmediately"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Incoming {
            text,
            data,
            context_id: text_field(message, "contextId").map(str::to_owned),
            task_id: text_field(message, "taskId").map(str::to_owned),
            return_immediately,
        })
    }

    /// The text, refused when empty.
    pub(crate) fn said(&self) -> Result<&str, RpcError> {
        if self.text.trim().is_empty() {
            return Err(RpcError::invalid_params("empty_message", "the message has no text; send some text"));
        }
        Ok(&self.text)
    }

    /// The decision a reply to an input-required task gives: a data part `{"approved": bool, "reason"?,
    /// "callId"?}`, or the text `approve` (`approved`, `yes`) or `reject` (`no`), optionally followed by `:` and
    /// the reason.
    pub(crate) fn decision(&self) -> Result<Decision, RpcError> {
        if let Some(data) = self.data.iter().find(|d| d.get("approved").is_some()) {
            let approved = data
                .get("approved")
                .and_then(Value::as_bool)
                .ok_or_else(|| RpcError::invalid_params("invalid_decision", "approved must be true or false"))?;
            return Ok(Decision {
                approved,
                reason: text_field(data, "reason").map(str::to_owned),
                call_id: text_field(data, "callId").map(str::to_owned),
            });
        }
        let text = self.text.trim();
        let (word, reason) = match text.split_once(':') {
            Some((word, reason)) => (word.trim(), Some(reason.trim()).filter(|r| !r.is_empty())),
            None => (text, None),
        };
        let approved = match word.to_ascii_lowercase().as_str() {
            "approve" | "approved" | "yes" => true,
            "reject" | "rejected" | "no" => false,
            _ => {
                return Err(RpcError::invalid_params(
                    "decision_expected",
                    "this task waits for approval: reply 'approve' or 'reject: <why>', or send a data part \
                     {\"approved\": true|false, \"reason\"?: \"…\"}",
                ));
            }
        };
        Ok(Decision { approved, reason: reason.map(str::to_owned), call_id: None })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn incoming(parts: Value) -> Incoming {
        let params = json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": parts } });
        Incoming::parse(&params, 100).unwrap_or_else(|e| unreachable!("{e:?}"))
    }

    #[test]
    fn a_reply_approves_or_rejects_by_word_or_data_part_and_anything_else_says_what_to_send() {
        let decide = |parts: Value| incoming(parts).decision().map_err(|e| e.reason);
        assert_eq!(
            decide(json!([{ "text": "Approve" }])),
            Ok(Decision { approved: true, reason: None, call_id: None })
        );
        assert_eq!(
            decide(json!([{ "text": "reject: not on main" }])),
            Ok(Decision { approved: false, reason: Some("not on main".into()), call_id: None })
        );
        assert_eq!(
            decide(json!([{ "data": { "approved": false, "reason": "no", "callId": "c1" } }])),
            Ok(Decision { approved: false, reason: Some("no".into()), call_id: Some("c1".into()) })
        );
        assert_eq!(decide(json!([{ "text": "maybe later" }])), Err("decision_expected"));
    }

    #[test]
    fn a_file_part_or_an_overlong_text_is_refused() {
        let params = json!({ "message": { "role": "ROLE_USER", "parts": [{ "url": "https://x/y.png" }] } });
        assert_eq!(Incoming::parse(&params, 100).map(|_| ()).map_err(|e| e.code), Err(-32005));
        let params = json!({ "message": { "role": "ROLE_USER", "parts": [{ "text": "abcdef" }] } });
        assert_eq!(Incoming::parse(&params, 5).map(|_| ()).map_err(|e| e.reason), Err("message_too_long"));
    }
}
