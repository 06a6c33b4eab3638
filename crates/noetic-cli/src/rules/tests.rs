//! Tests of the rules file: each kind, scoping, and mistakes reported where they are written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::layer::{Gates, ToolCallAction, ToolCallParams};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::{HookContext, StepContext};
use noetic::steering::{HookParams, SteeringConfig, SteeringDecision, SteeringLayer, steering};
use serde_json::{Value, json};

use super::*;

fn rules(text: &str) -> Result<RuleSet, String> {
    load(&Source::toml("rules.toml", text), &ToolNames::built_in()).map_err(|e| e.to_string())
}

fn workspace() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    (dir, ws)
}

fn decide(rule: &SteeringRule, tool: &str, args: Value) -> SteeringDecision {
    let params = HookParams::BeforeToolCall(ToolCallParams { call_id: "c1", name: tool, args: &args });
    (rule.predicate.as_ref().unwrap())(&params)
}

fn action(rule: &SteeringRule, tool: &str, args: Value) -> SteeringAction {
    decide(rule, tool, args).action
}

#[test]
fn each_programmatic_kind_decides_on_tool_calls() {
    let (_dir, ws) = workspace();
    let set = rules(
        "[[rule]]\nid = \"no-rm\"\ndeny_tool = \"delete_file\"\n\n\
         [[rule]]\nid = \"no-etc\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"etc/**\" }\n\n\
         [[rule]]\nid = \"no-sudo\"\naction = \"guide\"\nguidance = \"no sudo\"\n\
         deny_arg = { tool = \"run_command\", arg = \"command\", regex = \"^sudo\\\\b\" }\n\n\
         [[rule]]\nid = \"ask-write\"\nrequire_approval = \"write_file\"\n",
    )
    .unwrap();
    let steering = set.steering_rules("m", &ws);
    assert_eq!(steering.len(), 3);
    assert_eq!(action(&steering[0], "delete_file", json!({})), SteeringAction::Deny);
    assert_eq!(action(&steering[0], "read_file", json!({})), SteeringAction::Allow);
    assert_eq!(action(&steering[1], "read_file", json!({"path": "etc/ssh/sshd_config"})), SteeringAction::Deny);
    assert_eq!(action(&steering[1], "read_file", json!({"path": "notes/etc"})), SteeringAction::Allow);
    assert_eq!(action(&steering[2], "run_command", json!({"command": "sudo ls"})), SteeringAction::Guide);
    assert_eq!(set.approval_tools().into_iter().collect::<Vec<_>>(), vec!["write_file".to_owned()]);
}

#[test]
fn globs_keep_single_stars_within_a_folder_and_double_stars_cross_folders() {
    let (_dir, ws) = workspace();
    let set = rules(
        "[[rule]]\nid = \"env\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"**/.env\" }\n\n\
         [[rule]]\nid = \"top\"\ndeny_arg = { tool = \"write_file\", arg = \"path\", glob = \"*.lock\" }\n",
    )
    .unwrap();
    let steering = set.steering_rules("m", &ws);
    let read = |p: &str| action(&steering[0], "read_file", json!({ "path": p }));
    let write = |p: &str| action(&steering[1], "write_file", json!({ "path": p }));
    assert_eq!(read(".env"), SteeringAction::Deny);
    assert_eq!(read("app/config/.env"), SteeringAction::Deny);
    assert_eq!(read("app/.envrc"), SteeringAction::Allow);
    assert_eq!(read("./app/x/../.env"), SteeringAction::Deny);
    assert_eq!(write("Cargo.lock"), SteeringAction::Deny);
    assert_eq!(write("sub/Cargo.lock"), SteeringAction::Allow);
    assert_eq!(write("./sub/../Cargo.lock"), SteeringAction::Deny);
}

