//! Workflow files for `noetic run`: an agent defined in TOML (or JSON, by extension).
//!
//! ```toml
//! instructions = "You keep the workspace tidy."
//! model = "openai/gpt-4o-mini"   # or "scripted" (answers from [scripted], no network)
//! provider = "openai"            # default: anthropic for anthropic/… and claude… ids, else openai
//! base_url = "http://localhost:11434/v1"
//! tools = ["read_file", "list_dir"]  # default: every built-in tool
//! workspace = "."                # relative to this file
//! rules_file = "rules.toml"      # relative to this file; [[rule]] tables may be written here too
//! max_rounds = 8                 # model → tools rounds within the llm step
//! max_iterations = 4             # iterations of the agent loop
//! steering_mode = "one-at-a-time"
//! timeout = 120                  # seconds: the provider's request timeout and idle limit
//!
//! [budget.turn]                  # limits over those of noetic.toml's [budget] (see crate::config::budget)
//! tool_calls = 20
//!
//! [[scripted.response]]
//! tool_calls = [{ name = "list_dir", args = { path = "." } }]
//! [[scripted.response]]
//! text = "The workspace holds one file."
//! ```
//!
//! A scripted model answers the agent's requests with `[[scripted.response]]` entries in order, and judge
//! requests of LLM-judged rules with `scripted.judge` replies in order (`"ALLOW"` once they run out). One script
//! serves the whole process, whatever the session; with `scripted.per_conversation = true` each conversation
//! follows the script from its start (a conversation holding n model answers gets the script's answer n + 1), so
//! every session of `noetic serve` plays it through.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::NoeticError;
use noetic::agent::SteeringMode;
use noetic::model::{Item, Model, ModelResponse, Role, ScriptedModel, ToolCall};
use noetic::steering::ANSWER_FORMAT;
use serde::Deserialize;
use serde_json::Value;

use crate::agent::mcp::McpServerToml;
use crate::config::source::{Seg, Source, SourceError};
use crate::provider::{self, Provider};
use crate::rules::{self, RuleDef, RuleSet};

