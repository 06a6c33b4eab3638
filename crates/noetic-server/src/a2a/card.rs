//! The A2A agent card (`GET /.well-known/agent-card.json`): who the agent is, where its JSON-RPC endpoint is, its
//! skills, the bearer scheme when the server has a token, and the steering extension.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::STEERING_EXTENSION;
use crate::config::{AgentSkill, ServerConfig};

/// A2A 1.0's `AgentCard`, as far as this server fills it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AgentCard {
    name: String,
    description: String,
    /// This server's version.
    version: &'static str,
    supported_interfaces: Vec<Interface>,
    capabilities: Capabilities,
    default_input_modes: Vec<&'static str>,
    default_output_modes: Vec<&'static str>,
    skills: Vec<Skill>,
    /// With an access token: the bearer scheme (`bearer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    security_schemes: Option<BTreeMap<&'static str, SecurityScheme>>,
    /// With an access token: `[{"schemes": {"bearer": {"list": []}}}]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    security_requirements: Option<serde_json::Value>,
}

/// Where the JSON-RPC endpoint is.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentInterface)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Interface {
    url: String,
    /// `JSONRPC`.
    protocol_binding: &'static str,
    /// `1.0`.
    protocol_version: &'static str,
}

/// What the agent can do beyond plain messages.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentCapabilities)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Capabilities {
    streaming: bool,
    push_notifications: bool,
    extensions: Vec<Extension>,
}

/// A protocol extension the agent speaks.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentExtension)]
#[serde(deny_unknown_fields)]
struct Extension {
    uri: &'static str,
    description: &'static str,
    required: bool,
}

/// A skill callers may ask for.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentSkill)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Skill {
    id: String,
    name: String,
    description: String,
    tags: Vec<String>,
    input_modes: Vec<&'static str>,
    output_modes: Vec<&'static str>,
    /// Example requests (absent when the skill has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    examples: Vec<String>,
}

/// A security scheme of the card.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentSecurityScheme)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SecurityScheme {
    http_auth_security_scheme: HttpAuth,
}

/// HTTP authentication.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentHttpAuth)]
#[serde(deny_unknown_fields)]
struct HttpAuth {
    /// `Bearer`.
    scheme: &'static str,
    description: &'static str,
}

/// The card, for a client that reached the server at `headers`' `Host` (the host check has vetted it).
pub(crate) fn card(config: &ServerConfig, headers: &HeaderMap) -> AgentCard {
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
    let skills: Vec<Skill> = if config.skills.is_empty() {
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
    let bearer = config.token.is_some();
    AgentCard {
        name: config.agent_name.clone(),
        description,
        version: env!("CARGO_PKG_VERSION"),
        supported_interfaces: vec![Interface {
            url: format!("{scheme}://{host}/a2a"),
            protocol_binding: "JSONRPC",
            protocol_version: "1.0",
        }],
        capabilities: Capabilities {
            streaming: true,
            push_notifications: false,
            extensions: vec![Extension {
                uri: STEERING_EXTENSION,
                description: "A message to a working task steers it: it reaches the agent at its next checkpoint \
                    (between tool calls), which may skip the calls it planned. The answer's metadata.noetic.routed \
                    says 'steered' and carries the queued message's id; the task's stream reports \
                    steering_queued and steering_injected status updates.",
                required: false,
            }],
        },
        default_input_modes: vec!["text/plain", "application/json"],
        default_output_modes: vec!["text/plain", "application/json"],
        skills,
        security_schemes: bearer.then(|| {
            let auth = HttpAuth {
                scheme: "Bearer",
                description: "the server's access token (noetic serve --token / NOETIC_SERVER_TOKEN)",
            };
            BTreeMap::from([("bearer", SecurityScheme { http_auth_security_scheme: auth })])
        }),
        security_requirements: bearer.then(|| serde_json::json!([{ "schemes": { "bearer": { "list": [] } } }])),
    }
}

fn skill(skill: &AgentSkill) -> Skill {
    Skill {
        id: skill.id.clone(),
        name: skill.name.clone(),
        description: skill.description.clone(),
        tags: skill.tags.clone(),
        input_modes: vec!["text/plain"],
        output_modes: vec!["text/plain"],
        examples: skill.examples.clone(),
    }
}