#[cfg(unix)]
#[test]
fn path_rules_match_the_resolved_workspace_relative_path() {
    let (dir, ws) = workspace();
    std::fs::write(dir.path().join("README.md"), "r").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", dir.path().join("sub/link-to-root")).unwrap();
    std::os::unix::fs::symlink("README.md", dir.path().join("readme-link")).unwrap();
    let set = rules(
        "[[rule]]\nid = \"keep\"\naction = \"guide\"\nguidance = \"keep it\"\n\
         deny_arg = { tool = \"delete_file\", arg = \"path\", glob = \"README*\" }\n\n\
         [[rule]]\nid = \"no-list-root\"\ndeny_arg = { tool = \"list_dir\", arg = \"path\", glob = \".\" }\n",
    )
    .unwrap();
    let steering = set.steering_rules("m", &ws);
    let delete = |p: &str| action(&steering[0], "delete_file", json!({ "path": p }));
    let absolute = dir.path().join("README.md");
    assert_eq!(delete(absolute.to_str().unwrap()), SteeringAction::Guide);
    assert_eq!(delete("sub/link-to-root/README.md"), SteeringAction::Guide);
    // Deleting the link removes the link, not README.md: the rule sees the link's own path.
    assert_eq!(delete("readme-link"), SteeringAction::Allow);
    assert_eq!(delete("sub/readme"), SteeringAction::Allow);
    // list_dir without a path lists the root, as the tool does.
    assert_eq!(action(&steering[1], "list_dir", json!({})), SteeringAction::Deny);
    assert_eq!(action(&steering[1], "list_dir", json!({"path": "sub/link-to-root"})), SteeringAction::Deny);
    assert_eq!(action(&steering[1], "list_dir", json!({"path": "sub"})), SteeringAction::Allow);
}

#[test]
fn a_path_the_rule_cannot_resolve_is_denied_even_by_a_guiding_rule() {
    let (_dir, ws) = workspace();
    let set = rules(
        "[[rule]]\nid = \"keep\"\naction = \"guide\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"x\" }\n",
    )
    .unwrap();
    let rule = &set.steering_rules("m", &ws)[0];
    let decision = decide(rule, "read_file", json!({"path": "../../etc/passwd"}));
    assert_eq!(decision.action, SteeringAction::Deny);
    assert_eq!(
        decision.guidance.as_deref(),
        Some(
            "rule 'keep' cannot check this read_file call, so it is refused: the path '../../etc/passwd' is outside \
             the workspace; use a path relative to the workspace root (no '..' climbing out of it, no absolute \
             paths elsewhere)"
        )
    );
    assert_eq!(action(rule, "read_file", json!({"path": 7})), SteeringAction::Deny, "not a path: cannot check");
}

#[test]
fn llm_rules_default_their_judge_to_the_agents_model() {
    let (_dir, ws) = workspace();
    let set = rules("[[rule]]\nid = \"j\"\nprompt = \"Be nice.\"\nmode = \"async\"\non_failure = \"deny\"\napplies_to = [\"after_model_call\"]\n").unwrap();
    let rule = &set.steering_rules("local-model", &ws)[0];
    let eval = rule.llm_eval.as_ref().unwrap();
    assert_eq!((eval.mode, eval.model_id(), eval.on_failure), (LlmMode::Async, "local-model", FailurePolicy::Deny));
    assert_eq!(rule.applies_to, vec![Hook::AfterModelCall]);
    assert_eq!(rule.tools, None);
}

#[tokio::test]
async fn an_llm_rule_scoped_to_tools_never_asks_the_judge_about_other_tools() {
    let (_dir, ws) = workspace();
    let set =
        rules("[[rule]]\nid = \"net\"\nprompt = \"No network.\"\non_failure = \"deny\"\ntools = [\"run_command\"]\n")
            .unwrap();
    let layer = steering(SteeringConfig::new(set.steering_rules("judge", &ws))).unwrap();
    let judge = ScriptedModel::new([ModelResponse::text("DENY: curl reaches the network")]);
    let ctx = StepContext::builder().model(Arc::new(judge.clone())).build();
    let ctx = ctx.hooks();
    async fn call(layer: &SteeringLayer, ctx: &HookContext<'_>, name: &str, args: Value) -> ToolCallAction {
        layer.before_tool_call(ctx, ToolCallParams { call_id: "c1", name, args: &args }).await.unwrap()
    }
    assert_eq!(call(&layer, &ctx, "list_dir", json!({"path": "."})).await, ToolCallAction::Allow);
    assert_eq!(call(&layer, &ctx, "read_file", json!({"path": "a"})).await, ToolCallAction::Allow);
    assert_eq!(judge.calls(), 0, "no judge call for tools outside the rule's scope");
    let denied = call(&layer, &ctx, "run_command", json!({"command": "curl x"})).await;
    assert!(matches!(denied, ToolCallAction::Deny(_)), "{denied:?}");
    assert_eq!(judge.calls(), 1);
}