/// The model id that selects the scripted model.
pub const SCRIPTED: &str = "scripted";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowFile {
    instructions: Option<String>,
    model: Option<String>,
    provider: Option<Provider>,
    base_url: Option<String>,
    tools: Option<Vec<String>>,
    #[serde(default)]
    rule: Vec<RuleDef>,
    rules_file: Option<PathBuf>,
    max_rounds: Option<u32>,
    max_iterations: Option<u32>,
    steering_mode: Option<SteeringMode>,
    #[serde(default, deserialize_with = "crate::config::source::number_or_text")]
    timeout: Option<String>,
    workspace: Option<PathBuf>,
    scripted: Option<ScriptedDef>,
    #[serde(default)]
    mcp_server: Vec<McpServerToml>,
    budget: Option<crate::config::budget::BudgetToml>,
    /// What the agent does (the A2A agent card's description).
    description: Option<String>,
    #[serde(default)]
    skill: Vec<crate::agent::a2a::SkillToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedDef {
    #[serde(default)]
    response: Vec<ScriptedResponse>,
    #[serde(default)]
    judge: Vec<String>,
    #[serde(default)]
    per_conversation: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedResponse {
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    args: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// A loaded, checked workflow.
pub struct Workflow {
    /// System instructions.
    pub instructions: Option<String>,
    /// The model id.
    pub model: String,
    /// The provider, when the file names one.
    pub provider: Option<Provider>,
    /// The provider's base URL, when the file names one.
    pub base_url: Option<String>,
    /// The built-in tools to offer (`None`: all).
    pub tools: Option<Vec<String>>,
    /// Rules from `rules_file` and the inline `[[rule]]` tables.
    pub rules: RuleSet,
    /// Model → tools rounds within the llm step.
    pub max_rounds: Option<u32>,
    /// Iterations of the agent loop.
    pub max_iterations: Option<u32>,
    /// The steering queue's mode.
    pub steering_mode: Option<SteeringMode>,
    /// The provider's request timeout and idle limit.
    pub timeout: Option<Duration>,
    /// The workspace, resolved against the file's folder.
    pub workspace: Option<PathBuf>,
    /// MCP servers whose tools join the agent's (added to those of noetic.toml).
    pub mcp_servers: Vec<McpServerToml>,
    /// The workflow's budget (its limits over those of noetic.toml's `[budget]`).
    pub budget: noetic::budget::Budget,
    /// What the agent does, for the A2A agent card (`description`).
    pub description: Option<String>,
    /// The skills the A2A agent card lists (`[[skill]]` tables).
    pub skills: Vec<crate::agent::a2a::SkillToml>,
    scripted: Option<ScriptedDef>,
}

/// Reads and checks a workflow file; its rules may name the tools of its own `[[mcp_server]]` tables and of
/// `config_servers` (noetic.toml's) and of `a2a_agents`, checked when they start (see [`crate::agent::mcp::start`]).
pub fn load(
    path: &Path,
    config_servers: &[McpServerToml],
    a2a_agents: &[crate::agent::a2a::A2aAgentToml],
) -> Result<Workflow, SourceError> {
    let source = Source::read(path)?;
    let file: WorkflowFile = source.parse()?;
    for (i, server) in file.mcp_server.iter().enumerate() {
        server.config().map_err(|e| source.error_at(&[Seg::Key("mcp_server"), Seg::Index(i)], e))?;
    }
    let names = crate::agent::a2a::tool_names(config_servers.iter().chain(&file.mcp_server), a2a_agents);
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut rules = RuleSet::default();
    if let Some(rules_file) = &file.rules_file {
        let rules_path = dir.join(rules_file);
        rules = rules::load(&Source::read(&rules_path)?, &names)?;
    }
    let inline = rules::compile(&source, file.rule, &names)?;
    rules.extend(inline).map_err(|e| source.error_at(&[Seg::Key("rule")], e))?;
    if let Some(names) = &file.tools
        && let Some(bad) = names.iter().find(|n| !crate::agent::tools::BUILT_IN.contains(&n.as_str()))
    {
        return Err(source.error_at(
            &[Seg::Key("tools")],
            format!("there is no built-in tool '{bad}'; choose from {}", crate::agent::tools::BUILT_IN.join(", ")),
        ));
    }
    let timeout = file
        .timeout
        .as_deref()
        .map(crate::config::duration::parse_timeout)
        .transpose()
        .map_err(|e| source.error_at(&[Seg::Key("timeout")], e))?;
    let budget = match &file.budget {
        Some(table) => table.check(&source, &[Seg::Key("budget")])?,
        None => noetic::budget::Budget::default(),
    };
    let model = file.model.unwrap_or_else(|| provider::model_id(None));
    if model == SCRIPTED {
        let responses = file.scripted.as_ref().map_or(0, |s| s.response.len());
        if responses == 0 {
            return Err(source.error_at(
                &[Seg::Key("model")],
                "model = \"scripted\" needs responses: add [[scripted.response]] tables with text or tool_calls",
            ));
        }
    }
    if let Some(scripted) = &file.scripted
        && let Some(i) = scripted.response.iter().position(|r| r.text.is_none() && r.tool_calls.is_empty())
    {
        return Err(source.error_at(
            &[Seg::Key("scripted"), Seg::Key("response"), Seg::Index(i)],
            "a scripted response needs text, tool_calls or both",
        ));
    }
    if let Some((i, message)) = crate::agent::a2a::check_skills(&file.skill) {
        return Err(source.error_at(&[Seg::Key("skill"), Seg::Index(i)], message));
    }
    Ok(Workflow {
        instructions: file.instructions,
        model,
        provider: file.provider,
        base_url: file.base_url,
        tools: file.tools,
        rules,
        max_rounds: file.max_rounds,
        max_iterations: file.max_iterations,
        steering_mode: file.steering_mode,
        timeout,
        workspace: file.workspace.map(|w| dir.join(w)),
        mcp_servers: file.mcp_server,
        budget,
        description: file.description,
        skills: file.skill,
        scripted: file.scripted,
    })
}

impl Workflow {
    /// The model client: the scripted model for `model = "scripted"`, else the provider's with `timeout`.
    pub fn model_client(&self, base_url_flag: Option<&str>, timeout: Duration) -> Result<Arc<dyn Model>, String> {
        if self.model == SCRIPTED {
            return Ok(Arc::new(scripted_model(self.scripted.as_ref())));
        }
        let provider = self.provider.unwrap_or_else(|| Provider::guess(&self.model));
        provider::build(provider, base_url_flag.or(self.base_url.as_deref()), timeout)
    }
}

fn response(def: &ScriptedResponse, number: usize) -> ModelResponse {
    let calls: Vec<Item> = def
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Item::ToolCall(ToolCall {
                id: c.id.clone().unwrap_or_else(|| format!("call-{number}-{}", i + 1)).into(),
                name: c.name.as_str().into(),
                arguments: c.args.to_string().into(),
            })
        })
        .collect();
    let mut items = Vec::new();
    if let Some(text) = &def.text {
        items.push(Item::assistant(text.clone()));
    }
    items.extend(calls);
    ModelResponse { items, ..ModelResponse::default() }
}

/// How many answers the model gave in `history`: each run of assistant messages and tool calls is one.
fn answers_so_far(history: &[Item]) -> usize {
    let mut answers = 0;
    let mut in_answer = false;
    for item in history {
        let from_model = matches!(item, Item::ToolCall(_)) || item.role() == Some(Role::Assistant);
        if from_model && !in_answer {
            answers += 1;
        }
        in_answer = from_model;
    }
    answers
}

/// A model answering agent requests from the script and judge requests (prompts ending with the judge's answer
/// format) from the judge replies: in order for the whole process, or (`per_conversation`) by how far each
/// conversation has come.
fn scripted_model(def: Option<&ScriptedDef>) -> ScriptedModel {
    let responses: Vec<ModelResponse> =
        def.map(|d| d.response.iter().enumerate().map(|(i, r)| response(r, i + 1)).collect()).unwrap_or_default();
    let per_conversation = def.is_some_and(|d| d.per_conversation);
    let judge: VecDeque<String> = def.map(|d| d.judge.iter().cloned().collect()).unwrap_or_default();
    let state = Mutex::new((VecDeque::from(responses.clone()), judge));
    ScriptedModel::responder(move |request| {
        let mut state = state.lock().map_err(|e| NoeticError::other(e.to_string()))?;
        let prompt = request.history.last().and_then(Item::text).unwrap_or("");
        if prompt.ends_with(ANSWER_FORMAT) {
            return Ok(ModelResponse::text(state.1.pop_front().unwrap_or_else(|| "ALLOW".to_owned())));
        }
        if per_conversation {
            let answered = answers_so_far(request.history.as_slice());
            return responses.get(answered).cloned().ok_or_else(|| {
                NoeticError::other(format!(
                    "this conversation has used all {} scripted response(s); add [[scripted.response]] tables to \
                     the workflow, or start another session",
                    responses.len()
                ))
            });
        }
        state.0.pop_front().ok_or_else(|| {
            NoeticError::other(
                "the scripted model has no more responses; add [[scripted.response]] tables to the workflow",
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_holding_n_answers_is_at_answer_n_plus_one_of_the_script() {
        let call = |id: &str| Item::ToolCall(ToolCall { id: id.into(), name: "t".into(), arguments: "{}".into() });
        let result = |id: &str| Item::ToolResult(noetic::model::ToolResult::ok(id, "ok"));
        assert_eq!(answers_so_far(&[]), 0);
        assert_eq!(answers_so_far(&[Item::user("go")]), 0);
        let history = [
            Item::user("go"),
            Item::assistant("running"),
            call("c1"),
            call("c2"),
            result("c1"),
            result("c2"),
            Item::user("steer"),
            call("w1"),
            result("w1"),
        ];
        assert_eq!(answers_so_far(&history), 2, "text and calls of one answer count once");
        let mut next = history.to_vec();
        next.extend([Item::assistant("done"), Item::user("again")]);
        assert_eq!(answers_so_far(&next), 3);
    }
}
