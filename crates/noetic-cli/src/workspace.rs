//! The workspace: the one directory the built-in tools may touch.
//!
//! Every path argument is resolved inside the workspace root. A path that climbs out with `..`, an absolute path
//! elsewhere, and a path that goes through a symbolic link pointing outside are refused with an error the model
//! can read. The checks run on the path as it is when the tool runs; the tools are for a cooperative agent on
//! the user's machine, not a sandbox against a hostile process racing them.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Largest part of a file `read_file` returns; the rest is cut with a marker.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 500;

/// A directory the tools are confined to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The root, canonical (symbolic links resolved).
    root: PathBuf,
    /// The root as the user gave it, made absolute (absolute tool paths may use this spelling too).
    given: PathBuf,
}

impl Workspace {
    /// Opens `dir` as the workspace. It must exist and be a directory.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let given =
            std::path::absolute(dir).map_err(|e| format!("cannot use '{}' as the workspace: {e}", dir.display()))?;
        let root = fs::canonicalize(dir).map_err(|e| {
            format!("the workspace '{}' cannot be opened ({e}); create it or pass --workspace DIR", dir.display())
        })?;
        if !root.is_dir() {
            return Err(format!("the workspace '{}' is not a directory; pass --workspace DIR", dir.display()));
        }
        Ok(Workspace { root, given })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path argument to a path inside the workspace, or says why it is refused.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        if raw.trim().is_empty() {
            return Err("the path is empty; give a path relative to the workspace, such as \"notes.txt\"".into());
        }
        let path = Path::new(raw);
        let joined = if path.is_absolute() {
            match path.strip_prefix(&self.given) {
                Ok(rest) => self.root.join(rest),
                Err(_) => path.to_path_buf(),
            }
        } else {
            self.root.join(path)
        };
        let lexical = normalize(&joined);
        let outside = || {
            format!(
                "the path '{raw}' is outside the workspace; use a path relative to the workspace root (no '..' \
                 climbing out of it, no absolute paths elsewhere)"
            )
        };
        let Some(lexical) = lexical else { return Err(outside()) };
        let Ok(rest) = lexical.strip_prefix(&self.root) else { return Err(outside()) };
        // Walk down from the root: every part that exists must resolve (symbolic links followed) inside the root.
        let mut current = self.root.clone();
        for part in rest.components() {
            current.push(part);
            let Ok(meta) = fs::symlink_metadata(&current) else { break };
            match fs::canonicalize(&current) {
                Ok(real) if real.starts_with(&self.root) => {}
                Ok(_) => {
                    return Err(format!(
                        "the path '{raw}' goes through a symbolic link that points outside the workspace; use a \
                         path inside the workspace"
                    ));
                }
                Err(_) if meta.file_type().is_symlink() => {
                    return Err(format!(
                        "the path '{raw}' goes through a symbolic link whose target does not exist; use a path \
                         inside the workspace"
                    ));
                }
                Err(e) => return Err(format!("cannot resolve '{raw}': {e}")),
            }
        }
        Ok(fs::canonicalize(&lexical).unwrap_or(lexical))
    }

    /// The path as shown to the model: relative to the root.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// Reads a file from byte `offset`, at most [`MAX_READ_BYTES`], marking a cut.
    pub fn read_file(&self, raw: &str, offset: u64) -> Result<String, String> {
        let path = self.resolve(raw)?;
        let meta = fs::metadata(&path).map_err(|e| format!("cannot read '{raw}': {e}; list_dir shows what exists"))?;
        if meta.is_dir() {
            return Err(format!("'{raw}' is a directory; use list_dir to see what it contains"));
        }
        let mut file = fs::File::open(&path).map_err(|e| format!("cannot open '{raw}': {e}"))?;
        if offset > 0 {
            std::io::copy(&mut (&mut file).take(offset), &mut std::io::sink())
                .map_err(|e| format!("cannot read '{raw}': {e}"))?;
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_READ_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read '{raw}': {e}"))?;
        let cut = bytes.len() > MAX_READ_BYTES;
        bytes.truncate(MAX_READ_BYTES);
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if cut {
            let next = offset + MAX_READ_BYTES as u64;
            text.push_str(&format!(
                "\n[… truncated: {} bytes in the file; showing {MAX_READ_BYTES} bytes from offset {offset}; call \
                 read_file with offset {next} for more]",
                meta.len()
            ));
        }
        Ok(text)
    }

    /// Writes a file, creating missing parent directories.
    pub fn write_file(&self, raw: &str, content: &str) -> Result<String, String> {
        let path = self.resolve(raw)?;
        if path.is_dir() {
            return Err(format!("'{raw}' is a directory; write to a file path inside it"));
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("cannot create the folders for '{raw}': {e}"))?;
        }
        fs::write(&path, content).map_err(|e| format!("cannot write '{raw}': {e}"))?;
        Ok(format!("wrote {} bytes to {}", content.len(), self.display(&path)))
    }

    /// Lists a directory: one entry a line, folders ending with `/`, sorted, at most [`MAX_LIST_ENTRIES`].
    pub fn list_dir(&self, raw: &str) -> Result<String, String> {
        let path = self.resolve(raw)?;
        let entries = fs::read_dir(&path).map_err(|e| format!("cannot list '{raw}': {e}"))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if is_dir { format!("{name}/") } else { name }
            })
            .collect();
        names.sort();
        let total = names.len();
        if total == 0 {
            return Ok(format!("{} is empty", self.display(&path)));
        }
        names.truncate(MAX_LIST_ENTRIES);
        let mut text = names.join("\n");
        if total > MAX_LIST_ENTRIES {
            text.push_str(&format!("\n[… {} more entries not shown; list a subfolder]", total - MAX_LIST_ENTRIES));
        }
        Ok(text)
    }

    /// Deletes a file (not a directory).
    pub fn delete_file(&self, raw: &str) -> Result<String, String> {
        let path = self.resolve(raw)?;
        let meta = fs::metadata(&path).map_err(|e| format!("cannot delete '{raw}': {e}"))?;
        if meta.is_dir() {
            return Err(format!("'{raw}' is a directory; delete_file removes files only"));
        }
        fs::remove_file(&path).map_err(|e| format!("cannot delete '{raw}': {e}"))?;
        Ok(format!("deleted {}", self.display(&path)))
    }
}

/// Removes `.` and applies `..` lexically; `None` when `..` climbs above the filesystem root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

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
}