#[test]
fn scoping_mistakes_name_the_valid_tools_and_hooks() {
    let tools = "the tools are read_file, write_file, list_dir, delete_file, run_command";
    let cases = [
        (
            "[[rule]]\nid = \"a\"\nprompt = \"p\"\ntools = [\"list_dir\", \"lsit_dir\"]\n",
            format!("rules.toml:4:22: rule 'a': there is no tool 'lsit_dir'; {tools}"),
        ),
        (
            "[[rule]]\nid = \"a\"\nprompt = \"p\"\ntools = []\n",
            "rules.toml:4:1: rule 'a': tools is empty; list the tools whose calls the judge looks at, or remove \
             tools to judge every call"
                .to_owned(),
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"run_command\"\ntools = [\"list_dir\"]\n",
            "rules.toml:4:1: rule 'a': deny_tool already names its tool; tools scopes LLM-judged rules (those with \
             a prompt)"
                .to_owned(),
        ),
        (
            "[[rule]]\nid = \"a\"\nprompt = \"p\"\napplies_to = [\"before_tool_cal\"]\n",
            "rules.toml:4:15: unknown variant `before_tool_cal`, expected `before_tool_call` or `after_model_call`"
                .to_owned(),
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"read_file\", arg = \"pth\", glob = \"x\" }\n",
            "rules.toml:3:34: rule 'a': read_file has no argument 'pth'; its arguments are path, offset".to_owned(),
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"/etc/**\" }\n",
            "rules.toml:3:1: rule 'a': the glob \"/etc/**\" starts with '/', but rules see read_file's path relative \
             to the workspace (such as \"notes/today.md\"), so it would never match; write it relative"
                .to_owned(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(rules(text).unwrap_err(), expected, "{text:?}");
    }
}

#[test]
fn mistakes_are_reported_with_line_and_column() {
    let cases = [
        ("[[rule]]\nid = \"a\"\ndeny_tol = \"x\"\n", "rules.toml:3:1: unknown field `deny_tol`"),
        ("[[rule]]\nid = \"a\"\ndeny_tool = \n", "rules.toml:3:"),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"list_dir\"\n[[rule]]\nid = \"b\"\ndeny_arg = { tool = \"run_command\", arg = \"command\", regex = \"(\" }\n",
            "rules.toml:6:1: rule 'b': the regex \"(\" is invalid",
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"a[\" }\n",
            "rules.toml:3:1: rule 'a': the glob",
        ),
        ("[[rule]]\nid = \"a\"\n", "rules.toml:2:1: rule 'a': says nothing to check"),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"list_dir\"\nprompt = \"y\"\n",
            "rules.toml:4:1: rule 'a': has both deny_tool and prompt",
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"list_dir\"\n[[rule]]\nid = \"a\"\ndeny_tool = \"read_file\"\n",
            "rules.toml:5:1: two rules share the id 'a'",
        ),
        ("[[rule]]\nid = \"a\"\nprompt = \"y\"\nmode = \"sometimes\"\n", "rules.toml:4:8: unknown variant `sometimes`"),
        ("[[rule]]\ndeny_tool = \"x\"\n", "missing field `id`"),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"list_dir\"\nmode = \"sync\"\n",
            "rules.toml:4:1: rule 'a': mode applies to LLM-judged rules only",
        ),
    ];
    for (text, expected) in cases {
        let err = rules(text).unwrap_err();
        assert!(err.starts_with(expected) || err.contains(expected), "{text:?}: got {err:?}, want {expected:?}");
    }
}

/// A tool set standing for what MCP servers list: tools named `names`, each taking a `path` argument.
fn offered(names: &[&str]) -> noetic::tool::ToolSet {
    let tools = names.iter().map(|name| {
        let tool = noetic::tool::FnTool::builder(*name, "a server's tool")
            .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
            .handler(|_, _| async { Ok(Value::Null) })
            .build()
            .unwrap();
        Arc::new(tool) as Arc<dyn noetic::tool::Tool>
    });
    noetic::tool::ToolSet::new(tools).unwrap()
}

fn with_servers(text: &str, servers: &[&str]) -> Result<RuleSet, String> {
    load(&Source::toml("rules.toml", text), &ToolNames::with_servers(servers.iter().copied()))
        .map_err(|e| e.to_string())
}

const MCP_RULES: &str = "[[rule]]\nid = \"no-danger\"\ndeny_tool = \"bad__danger\"\n\n\
                         [[rule]]\nid = \"ask-write\"\nrequire_approval = \"bad__write\"\n\n\
                         [[rule]]\nid = \"judge\"\nprompt = \"p\"\ntools = [\"read_file\", \"bad__fetch\"]\n\n\
                         [[rule]]\nid = \"no-etc\"\n\
                         deny_arg = { tool = \"bad__read\", arg = \"path\", glob = \"etc/**\" }\n";

