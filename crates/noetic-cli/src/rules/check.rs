//! Checking one `[[rule]]` table: exactly one kind, keys that fit it, tools and arguments that exist.

use globset::GlobBuilder;
use noetic::layer::Hook;
use noetic::steering::{LlmMode, SteeringAction};
use regex::Regex;

use super::mcp::{McpName, ToolNames};
use super::rewrite::Rewriter;
use super::steer::Matcher;
use super::{Kind, ModeDef, RewriteArgDef, Rule, RuleDef};
use crate::agent::tools;
use crate::config::source::{Seg, Source, SourceError};

/// Checks rule number `index` of `source` against the tools a rule may name (`known`).
pub(super) fn check(source: &Source, index: usize, def: RuleDef, known: &ToolNames) -> Result<Rule, SourceError> {
    let id = def.id.clone();
    let err_at = |path: &[Seg<'_>], message: String| {
        let mut full = vec![Seg::Key("rule"), Seg::Index(index)];
        full.extend_from_slice(path);
        source.error_at(&full, format!("rule '{id}': {message}"))
    };
    let err = |key: &'static str, message: String| err_at(&[Seg::Key(key)], message);
    // A typo in a tool's name would switch the rule off: a name must be one of the tools there are. A tool of an
    // MCP server is only known once the server lists it: its name is kept with its place, to check then.
    let mut mcp_names = Vec::new();
    let mut tool_exists = |path: &[Seg<'_>], tool: &str, arg: Option<&str>| match known.check(tool) {
        Ok(false) => Ok(()),
        Ok(true) => {
            let mut full = vec![Seg::Key("rule"), Seg::Index(index)];
            full.extend_from_slice(path);
            let place = source.error_at(&full, String::new());
            mcp_names.push(McpName { tool: tool.to_owned(), arg: arg.map(str::to_owned), place });
            Ok(())
        }
        Err(message) => Err(err_at(path, message)),
    };
    let kinds: Vec<&'static str> = [
        ("deny_tool", def.deny_tool.is_some()),
        ("deny_arg", def.deny_arg.is_some()),
        ("rewrite_arg", def.rewrite_arg.is_some()),
        ("require_approval", def.require_approval.is_some()),
        ("prompt", def.prompt.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, present)| present.then_some(k))
    .collect();
    let one_kind = "a rule has exactly one of deny_tool, deny_arg, rewrite_arg, require_approval (programmatic) or \
                    prompt (LLM-judged)";
    let kind_key = match kinds.as_slice() {
        [] => return Err(err("id", format!("says nothing to check; {one_kind}"))),
        [only] => *only,
        [first, second, ..] => return Err(err(second, format!("has both {first} and {second}; {one_kind}"))),
    };
    let llm = def.prompt.is_some();
    let judge_mode = matches!(def.mode, Some(ModeDef::Sync | ModeDef::Async));
    for (key, present) in
        [("mode", judge_mode), ("model", def.model.is_some()), ("on_failure", def.on_failure.is_some())]
    {
        if present && !llm {
            return Err(err(key, format!("{key} applies to LLM-judged rules only (those with a prompt); remove it")));
        }
    }
    for (key, present) in [("action", def.action.is_some()), ("guidance", def.guidance.is_some())] {
        if present && llm {
            return Err(err(
                key,
                format!("{key} applies to programmatic rules only; the judge gives its own guidance"),
            ));
        }
    }
    let rewrites = def.rewrite_arg.is_some();
    let action = match def.action {
        Some(_) if rewrites => {
            return Err(err(
                "action",
                "a rewrite_arg rule rewrites the call instead of deciding on it; remove action (guidance, if given, \
                 is the reason the ledger keeps)"
                    .into(),
            ));
        }
        None | Some(SteeringAction::Deny) => SteeringAction::Deny,
        Some(SteeringAction::Guide) => SteeringAction::Guide,
        Some(SteeringAction::Allow) => {
            return Err(err("action", "action must be \"deny\" or \"guide\"; a rule that allows does nothing".into()));
        }
    };
    let applies_to = match def.applies_to {
        Some(hooks) if hooks.is_empty() => {
            return Err(err(
                "applies_to",
                "applies_to is empty; list \"before_tool_call\" and/or \"after_model_call\"".into(),
            ));
        }
        Some(_) if def.require_approval.is_some() => {
            return Err(err(
                "applies_to",
                "require_approval marks a tool as needing approval; it takes no applies_to".into(),
            ));
        }
        Some(hooks) if !llm && hooks != [Hook::BeforeToolCall] => {
            return Err(err(
                "applies_to",
                "programmatic rules look at tool calls; applies_to must be [\"before_tool_call\"]".into(),
            ));
        }
        Some(hooks) => hooks,
        None => vec![Hook::BeforeToolCall],
    };
    let tools = match def.tools {
        Some(_) if !llm => {
            return Err(err(
                "tools",
                format!("{kind_key} already names its tool; tools scopes LLM-judged rules (those with a prompt)"),
            ));
        }
        Some(list) if list.is_empty() => {
            return Err(err(
                "tools",
                "tools is empty; list the tools whose calls the judge looks at, or remove tools to judge every call"
                    .into(),
            ));
        }
        Some(list) => {
            for (i, tool) in list.iter().enumerate() {
                tool_exists(&[Seg::Key("tools"), Seg::Index(i)], tool, None)?;
            }
            Some(list)
        }
        None => None,
    };
    let non_empty = |key: &'static str, value: String, what: &str| {
        if value.trim().is_empty() { Err(err(key, format!("{key} is empty; give {what}"))) } else { Ok(value) }
    };
    let kind = if let Some(tool) = def.deny_tool {
        tool_exists(&[Seg::Key("deny_tool")], &tool, None)?;
        Kind::DenyTool { tool }
    } else if let Some(tool) = def.require_approval {
        tool_exists(&[Seg::Key("require_approval")], &tool, None)?;
        Kind::RequireApproval { tool }
    } else if let Some(def_arg) = def.rewrite_arg {
        Kind::RewriteArg(rewriter(def_arg, &mut tool_exists, &err_at)?)
    } else if let Some(def_arg) = def.deny_arg {
        let (tool, arg) = (def_arg.tool, def_arg.arg);
        tool_exists(&[Seg::Key("deny_arg"), Seg::Key("tool")], &tool, Some(&arg))?;
        // Built-in tools' arguments are known; a tool of an MCP server declares its own.
        if let Some(args) = tools::arguments(&tool)
            && !args.contains(&arg.as_str())
        {
            return Err(err_at(
                &[Seg::Key("deny_arg"), Seg::Key("arg")],
                format!("{tool} has no argument '{arg}'; its arguments are {}", args.join(", ")),
            ));
        }
        let path_arg = tools::is_path_argument(&tool, &arg);
        let matcher = match (def_arg.glob, def_arg.regex) {
            (Some(glob), None) => {
                if path_arg && glob.starts_with('/') {
                    return Err(err(
                        "deny_arg",
                        format!(
                            "the glob {glob:?} starts with '/', but rules see {tool}'s {arg} relative to the \
                             workspace (such as \"notes/today.md\"), so it would never match; write it relative"
                        ),
                    ));
                }
                let compiled = GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| err("deny_arg", format!("the glob {glob:?} is invalid: {e}")))?;
                Matcher::Glob(glob, compiled.compile_matcher())
            }
            (None, Some(re)) => Matcher::Regex(
                Regex::new(&re).map_err(|e| err("deny_arg", format!("the regex {re:?} is invalid: {e}")))?,
            ),
            _ => return Err(err("deny_arg", "deny_arg needs exactly one of glob and regex".into())),
        };
        Kind::DenyArg { tool, arg, matcher }
    } else {
        let prompt = non_empty("prompt", def.prompt.unwrap_or_default(), "the rule in words for the judge")?;
        Kind::Llm {
            mode: if def.mode == Some(ModeDef::Async) { LlmMode::Async } else { LlmMode::Sync },
            prompt,
            model: def.model,
            on_failure: def.on_failure.unwrap_or_default(),
        }
    };
    let shadow = def.mode == Some(ModeDef::Shadow);
    if shadow && matches!(kind, Kind::RewriteArg(_)) {
        return Err(err(
            "mode",
            "a rewrite_arg rule cannot be a shadow yet (its rewrite would change what the live rules judge); remove \
             mode = \"shadow\""
                .into(),
        ));
    }
    if shadow && matches!(kind, Kind::RequireApproval { .. }) {
        return Err(err(
            "mode",
            "require_approval makes no decision a shadow could record; remove mode = \"shadow\"".into(),
        ));
    }
    let escalate_after = match def.escalate_after {
        None => None,
        Some(_) if !llm && action != SteeringAction::Guide => {
            return Err(err(
                "escalate_after",
                "escalate_after turns a rule's repeated GUIDE into a DENY, but this rule never guides; set \
                 action = \"guide\" or remove escalate_after"
                    .into(),
            ));
        }
        Some(n) => match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(err(
                    "escalate_after",
                    format!(
                        "escalate_after = {n} is not a count of guides; give 1 or more (the rule's next GUIDE after \
                         that many in one turn is a DENY), or remove it to never escalate"
                    ),
                ));
            }
        },
    };
    Ok(Rule {
        id: def.id,
        name: def.name,
        applies_to,
        tools,
        guidance: def.guidance,
        action,
        kind,
        mcp_names,
        shadow,
        escalate_after,
    })
}

