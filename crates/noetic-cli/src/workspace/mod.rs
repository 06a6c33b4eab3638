//! The workspace: the one directory the built-in tools may touch.
//!
//! A path argument is used in two steps. [`Workspace::resolve`] turns what the model wrote into a
//! [`WsPath`]: the workspace-relative path with `.` and `..` applied and every symbolic link inside the workspace
//! replaced by its target, so `/abs/ws/README.md` and `sub/link-to-root/README.md` both become `README.md`. The
//! rules check this path (see `rules`), so a rule cannot be dodged by spelling a file differently. A path that
//! climbs out with `..`, an absolute path elsewhere and a symbolic link pointing outside are refused with an error
//! the model can read.
//!
//! The operations then open the resolved path through a `cap_std::fs::Dir` opened on the workspace root, which
//! resolves every path beneath that directory in one step (`openat2` with `RESOLVE_BENEATH` where the kernel has
//! it). A symbolic link swapped in after the first step can therefore still not lead outside: the open fails.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;

mod ops;
#[cfg(test)]
mod tests;

/// Most symbolic links followed while resolving one path (as Linux's `MAXSYMLINKS`); more is taken as a loop.
const MAX_LINKS: usize = 40;

/// A directory the tools are confined to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The root, canonical (symbolic links resolved).
    root: PathBuf,
    /// The root as the user gave it, made absolute (absolute tool paths may use this spelling too).
    given: PathBuf,
    /// The root as a capability: every file operation goes through it.
    dir: Arc<Dir>,
}

/// A resolved path: relative to the workspace root, only plain names, no symbolic link left inside the workspace
/// (the last part may be a link for [`Workspace::resolve_entry`]). Shown with `/` separators, the root as `.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsPath(PathBuf);

impl WsPath {
    /// The path to hand to the capability dir (`.` for the root).
    fn arg(&self) -> &Path {
        if self.0.as_os_str().is_empty() { Path::new(".") } else { &self.0 }
    }

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
        Ok(Workspace { root, given, dir: Arc::new(capability) })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path argument inside the workspace, following every symbolic link (as opening it would).
    pub fn resolve(&self, raw: &str) -> Result<WsPath, String> {
        self.resolve_with(raw, true)
    }

    /// Resolves a path argument inside the workspace, leaving a symbolic link in the last part as it is: the
    /// entry itself, which is what deleting the path removes.
    pub fn resolve_entry(&self, raw: &str) -> Result<WsPath, String> {
        self.resolve_with(raw, false)
    }

    fn resolve_with(&self, raw: &str, follow_last: bool) -> Result<WsPath, String> {
        if raw.trim().is_empty() {
            return Err("the path is empty; give a path relative to the workspace, such as \"notes.txt\"".into());
        }
        let outside = || {
            format!(
                "the path '{raw}' is outside the workspace; use a path relative to the workspace root (no '..' \
                 climbing out of it, no absolute paths elsewhere)"
            )
        };
        let link_outside = || {
            format!(
                "the path '{raw}' goes through a symbolic link that points outside the workspace; use a path \
                 inside the workspace"
            )
        };
        let mut pending: VecDeque<OsString> = match self.inside(Path::new(raw)) {
            Some(rel) => parts(&rel),
            None => return Err(outside()),
        };
        let mut done = PathBuf::new();
        let mut links = 0;
        while let Some(part) = pending.pop_front() {
            if part == ".." {
                if !done.pop() {
                    return Err(if links > 0 { link_outside() } else { outside() });
                }
                continue;
            }
            let candidate = done.join(&part);
            let is_link = match self.dir.symlink_metadata(&candidate) {
                Ok(meta) => meta.file_type().is_symlink(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(format!("cannot resolve '{raw}': {e}")),
            };
            if !is_link || (pending.is_empty() && !follow_last) {
                done = candidate;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("the path '{raw}' goes through too many symbolic links (a loop?)"));
            }
            let target = self.dir.read_link_contents(&candidate).map_err(|e| format!("cannot resolve '{raw}': {e}"))?;
            // A relative target continues from the link's folder, an absolute one from the root (if inside).
            let target = if target.is_absolute() {
                done = PathBuf::new();
                self.inside(&target).ok_or_else(link_outside)?
            } else {
                target
            };
            for p in parts(&target).into_iter().rev() {
                pending.push_front(p);
            }
        }
        Ok(WsPath(done))
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