#[test]
fn a_rule_naming_a_tool_of_a_configured_mcp_server_is_accepted_until_the_servers_list_their_tools() {
    let set = with_servers(MCP_RULES, &["bad"]).unwrap();
    assert!(set.names_mcp_tools());
    assert_eq!(set.approval_tools().into_iter().collect::<Vec<_>>(), ["bad__write"]);
    let all = offered(&["bad__danger", "bad__write", "bad__fetch", "bad__read"]);
    assert_eq!(set.check_mcp_tools(std::slice::from_ref(&all)), Ok(()));
    let (_dir, ws) = workspace();
    let steering = set.steering_rules("m", &ws);
    assert_eq!(action(&steering[0], "bad__danger", json!({})), SteeringAction::Deny);
    assert_eq!(action(&steering[2], "bad__read", json!({"path": "etc/passwd"})), SteeringAction::Deny);
    assert_eq!(action(&steering[2], "bad__read", json!({"path": "notes"})), SteeringAction::Allow);
}

#[test]
fn an_mcp_tool_the_server_does_not_list_is_an_error_at_the_rule_naming_the_servers_tools() {
    let set = with_servers(MCP_RULES, &["bad"]).unwrap();
    let listed = offered(&["bad__danger", "bad__write", "bad__fecth", "bad__read"]);
    let err = set.check_mcp_tools(std::slice::from_ref(&listed)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rules.toml:12:23: rule 'judge': there is no tool 'bad__fetch': MCP server 'bad' offers bad__danger, \
         bad__write, bad__fecth, bad__read"
    );
    let missing: Vec<String> = set.missing_mcp_tools(&[offered(&[])]).into_iter().map(|m| m.tool).collect();
    assert_eq!(missing, ["bad__danger", "bad__write", "bad__fetch", "bad__read"]);
    let first = set.check_mcp_tools(&[offered(&[])]).unwrap_err().to_string();
    assert_eq!(
        first,
        "rules.toml:3:1: rule 'no-danger': there is no tool 'bad__danger': MCP server 'bad' offers no tools"
    );
    let err = with_servers(
        "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"bad__read\", arg = \"pth\", glob = \"x\" }\n",
        &["bad"],
    )
    .unwrap()
    .check_mcp_tools(&[offered(&["bad__read"])])
    .unwrap_err();
    assert_eq!(err.to_string(), "rules.toml:3:14: rule 'a': bad__read has no argument 'pth'; its arguments are path");
}

#[test]
fn a_tool_named_with_a_prefix_no_configured_server_has_is_an_error_at_once_naming_the_valid_ones() {
    let err = with_servers("[[rule]]\nid = \"a\"\ndeny_tool = \"bda__danger\"\n", &["bad", "files"]).unwrap_err();
    assert_eq!(
        err,
        "rules.toml:3:1: rule 'a': there is no tool 'bda__danger'; the tools are read_file, write_file, list_dir, \
         delete_file, run_command, and those of the configured MCP servers: bad__<tool>, files__<tool>"
    );
    let err = rules("[[rule]]\nid = \"a\"\ndeny_tool = \"bad__danger\"\n").unwrap_err();
    assert!(
        err.ends_with(
            "there is no tool 'bad__danger'; the tools are read_file, write_file, list_dir, delete_file, run_command"
        ),
        "{err}"
    );
    assert!(with_servers("[[rule]]\nid = \"a\"\ndeny_tool = \"bad__\"\n", &["bad"]).is_err(), "a prefix alone");
    let any = load(&Source::toml("r.toml", "[[rule]]\nid = \"a\"\ndeny_tool = \"x__y\"\n"), &ToolNames::any_server());
    assert!(any.is_ok(), "the rules command takes an MCP tool's name on trust: {any:?}");
}

#[test]
fn shadow_mode_and_escalate_after_reach_the_steering_rules() {
    let (_dir, ws) = workspace();
    let set = rules(
        "[[rule]]\nid = \"trial\"\nmode = \"shadow\"\ndeny_tool = \"delete_file\"\n\n\
         [[rule]]\nid = \"judged\"\nprompt = \"p\"\nmode = \"shadow\"\nescalate_after = 3\n\n\
         [[rule]]\nid = \"live\"\nmode = \"live\"\nprompt = \"p\"\n",
    )
    .unwrap();
    let steering = set.steering_rules("m", &ws);
    let seen: Vec<(bool, Option<u32>)> = steering.iter().map(|r| (r.is_shadow(), r.escalate_after)).collect();
    assert_eq!(seen, [(true, None), (true, Some(3)), (false, None)]);
    assert_eq!(steering[1].llm_eval.as_ref().unwrap().mode, LlmMode::Sync, "a shadow judge is awaited");
}
