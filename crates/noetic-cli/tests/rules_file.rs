//! The rules file: each kind of rule is understood, and mistakes are reported with file, line and column.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{example, noetic, run};

#[test]
fn the_example_rules_file_holds_every_kind_of_rule() {
    let out = run(noetic().arg("rules").arg(example("rules.toml")));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    for expected in [
        "7 rule(s)",
        "pushes-are-dry-runs: rewrite run_command's command: regex \"\\\\bgit\\\\s+push\\\\b\" replaced by \
         \"git push --dry-run\" unless it matches regex \"--dry-run\" [before_tool_call]",
        "no-delete-notes (Notes are kept): deny delete_file when path matches glob \"notes/**\" [before_tool_call]",
        "no-env-files: deny read_file when path matches glob \"**/.env\"",
        "no-shell-rm: guide run_command when command matches regex",
        ", a deny after 2 guide(s) in a turn [before_tool_call]",
        "no-git-push: SHADOW (not enforced) deny run_command when command matches regex",
        "ask-before-overwrite: write_file needs the user's approval",
        "commands-stay-local: LLM-judged (sync, judge = the agent's model, on failure deny) on run_command \
         [before_tool_call]",
    ] {
        assert!(out.stdout.contains(expected), "missing {expected:?} in:\n{}", out.stdout);
    }
}

fn check(text: &str) -> common::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, text).unwrap();
    let out = run(noetic().arg("rules").arg(&path).current_dir(dir.path()));
    drop(dir);
    out
}

#[test]
fn a_toml_syntax_error_names_the_file_line_and_column() {
    let out = check("[[rule]]\nid = \"a\"\ndeny_tool = \n");
    assert!(!out.status.success());
    assert!(out.stderr.contains("rules.toml:3:13:"), "{}", out.stderr);
}

#[test]
fn an_unknown_key_is_reported_where_it_is_written() {
    let out = check("[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\n\n[[rule]]\nid = \"b\"\ndeny_tol = \"y\"\n");
    assert!(!out.status.success());
    assert!(out.stderr.contains("rules.toml:7:1: unknown field `deny_tol`"), "{}", out.stderr);
}

#[test]
fn a_bad_regex_or_glob_points_at_its_rule() {
    let out =
        check("[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"run_command\", arg = \"command\", regex = \"(rm\" }\n");
    assert!(out.stderr.contains("rules.toml:3:1: rule 'a': the regex \"(rm\" is invalid"), "{}", out.stderr);
    let out = check("[[rule]]\nid = \"g\"\n\ndeny_arg = { tool = \"read_file\", arg = \"path\", glob = \"a[\" }\n");
    assert!(out.stderr.contains("rules.toml:4:1: rule 'g': the glob \"a[\" is invalid"), "{}", out.stderr);
}

#[test]
fn a_rule_without_a_kind_or_an_id_is_refused_with_its_line() {
    let out = check("[[rule]]\nid = \"a\"\nguidance = \"no\"\n");
    assert!(out.stderr.contains("rules.toml:2:1: rule 'a': says nothing to check"), "{}", out.stderr);
    let out = check("[[rule]]\nid = \"a\"\ndeny_tool = \"x\"\n\n[[rule]]\ndeny_tool = \"y\"\n");
    assert!(out.stderr.contains("rules.toml:5:1: missing field `id`"), "{}", out.stderr);
}

