//! Tests of the workspace: confinement, locating paths for rules, acting on what was located, special files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;

use super::ops::MAX_READ_BYTES;
use super::*;

/// What the model would read for a failure ("changed" for a target to locate again).
fn explain(failure: Failure) -> String {
    match failure {
        Failure::Refused(why) => why,
        Failure::Changed => "changed".to_owned(),
    }
}

/// The tools' two steps (locate, then act) in one call, as the tools make them.
impl Workspace {
    fn read_file(&self, raw: &str, offset: u64) -> Result<String, String> {
        self.read(self.locate(raw, true)?, offset).map_err(explain)
    }

    fn write_file(&self, raw: &str, content: &str) -> Result<String, String> {
        self.write(self.locate(raw, true)?, content).map_err(explain)
    }

    fn list_dir(&self, raw: &str) -> Result<String, String> {
        self.list(self.locate(raw, true)?).map_err(explain)
    }

    fn delete_file(&self, raw: &str) -> Result<String, String> {
        self.delete(self.locate(raw, false)?).map_err(explain)
    }

    fn resolve(&self, raw: &str) -> Result<WsPath, String> {
        self.locate(raw, true).map(|target| target.path)
    }

    fn resolve_entry(&self, raw: &str) -> Result<WsPath, String> {
        self.locate(raw, false).map(|target| target.path)
    }
}

fn setup() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    (dir, ws)
}

#[test]
fn paths_inside_resolve_and_escapes_are_refused() {
    let (dir, ws) = setup();
    fs::write(dir.path().join("a.txt"), "hi").unwrap();
    assert_eq!(ws.read_file("a.txt", 0).unwrap(), "hi");
    assert_eq!(ws.read_file("./sub/../a.txt", 0).unwrap(), "hi");
    assert!(ws.resolve("../x").unwrap_err().contains("outside the workspace"));
    assert!(ws.resolve("/etc/passwd").unwrap_err().contains("outside the workspace"));
    assert!(ws.resolve("").unwrap_err().contains("empty"));
    let absolute = dir.path().join("a.txt");
    assert_eq!(ws.read_file(absolute.to_str().unwrap(), 0).unwrap(), "hi");
}

#[cfg(unix)]
#[test]
fn symbolic_links_out_of_the_workspace_are_refused() {
    let (dir, ws) = setup();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("gone"), dir.path().join("dangling")).unwrap();
    assert!(ws.read_file("out/secret", 0).unwrap_err().contains("symbolic link"));
    assert!(ws.write_file("out/new.txt", "x").unwrap_err().contains("symbolic link"));
    assert!(ws.write_file("dangling", "x").unwrap_err().contains("symbolic link"));
    assert!(!outside.path().join("gone").exists());
    fs::write(dir.path().join("inner.txt"), "in").unwrap();
    std::os::unix::fs::symlink(dir.path().join("inner.txt"), dir.path().join("link.txt")).unwrap();
    assert_eq!(ws.read_file("link.txt", 0).unwrap(), "in");
}

#[test]
fn large_files_are_cut_with_a_marker_and_read_on_from_an_offset() {
    let (dir, ws) = setup();
    fs::write(dir.path().join("big"), "x".repeat(MAX_READ_BYTES + 10)).unwrap();
    let text = ws.read_file("big", 0).unwrap();
    assert!(text.contains("[… truncated"));
    assert_eq!(ws.read_file("big", MAX_READ_BYTES as u64).unwrap(), "x".repeat(10));
}

#[test]
fn write_list_and_delete_stay_inside() {
    let (dir, ws) = setup();
    assert_eq!(ws.write_file("notes/today.md", "hello").unwrap(), "wrote 5 bytes to notes/today.md");
    assert_eq!(ws.list_dir(".").unwrap(), "notes/");
    assert_eq!(ws.list_dir("notes").unwrap(), "today.md");
    assert!(ws.delete_file("notes").unwrap_err().contains("directory"));
    assert_eq!(ws.delete_file("notes/today.md").unwrap(), "deleted notes/today.md");
    assert!(!dir.path().join("notes/today.md").exists());
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo failed");
}

#[cfg(unix)]
#[test]
fn read_file_refuses_a_fifo_without_opening_it_for_a_blocking_read() {
    let (dir, ws) = setup();
    mkfifo(&dir.path().join("pipe"));
    assert_eq!(
        ws.read_file("pipe", 0).unwrap_err(),
        "'pipe' is not a regular file (it is a FIFO, socket or device); read_file reads regular files only"
    );
}

#[cfg(unix)]
#[test]
fn write_file_refuses_a_fifo_without_blocking() {
    let (dir, ws) = setup();
    mkfifo(&dir.path().join("pipe"));
    assert_eq!(
        ws.write_file("pipe", "x").unwrap_err(),
        "'pipe' is not a regular file (it is a FIFO, socket or device); write_file writes regular files only"
    );
}