/// Checks a `rewrite_arg` table: the tool and argument exist, the regexes compile, and the replacement names only
/// groups the regex has.
fn rewriter(
    def: RewriteArgDef,
    tool_exists: &mut impl FnMut(&[Seg<'_>], &str, Option<&str>) -> Result<(), SourceError>,
    err_at: &impl Fn(&[Seg<'_>], String) -> SourceError,
) -> Result<Rewriter, SourceError> {
    let at = |key: &'static str| [Seg::Key("rewrite_arg"), Seg::Key(key)];
    let (tool, arg) = (def.tool, def.arg);
    tool_exists(&at("tool"), &tool, Some(&arg))?;
    if let Some(args) = tools::arguments(&tool)
        && !args.contains(&arg.as_str())
    {
        return Err(err_at(
            &at("arg"),
            format!("{tool} has no argument '{arg}'; its arguments are {}", args.join(", ")),
        ));
    }
    let compile = |key: &'static str, re: &str| {
        Regex::new(re).map_err(|e| err_at(&at(key), format!("the regex {re:?} is invalid: {e}")))
    };
    let regex = compile("regex", &def.regex)?;
    let unless = def.unless.as_deref().map(|u| compile("unless", u)).transpose()?;
    for group in replacement_groups(&def.replace) {
        let known = match group.parse::<usize>() {
            Ok(n) => n < regex.captures_len(),
            Err(_) => regex.capture_names().flatten().any(|name| name == group),
        };
        if !known {
            return Err(err_at(
                &at("replace"),
                format!(
                    "the replacement names the group ${group}, which the regex {:?} does not have (write $$ for a \
                     dollar sign)",
                    def.regex
                ),
            ));
        }
    }
    Ok(Rewriter { tool, arg, regex, replace: def.replace, unless })
}

/// The groups a replacement names (`$1`, `$name`, `${name}`), as the regex crate reads them; `$$` is a dollar sign.
fn replacement_groups(replace: &str) -> Vec<&str> {
    let mut groups = Vec::new();
    let mut rest = replace;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            rest = after;
        } else if let Some(braced) = rest.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => {
                    groups.push(&braced[..end]);
                    rest = &braced[end + 1..];
                }
                None => rest = braced,
            }
        } else {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if end > 0 {
                groups.push(&rest[..end]);
            }
            rest = &rest[end..];
        }
    }
    groups
}