#[test]
fn an_llm_rule_with_a_bad_mode_is_refused_at_the_value() {
    let out = check("[[rule]]\nid = \"j\"\nprompt = \"Be careful.\"\nmode = \"later\"\n");
    assert!(
        out.stderr
            .contains("rules.toml:4:8: unknown variant `later`, expected one of `live`, `shadow`, `sync`, `async`"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_rule_naming_a_tool_that_does_not_exist_is_an_error_naming_it_and_the_tools() {
    let tools = "the tools are read_file, write_file, list_dir, delete_file, run_command";
    for (text, expected) in [
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"delet_file\"\n",
            "rules.toml:3:1: rule 'a': there is no tool 'delet_file'",
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_arg = { tool = \"nope\", arg = \"path\", glob = \"x\" }\n",
            "rules.toml:3:14: rule 'a': there is no tool 'nope'",
        ),
        ("[[rule]]\nid = \"a\"\nrequire_approval = \"x\"\n", "rules.toml:3:1: rule 'a': there is no tool 'x'"),
        (
            "[[rule]]\nid = \"a\"\nprompt = \"Be careful.\"\ntools = [\"run_command\", \"run_comand\"]\n",
            "rules.toml:4:25: rule 'a': there is no tool 'run_comand'",
        ),
    ] {
        let out = check(text);
        assert!(!out.status.success(), "{text:?} was accepted");
        let line = out.stderr.trim();
        assert!(line.starts_with("noetic: ") && line.lines().count() == 1, "{line}");
        let from_file = &line[line.find("rules.toml").unwrap()..];
        assert_eq!(from_file, format!("{expected}; {tools}"), "{text:?}");
    }
}

#[test]
fn shadow_and_escalating_rules_are_listed_as_such() {
    let out = check(
        "[[rule]]\nid = \"trial\"\nmode = \"shadow\"\ndeny_tool = \"delete_file\"\n\n\
         [[rule]]\nid = \"dry\"\naction = \"guide\"\nescalate_after = 2\n\
         deny_arg = { tool = \"run_command\", arg = \"command\", regex = \"deploy\" }\n",
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("trial: SHADOW (not enforced) deny every call of delete_file [before_tool_call]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "dry: guide run_command when command matches regex \"deploy\", a deny after 2 guide(s) in a turn"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_shadow_and_escalation_settings_are_errors_naming_file_line_and_fix() {
    for (text, expected) in [
        (
            "[[rule]]\nid = \"trial\"\nmode = \"shadow\"\ndeny_tool = \"delet_file\"\n",
            "rules.toml:4:1: rule 'trial': there is no tool 'delet_file'",
        ),
        (
            "[[rule]]\nid = \"a\"\nmode = \"dry\"\ndeny_tool = \"list_dir\"\n",
            "rules.toml:3:8: unknown variant `dry`, expected one of `live`, `shadow`, `sync`, `async`",
        ),
        (
            "[[rule]]\nid = \"a\"\nprompt = \"p\"\nescalate_after = 0\n",
            "rules.toml:4:1: rule 'a': escalate_after = 0 is not a count of guides; give 1 or more",
        ),
        (
            "[[rule]]\nid = \"a\"\nprompt = \"p\"\nescalate_after = -3\n",
            "rules.toml:4:1: rule 'a': escalate_after = -3 is not a count of guides; give 1 or more",
        ),
        (
            "[[rule]]\nid = \"a\"\ndeny_tool = \"list_dir\"\nescalate_after = 2\n",
            "rules.toml:4:1: rule 'a': escalate_after turns a rule's repeated GUIDE into a DENY, but this rule never guides",
        ),
        (
            "[[rule]]\nid = \"a\"\nrequire_approval = \"write_file\"\nmode = \"shadow\"\n",
            "rules.toml:4:1: rule 'a': require_approval makes no decision a shadow could record",
        ),
    ] {
        let out = check(text);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(out.stderr.contains(expected), "{text:?}: want {expected:?} in {}", out.stderr);
    }
}

const TRIAL: &str = "# Rules under trial.\n\n[[rule]]\nid = \"keep\"\ndeny_tool = \"delete_file\"\n\n\
                     # Watch this one for a week before it counts.\n[[rule]]\nid   = \"no-curl\"   # network\n\
                     mode = 'shadow'   # flip when the ledger agrees\nguidance = \"No network.\"\n\
                     deny_arg = { tool = \"run_command\", arg = \"command\", regex = \"curl\" }\n";

#[test]
fn promote_makes_a_shadow_rule_live_keeping_the_comments_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, TRIAL).unwrap();
    let out = run(noetic().args(["rules", "promote", "no-curl"]).current_dir(dir.path()));
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        "rules.toml: rule 'no-curl' is live now (mode = \"shadow\" → \"live\"); its decisions are enforced"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        TRIAL.replace("mode = 'shadow'   # flip", "mode = \"live\"   # flip"),
        "only the value changed"
    );
    let listed = run(noetic().arg("rules").arg(&path));
    assert!(
        listed.stdout.contains("no-curl: deny run_command when command matches regex \"curl\""),
        "{}",
        listed.stdout
    );
    assert!(!listed.stdout.contains("SHADOW"), "{}", listed.stdout);
}

#[test]
fn promote_refuses_an_unknown_rule_a_live_rule_and_a_broken_file_without_touching_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trial.toml");
    for (text, rule, expected) in [
        (TRIAL, "no-cur", "'FILE' has no rule 'no-cur'; its rules are keep, no-curl"),
        (TRIAL, "keep", "rule 'keep' in 'FILE' is not a shadow rule (it has no mode = \"shadow\"); it is live"),
        (
            "[[rule]]\nid = \"a\"\nmode = \"shadow\"\ndeny_tool = \"delet_file\"\n",
            "a",
            "trial.toml:4:1: rule 'a': there is no tool 'delet_file'",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let out = run(noetic().args(["rules", "promote", rule, "--file"]).arg(&path));
        assert!(!out.status.success(), "{rule}");
        let expected = expected.replace("FILE", &path.display().to_string());
        assert!(out.stderr.contains(&expected), "want {expected:?} in {}", out.stderr);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "the file is unchanged");
    }
}

#[test]
fn a_rewrite_rule_is_listed_with_what_it_rewrites() {
    let out = check(
        "[[rule]]\nid = \"push-dry\"\nrewrite_arg = { tool = \"run_command\", arg = \"command\", regex = \
         '^git push\\b', replace = \"git push --dry-run\", unless = \"--dry-run\" }\n",
    );
    assert!(out.status.success(), "{}", out.stderr);
    let expected = "push-dry: rewrite run_command's command: regex \"^git push\\\\b\" replaced by \"git push --dry-run\" \
                    unless it matches regex \"--dry-run\" [before_tool_call]";
    assert!(out.stdout.contains(expected), "want {expected:?} in:\n{}", out.stdout);
}

#[test]
fn bad_rewrite_rules_are_errors_naming_file_line_and_fix() {
    let rewrite = |fields: &str| format!("[[rule]]\nid = \"r\"\nrewrite_arg = {{ tool = \"write_file\", {fields} }}\n");
    for (text, expected) in [
        (
            rewrite("arg = \"body\", regex = \"x\", replace = \"y\""),
            "rules.toml:3:38: rule 'r': write_file has no argument 'body'; its arguments are path, content",
        ),
        (rewrite("arg = \"content\", regex = \"(x\", replace = \"y\""), "rule 'r': the regex \"(x\" is invalid"),
        (
            rewrite("arg = \"content\", regex = \"x\", replace = \"y\", unless = \"[\""),
            "rule 'r': the regex \"[\" is invalid",
        ),
        (
            rewrite("arg = \"content\", regex = \"(?P<key>k)=\", replace = \"${value}=\""),
            "rule 'r': the replacement names the group $value, which the regex \"(?P<key>k)=\" does not have",
        ),
        (rewrite("arg = \"content\", regex = \"(k)\", replace = \"$2\""), "the replacement names the group $2"),
        (rewrite("arg = \"content\", regex = \"k\""), "missing field `replace`"),
        (
            format!("{}action = \"guide\"\n", rewrite("arg = \"content\", regex = \"k\", replace = \"v\"")),
            "rules.toml:4:1: rule 'r': a rewrite_arg rule rewrites the call instead of deciding on it; remove action",
        ),
        (
            format!("{}mode = \"shadow\"\n", rewrite("arg = \"content\", regex = \"k\", replace = \"v\"")),
            "rules.toml:4:1: rule 'r': a rewrite_arg rule cannot be a shadow yet",
        ),
        (
            format!("{}deny_tool = \"list_dir\"\n", rewrite("arg = \"content\", regex = \"k\", replace = \"v\"")),
            "rules.toml:3:1: rule 'r': has both deny_tool and rewrite_arg",
        ),
    ] {
        let out = check(&text);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(out.stderr.contains(expected), "{text:?}: want {expected:?} in {}", out.stderr);
    }
    // `$$` is a dollar sign, not a group.
    let out = check(&rewrite("arg = \"content\", regex = \"k\", replace = \"$$k\""));
    assert!(out.status.success(), "{}", out.stderr);
}