#[cfg(unix)]
#[test]
fn delete_file_on_a_symlink_removes_the_link_not_its_target() {
    let (dir, ws) = setup();
    fs::write(dir.path().join("target.txt"), "kept").unwrap();
    std::os::unix::fs::symlink("target.txt", dir.path().join("link.txt")).unwrap();
    assert_eq!(ws.delete_file("link.txt").unwrap(), "deleted link.txt");
    assert!(fs::symlink_metadata(dir.path().join("link.txt")).is_err(), "the link is gone");
    assert_eq!(fs::read_to_string(dir.path().join("target.txt")).unwrap(), "kept");
}

#[cfg(unix)]
#[test]
fn the_resolved_path_is_workspace_relative_with_links_inside_followed() {
    let (dir, ws) = setup();
    fs::write(dir.path().join("README.md"), "r").unwrap();
    fs::create_dir_all(dir.path().join("sub/deep")).unwrap();
    std::os::unix::fs::symlink("..", dir.path().join("sub/link-to-root")).unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("sub/absolute-link")).unwrap();
    std::os::unix::fs::symlink("sub/deep", dir.path().join("to-deep")).unwrap();
    let resolved = |raw: &str| ws.resolve(raw).map(|p| p.to_string());
    let absolute = dir.path().join("README.md");
    assert_eq!(resolved(absolute.to_str().unwrap()).unwrap(), "README.md");
    assert_eq!(resolved("sub/link-to-root/README.md").unwrap(), "README.md");
    assert_eq!(resolved("sub/absolute-link/sub/../README.md").unwrap(), "README.md");
    // `..` after a link climbs from the link's target, as the kernel does.
    assert_eq!(resolved("to-deep/../x.txt").unwrap(), "sub/x.txt");
    // A file that does not exist yet: the folder resolved, plus the name.
    assert_eq!(resolved("sub/link-to-root/new/file.txt").unwrap(), "new/file.txt");
    assert_eq!(resolved(".").unwrap(), ".");
    assert_eq!(resolved("sub/link-to-root").unwrap(), ".");
    // The entry form keeps a link in the last part: deleting it removes the link.
    assert_eq!(ws.resolve_entry("sub/link-to-root").unwrap().to_string(), "sub/link-to-root");
    assert_eq!(ws.resolve_entry("to-deep/../link-to-root").unwrap().to_string(), "sub/link-to-root");
}

#[cfg(unix)]
#[test]
fn link_loops_and_relative_links_climbing_out_are_refused() {
    let (dir, ws) = setup();
    std::os::unix::fs::symlink("b", dir.path().join("a")).unwrap();
    std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
    std::os::unix::fs::symlink("../..", dir.path().join("up")).unwrap();
    assert_eq!(ws.resolve("a/x").unwrap_err(), "the path 'a/x' goes through too many symbolic links (a loop?)");
    assert!(ws.resolve("up/etc/passwd").unwrap_err().contains("symbolic link that points outside the workspace"));
    assert!(ws.read_file("up/etc/passwd", 0).is_err());
}

#[cfg(unix)]
#[test]
fn every_operation_refuses_a_symbolic_link_out_of_the_workspace() {
    let (dir, ws) = setup();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("secret-link")).unwrap();
    let refused = "goes through a symbolic link that points outside the workspace";
    assert!(ws.read_file("out/secret", 0).unwrap_err().contains(refused));
    assert!(ws.read_file("secret-link", 0).unwrap_err().contains(refused));
    assert!(ws.write_file("out/secret", "x").unwrap_err().contains(refused));
    assert!(ws.list_dir("out").unwrap_err().contains(refused));
    assert!(ws.delete_file("out/secret").unwrap_err().contains(refused));
    assert_eq!(fs::read_to_string(outside.path().join("secret")).unwrap(), "s");
}

/// What was located stays what the operation acts on: a folder on the way renamed and replaced by a link to
/// outside (what a racing process would do) is not followed; the operation says the target changed, and the path
/// located again is refused.
#[cfg(target_os = "linux")]
#[test]
fn a_folder_swapped_for_a_link_after_locating_is_not_followed() {
    let (dir, ws) = setup();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "outside").unwrap();
    fs::create_dir(dir.path().join("a")).unwrap();
    fs::write(dir.path().join("a/secret"), "inside").unwrap();
    let read = ws.locate("a/secret", true).unwrap();
    let write = ws.locate("a/secret", true).unwrap();
    let list = ws.locate("a", true).unwrap();
    let delete = ws.locate("a/secret", false).unwrap();
    assert_eq!(read.path().to_string(), "a/secret");
    // The swap: `a` moves away and becomes a link to a folder outside holding a file of the same name.
    fs::rename(dir.path().join("a"), dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("a")).unwrap();
    assert_eq!(ws.read(read, 0), Err(Failure::Changed));
    assert_eq!(ws.write(write, "x"), Err(Failure::Changed));
    assert_eq!(ws.list(list), Err(Failure::Changed));
    assert_eq!(ws.delete(delete), Err(Failure::Changed));
    assert!(ws.locate("a/secret", true).unwrap_err().contains("symbolic link that points outside the workspace"));
    assert_eq!(fs::read_to_string(outside.path().join("secret")).unwrap(), "outside");
    assert_eq!(fs::read_to_string(dir.path().join("moved/secret")).unwrap(), "inside");
}

