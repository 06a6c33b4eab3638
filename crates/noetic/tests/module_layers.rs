//! The crate's modules form layers and imports only point down (see the crate docs): this test reads every
//! source file and fails on a `crate::` path that names a module above the file's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, lowest first. Modules on one line are one layer and may not import each other either way unless
/// listed in the same order (a module may import those before it on its line).
const LAYERS: &[&[&str]] = &[
    &["sync", "time", "error", "digest"],
    &["model", "decision", "trace", "budget"],
    &["turn"],
    &["context"],
    &["layer", "tool"],
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = BTreeSet::new();
    for file in files {
        let Some(module) = module_of(&src, &file) else { continue };
        let from = rank(&module).unwrap_or_else(|| panic!("module '{module}' is in no layer; add it to LAYERS"));
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
    upward
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
