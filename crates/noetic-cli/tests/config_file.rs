//! `noetic.toml` defaults, overridden by NOETIC_AGENTS_DEFAULTS_* variables, overridden by flags.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};

fn chat_banner(config: &std::path::Path, env: &[(&str, &str)], flags: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_noetic"));
    cmd.args(["chat", "--plain", "--config"]).arg(config).args(flags).stdin(Stdio::null());
    for key in ["NOETIC_MODEL", "NOETIC_AGENTS_DEFAULTS_MODEL", "NOETIC_AGENTS_DEFAULTS_STEERING_MODE"] {
        cmd.env_remove(key);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_file_sets_defaults_the_environment_overrides_them_and_flags_override_both() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("noetic.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.defaults]\nmodel = \"model-from-file\"\nsteering_mode = \"all\"\nbase_url = \"http://127.0.0.1:9/v1\"\nworkspace = \"{}\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let (ok, text) = chat_banner(&config, &[], &[]);
    assert!(ok, "{text}");
    assert!(text.contains("model-from-file") && text.contains("steering mode all"), "{text}");
    let (_, text) = chat_banner(&config, &[("NOETIC_AGENTS_DEFAULTS_MODEL", "model-from-env")], &[]);
    assert!(text.contains("model-from-env"), "{text}");
    let (_, text) = chat_banner(
        &config,
        &[("NOETIC_AGENTS_DEFAULTS_MODEL", "model-from-env")],
        &["--model", "model-from-flag", "--mode", "one-at-a-time"],
    );
    assert!(text.contains("model-from-flag") && text.contains("steering mode one-at-a-time"), "{text}");
}

#[test]
fn a_mistake_in_the_configuration_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("noetic.toml");
    std::fs::write(&config, "[agents.defaults]\nmodle = \"x\"\n").unwrap();
    let (ok, text) = chat_banner(&config, &[], &[]);
    assert!(!ok);
    assert!(text.contains("noetic.toml") && text.contains("line 2") && text.contains("modle"), "{text}");
}

#[test]
fn config_is_offered_only_by_the_commands_that_read_a_defaults_file() {
    for command in [&["demo"][..], &["rules", "rules.toml"], &["ledger", "ledger.jsonl"]] {
        let help = common::run(common::noetic().args(&command[..1]).arg("--help"));
        assert!(!help.stdout.contains("--config"), "{command:?} --help offers --config:\n{}", help.stdout);
        let before = common::run(common::noetic().args(["--config", "noetic.toml"]).args(command));
        assert!(!before.status.success());
        assert!(before.stderr.contains("--config applies to chat, run, serve and sessions"), "{}", before.stderr);
    }
    for command in [&["chat"][..], &["run"], &["serve"], &["sessions"], &["sessions", "show"]] {
        let help = common::run(common::noetic().args(command).arg("--help"));
        assert!(help.stdout.contains("--config <FILE>"), "{command:?} --help:\n{}", help.stdout);
    }
}