/// A link swapped in for the last part after it was located is not followed either.
#[cfg(unix)]
#[test]
fn a_link_swapped_in_for_the_last_part_after_locating_is_not_followed() {
    let (dir, ws) = setup();
    fs::write(dir.path().join(".env"), "SECRET=1").unwrap();
    fs::write(dir.path().join("x"), "plain").unwrap();
    let read = ws.locate("x", true).unwrap();
    let write = ws.locate("x", true).unwrap();
    fs::remove_file(dir.path().join("x")).unwrap();
    std::os::unix::fs::symlink(".env", dir.path().join("x")).unwrap();
    assert_eq!(ws.read(read, 0), Err(Failure::Changed));
    assert_eq!(ws.write(write, "pwned"), Err(Failure::Changed));
    assert_eq!(fs::read_to_string(dir.path().join(".env")).unwrap(), "SECRET=1");
    assert_eq!(ws.locate("x", true).unwrap().path().to_string(), ".env");
}

/// A rule's check pins what it located for the call; the tool takes that, not what the path leads to later. Every
/// rule of the call sees the same pin; the same rule looking again (a new call with the same id) locates afresh.
#[cfg(unix)]
#[test]
fn the_tool_acts_on_what_the_rule_located_for_its_call() {
    let (dir, ws) = setup();
    fs::write(dir.path().join(".env"), "SECRET=1").unwrap();
    fs::write(dir.path().join("plain.txt"), "plain").unwrap();
    std::os::unix::fs::symlink("plain.txt", dir.path().join("x")).unwrap();
    let flip = |target: &str| {
        fs::remove_file(dir.path().join("x")).unwrap();
        std::os::unix::fs::symlink(target, dir.path().join("x")).unwrap();
    };
    let call = ("c1", "read_file");
    assert_eq!(ws.locate_for_rule("no-env", call, "x", true).unwrap().to_string(), "plain.txt");
    flip(".env");
    assert_eq!(ws.locate_for_rule("no-secrets", call, "x", true).unwrap().to_string(), "plain.txt");
    let pinned = ws.take_pinned("c1", "read_file", "x").unwrap();
    assert_eq!(ws.read(pinned, 0).unwrap(), "plain");
    assert!(ws.take_pinned("c1", "read_file", "x").is_none(), "taken once");
    assert_eq!(ws.locate_for_rule("no-env", call, "x", true).unwrap().to_string(), ".env");
    assert_eq!(ws.locate_for_rule("no-env", call, "x", true).unwrap().to_string(), ".env", "looked again: afresh");
    assert!(ws.take_pinned("c2", "read_file", "x").is_none(), "another call has no pin");
}

/// A file with two names is not written through, nor read unless allowed; an approval shows no diff of it.
#[cfg(unix)]
#[test]
fn hard_links_are_not_written_and_read_only_when_allowed() {
    let (dir, ws) = setup();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("f"), "outside").unwrap();
    fs::hard_link(outside.path().join("f"), dir.path().join("link")).unwrap();
    assert!(ws.write_file("link", "x").unwrap_err().contains("is a hard link (the file has 2 names"));
    assert!(ws.read_file("link", 0).unwrap_err().contains("read_file does not read it"));
    let target = ws.locate("link", true).unwrap();
    assert!(ws.current_text(&target, 1000).unwrap_err().contains("write_file does not write through it"));
    let allowing = ws.clone().with_hard_links(HardLinks::Allow);
    assert_eq!(allowing.read_file("link", 0).unwrap(), "outside");
    assert!(allowing.write_file("link", "x").is_err());
    assert_eq!(fs::read_to_string(outside.path().join("f")).unwrap(), "outside");
    // Deleting the name leaves the file's other name; then a new file of that name can be written.
    assert_eq!(ws.delete_file("link").unwrap(), "deleted link");
    assert_eq!(ws.write_file("link", "new").unwrap(), "wrote 3 bytes to link");
    assert_eq!(fs::read_to_string(outside.path().join("f")).unwrap(), "outside");
}

#[cfg(unix)]
#[test]
fn delete_file_on_a_link_to_a_folder_removes_the_link() {
    let (dir, ws) = setup();
    fs::create_dir(dir.path().join("folder")).unwrap();
    fs::write(dir.path().join("folder/kept.txt"), "k").unwrap();
    std::os::unix::fs::symlink("folder", dir.path().join("folder-link")).unwrap();
    assert_eq!(ws.delete_file("folder-link").unwrap(), "deleted folder-link");
    assert!(fs::symlink_metadata(dir.path().join("folder-link")).is_err());
    assert_eq!(fs::read_to_string(dir.path().join("folder/kept.txt")).unwrap(), "k");
}
