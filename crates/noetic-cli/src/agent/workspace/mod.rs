//! The workspace: the one directory the built-in tools may touch.
//!
//! A path argument is used in two steps. [`Workspace::locate`] walks what the model wrote one part at a time,
//! opening each folder beneath the workspace root without following links (a link is read and its target walked
//! in turn), and returns a [`Located`]: the opened folder that holds the target, the names below it, and the
//! target's [`WsPath`] — the workspace-relative path with `.` and `..` applied and every symbolic link inside the
//! workspace replaced by its target, so `/abs/ws/README.md` and `sub/link-to-root/README.md` both become
//! `README.md`. The rules check this path (see `rules`), so a rule cannot be dodged by spelling a file
//! differently. A path that climbs out with `..`, an absolute path elsewhere and a symbolic link pointing outside
//! are refused with an error the model can read.
//!
//! The operations (see `ops`) then act on that opened folder, opening the last name without following a link. So
//! the file a tool reads or writes is the one at the path the rules checked: a link swapped in between (a racing
//! process) is not followed, and the tool locates the path again and checks it again instead (see `tools`). A
//! rule's check pins the `Located` for the call (see `pins`), so that the tool acts on what the rule saw.
//!
//! A file with more than one name (a hard link) may have its other names outside the workspace or under a name a
//! rule protects; nothing here can tell. `write_file` never writes through one, and `read_file` reads one only
//! when the user allows it ([`HardLinks::Allow`]).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;

mod ops;
mod pins;
#[cfg(test)]
mod tests;
mod walk;

pub use ops::Failure;
pub use walk::Located;

/// Whether `read_file` reads a file that has more than one name (a hard link). `write_file` never writes through
/// one, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HardLinks {
    /// Refuse to read it: its other names are unknown, and may be outside the workspace or protected by a rule.
    #[default]
    Refuse,
    /// Read it (the user trusts the hard links in this workspace).
    Allow,
}

/// A directory the tools are confined to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The root, canonical (symbolic links resolved).
    root: PathBuf,
    /// The root as the user gave it, made absolute (absolute tool paths may use this spelling too).
    given: PathBuf,
    /// The root as a capability: every file operation goes through it.
    dir: Arc<Dir>,
    /// Whether `read_file` reads hard links.
    hard_links: HardLinks,
    /// What the rules located for calls whose tools have not run yet.
    pins: Arc<pins::Pins>,
}

/// A resolved path: relative to the workspace root, only plain names, no symbolic link left inside the workspace
/// (the last part may be a link when located without following it). Shown with `/` separators, the root as `.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsPath(PathBuf);

impl WsPath {
    /// True for the workspace root.
    pub fn is_root(&self) -> bool {
        self.0.as_os_str().is_empty()
    }
}

impl fmt::Display for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        let parts: Vec<_> = self.0.iter().map(|p| p.to_string_lossy()).collect();
        f.write_str(&parts.join("/"))
    }
}

impl Workspace {
    /// Opens `dir` as the workspace. It must exist and be a directory.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let given =
            std::path::absolute(dir).map_err(|e| format!("cannot use '{}' as the workspace: {e}", dir.display()))?;
        let root = std::fs::canonicalize(dir).map_err(|e| {
            format!("the workspace '{}' cannot be opened ({e}); create it or pass --workspace DIR", dir.display())
        })?;
        if !root.is_dir() {
            return Err(format!("the workspace '{}' is not a directory; pass --workspace DIR", dir.display()));
        }
        let capability = Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|e| format!("the workspace '{}' cannot be opened ({e}); check its permissions", dir.display()))?;
        Ok(Workspace { root, given, dir: Arc::new(capability), hard_links: HardLinks::default(), pins: Arc::default() })
    }

    /// The same workspace, reading hard links or not as `policy` says.
    pub fn with_hard_links(mut self, policy: HardLinks) -> Self {
        self.hard_links = policy;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The part of `path` below the root: `path` itself when relative, else stripped of the root (either
    /// spelling); `None` for an absolute path elsewhere.
    fn inside(&self, path: &Path) -> Option<PathBuf> {
        if !path.is_absolute() {
            return Some(path.to_path_buf());
        }
        let rest = path.strip_prefix(&self.given).or_else(|_| path.strip_prefix(&self.root)).ok()?;
        Some(rest.to_path_buf())
    }
}

/// The parts of a relative path, `.` dropped, `..` kept.
fn parts(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}
