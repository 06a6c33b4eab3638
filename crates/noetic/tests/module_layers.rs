//! Noetic's modules form layers and imports only point down (see the crate docs): this test reads every source file
//! of the five crates that hold them (core, steps, steering, runtime and the `noetic` facade) and fails on a
//! `crate::` path that names a module above the file's own. Each crate names the lower crates' modules it uses by
//! their old names (`use noetic_core::model;` at its root), so one table of layers covers all five. A second test
//! checks the crates themselves: a crate depends only on crates below it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, lowest first. Modules on one line are one layer and may not import each other either way unless
/// listed in the same order (a module may import those before it on its line).
const LAYERS: &[&[&str]] = &[
    &["sync", "handoff", "time", "error", "digest", "json"],
    &["model", "decision", "trace", "budget"],
    &["turn"],
    &["context"],
    &["layer", "tool"],
    &["scope"],
    &["window"],
    &["step"],
    &["exec"],
    &["steering"],
    &["agent"],
    &["testing"],
];

/// Upward imports that are known and scheduled to go; each must still exist (so this list only shrinks).
const KNOWN: &[(&str, &str)] = &[];

fn rank(module: &str) -> Option<(usize, usize)> {
    LAYERS
        .iter()
        .enumerate()
        .find_map(|(layer, modules)| modules.iter().position(|m| *m == module).map(|pos| (layer, pos)))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/exec/llm.rs` → `exec`), `None` for `lib.rs`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?.to_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (name != "lib").then_some(name)
}

/// Every `crate::<module>` named in the code of `text` (line comments and doc comments skipped).
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// `(from, to)` for every import of a module above (or beside, later on its line) the importing one.
fn upward_imports() -> BTreeSet<(String, String)> {
    let mut upward = BTreeSet::new();
    for krate in CRATES {
        upward_imports_of(&crates_dir().join(krate).join("src"), &mut upward);
    }
    upward
}

/// The crates holding the layered modules, lowest first.
const CRATES: &[&str] = &["noetic-core", "noetic-steps", "noetic-steering", "noetic-runtime", "noetic"];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn upward_imports_of(src: &Path, upward: &mut BTreeSet<(String, String)>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for file in files {
        let Some(module) = module_of(src, &file) else { continue };
        let Some(from) = rank(&module) else {
            // `lib.rs` of each crate, and nothing else, sits outside the layers.
            panic!("module '{module}' ({}) is in no layer; add it to LAYERS", file.display());
        };
        for target in imports(&std::fs::read_to_string(&file).unwrap()) {
            if target == module {
                continue;
            }
            // Items of the crate root (`crate::run`, `crate::Step` …) are re-exports or the entry point.
            let Some(to) = rank(&target) else { continue };
            if to > from {
                upward.insert((module.clone(), target));
            }
        }
    }
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let known: BTreeSet<(String, String)> = KNOWN.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
    let upward = upward_imports();
    let new: Vec<_> = upward.difference(&known).collect();
    assert!(new.is_empty(), "modules import upward (from → to): {new:?}; define a trait low and implement it high");
    let gone: Vec<_> = known.difference(&upward).collect();
    assert!(gone.is_empty(), "these known upward imports are gone; remove them from KNOWN: {gone:?}");
}

#[test]
fn the_check_sees_an_upward_import_and_ignores_comments() {
    assert_eq!(imports("use crate::agent::Runtime; // crate::steering"), BTreeSet::from(["agent".to_owned()]));
    assert!(imports("/// see [`run`](crate::run)").is_empty());
    assert!(rank("context") < rank("tool"));
}

/// The `noetic*` crates a crate's manifest depends on (normal dependencies only: a crate may use the facade in its
/// doc examples and tests).
fn noetic_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && line.starts_with("noetic") {
            let name: String = line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            found.insert(name);
        }
    }
    found
}

/// The workspace's crates, lowest first; crates on one line are one layer and may not depend on each other.
const CRATE_LAYERS: &[&[&str]] = &[
    &["noetic-core"],
    &["noetic-steps", "noetic-http"],
    &["noetic-steering", "noetic-openai", "noetic-anthropic"],
    &["noetic-runtime"],
    &["noetic", "noetic-mcp", "noetic-sqlite", "noetic-postgres", "noetic-a2a"],
    &["noetic-server"],
    &["noetic-cli"],
    &["noetic-bench"],
];

fn crate_rank(name: &str) -> Option<usize> {
    CRATE_LAYERS.iter().position(|layer| layer.contains(&name))
}

/// `(from, to)` for every dependency of a workspace crate on one at its own layer or above.
fn upward_dependencies() -> Vec<(String, String)> {
    let mut upward = Vec::new();
    for entry in std::fs::read_dir(crates_dir()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let from = crate_rank(&name).unwrap_or_else(|| panic!("crate '{name}' is in no layer; add it to CRATE_LAYERS"));
        for dependency in noetic_dependencies(&manifest) {
            let to = crate_rank(&dependency)
                .unwrap_or_else(|| panic!("'{name}' depends on '{dependency}', which is in no layer"));
            if to >= from {
                upward.push((name.clone(), dependency));
            }
        }
    }
    upward
}

#[test]
fn no_crate_depends_on_a_crate_at_or_above_its_own_layer() {
    let upward = upward_dependencies();
    assert!(upward.is_empty(), "crates depend upward (from → to): {upward:?}");
}

#[test]
fn the_crate_check_reads_only_normal_dependencies() {
    let manifest = "[package]\nname = \"x\"\n[dependencies]\nnoetic-core = { path = \"../noetic-core\" }\n\
                    serde = \"1\"\n[dev-dependencies]\nnoetic = { path = \"../noetic\" }\n";
    assert_eq!(noetic_dependencies(manifest), BTreeSet::from(["noetic-core".to_owned()]));
    assert!(crate_rank("noetic-core") < crate_rank("noetic-steps"));
}

/// The library crates that build on part of Noetic name only the crates they use, not the facade: a provider
/// compiles without the step algebra, the steering layer and the runtime.
#[test]
fn providers_tool_sources_and_stores_build_on_the_crates_they_use_not_the_facade() {
    for (krate, allowed) in [
        ("noetic-http", &["noetic-core"][..]),
        ("noetic-openai", &["noetic-core", "noetic-http"][..]),
        ("noetic-anthropic", &["noetic-core", "noetic-http"][..]),
        ("noetic-mcp", &["noetic-core", "noetic-steps"][..]),
        ("noetic-sqlite", &["noetic-core", "noetic-steps", "noetic-steering", "noetic-runtime"][..]),
        ("noetic-postgres", &["noetic-core", "noetic-steps", "noetic-steering", "noetic-runtime"][..]),
    ] {
        let manifest = std::fs::read_to_string(crates_dir().join(krate).join("Cargo.toml")).unwrap();
        let dependencies = noetic_dependencies(&manifest);
        assert!(
            dependencies.iter().all(|d| allowed.contains(&d.as_str())),
            "{krate} depends on {dependencies:?}; it may use {allowed:?}"
        );
    }
}
