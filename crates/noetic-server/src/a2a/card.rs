//! The A2A agent card (`GET /.well-known/agent-card.json`): who the agent is, where its JSON-RPC endpoint is, its
//! skills, the bearer scheme when the server has a token, and the steering extension.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::STEERING_EXTENSION;
use crate::config::{AgentSkill, ServerConfig};

/// The card, for a client that reached the server at `headers`' `Host` (the host check has vetted it).
pub(crate) fn card(config: &ServerConfig, headers: &HeaderMap) -> Value {
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let scheme = match headers.get("x-forwarded-proto").and_then(|h| h.to_str().ok()) {
        Some("https") => "https",
        _ => "http",
    };
    let description = if config.agent_description.is_empty() {
        format!(
            "The noetic agent '{}': send it a task in plain text; it answers and may use its tools.",
            config.agent_name
        )
    } else {
        config.agent_description.clone()
    };
    let skills: Vec<Value> = if config.skills.is_empty() {
        vec![skill(&AgentSkill {
            id: "chat".into(),
            name: config.agent_name.clone(),
            description: description.clone(),
            tags: vec!["chat".into()],
            examples: Vec::new(),
        })]
    } else {
        config.skills.iter().map(skill).collect()
    };
    let mut card = json!({
        "name": config.agent_name,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{
            "url": format!("{scheme}://{host}/a2a"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extensions": [{
                "uri": STEERING_EXTENSION,
                "description": "A message to a working task steers it: it reaches the agent at its next checkpoint \
                    (between tool calls), which may skip the calls it planned. The answer's metadata.noetic.routed \
                    says 'steered' and carries the queued message's id; the task's stream reports \
                    steering_queued and steering_injected status updates.",
                "required": false,
            }],
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    });
    if config.token.is_some()
        && let Value::Object(fields) = &mut card
    {
        fields.insert(
            "securitySchemes".into(),
            json!({ "bearer": { "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "the server's access token (noetic serve --token / NOETIC_SERVER_TOKEN)",
            }}}),
        );
        fields.insert("securityRequirements".into(), json!([{ "schemes": { "bearer": { "list": [] } } }]));
    }
    card
}

fn skill(skill: &AgentSkill) -> Value {
    let mut value = json!({
        "id": skill.id,
        "name": skill.name,
        "description": skill.description,
        "tags": skill.tags,
        "inputModes": ["text/plain"],
        "outputModes": ["text/plain"],
    });
    if let (false, Value::Object(fields)) = (skill.examples.is_empty(), &mut value) {
        fields.insert("examples".into(), json!(skill.examples));
    }
    value
}
