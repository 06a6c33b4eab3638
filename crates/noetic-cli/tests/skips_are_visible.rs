//! A test that skips (a real component is missing) must say why where `cargo test` shows it: the harness
//! captures `eprintln!`/`println!` of a passing test, so a skip printed that way is silent. Skips write straight
//! to stderr (`writeln!(std::io::stderr(), "skipped: …")`), as `common::skip` does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, at any depth.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn no_test_of_the_workspace_says_why_it_skipped_through_captured_output() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(crates).unwrap().flatten() {
        rust_files(&krate.path().join("tests"), &mut files);
    }
    assert!(files.len() > 20, "the workspace's test files were found: {files:?}");
    let mut silent = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("println!(") {
            // The macro's arguments: up to the first `);` that ends a line.
            let call = &text[at..];
            let end = call.find(");\n").unwrap_or(call.len());
            if call[..end].contains("skipped") {
                let line = text[..at].lines().count() + 1;
                silent.push(format!("{}:{line}", file.strip_prefix(crates).unwrap().display()));
            }
        }
    }
    assert!(
        silent.is_empty(),
        "skips printed through captured output (use writeln!(std::io::stderr(), …)): {silent:?}"
    );
}
