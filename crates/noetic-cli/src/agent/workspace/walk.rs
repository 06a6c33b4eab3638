//! Locating a path argument beneath the workspace root one part at a time, opening each folder without following a
//! link, so that the path found is the path of the folders actually opened (see the module above).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, File};

use super::{Workspace, WsPath, parts};

/// Most symbolic links followed while locating one path (as Linux's `MAXSYMLINKS`); more is taken as a loop.
const MAX_LINKS: usize = 40;
/// Most times a folder on the way is looked at again because it changed between a look and its opening.
const MAX_RETRIES: usize = 8;

/// Where a path leads inside the workspace: the deepest existing folder on the way, opened, and the names below it.
#[derive(Debug)]
pub struct Located {
    /// The folder holding the target, or the target itself when `names` is empty; opened without following links.
    pub(super) dir: Dir,
    /// The names below `dir` leading to the target: none for `dir` itself, one for an entry of it (which may not
    /// exist), more when folders on the way do not exist yet (`write_file` creates them).
    pub(super) names: Vec<OsString>,
    /// The target's workspace-relative path.
    pub(super) path: WsPath,
}

impl Located {
    /// The target's workspace-relative path: what the rules match.
    pub fn path(&self) -> &WsPath {
        &self.path
    }

    /// The path of `dir`.
    pub(super) fn dir_path(&self) -> WsPath {
        let mut path = self.path.0.clone();
        for _ in &self.names {
            path.pop();
        }
        WsPath(path)
    }
}

/// What an entry is, looked at without following a link.
enum Entry {
    Missing,
    Link,
    Folder,
    Other,
}

fn entry(dir: &Dir, name: &OsStr) -> io::Result<Entry> {
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.file_type().is_symlink() => Ok(Entry::Link),
        Ok(meta) if meta.is_dir() => Ok(Entry::Folder),
        Ok(_) => Ok(Entry::Other),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
        Err(e) => Err(e),
    }
}

/// True when `name` in `dir` is (now) a symbolic link.
pub(super) fn is_link(dir: &Dir, name: &OsStr) -> bool {
    matches!(entry(dir, name), Ok(Entry::Link))
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// For reading.
    Read,
    /// For writing, created if missing (never truncated on opening: the caller checks the file first).
    Write,
}

/// Opens the entry `name` of `dir` (one plain part), never following a link, and without blocking on a FIFO.
#[cfg(unix)]
pub(super) fn open_nofollow(dir: &Dir, name: &OsStr, access: Access) -> io::Result<File> {
    use rustix::fs::OFlags;
    let flags = match access {
        Access::Read => OFlags::RDONLY,
        Access::Write => OFlags::WRONLY | OFlags::CREATE,
    };
    Ok(File::from_std(std::fs::File::from(open_at(dir, name, flags)?)))
}

#[cfg(unix)]
fn open_at(dir: &Dir, name: &OsStr, flags: rustix::fs::OFlags) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    Ok(rustix::fs::openat(dir, name, flags, Mode::from_bits_truncate(0o666))?)
}

/// Opens the folder `name` of `dir` (one plain part) without following a link.
#[cfg(unix)]
pub(super) fn open_dir_nofollow(dir: &Dir, name: &OsStr) -> io::Result<Dir> {
    use rustix::fs::OFlags;
    let fd = open_at(dir, name, OFlags::RDONLY | OFlags::DIRECTORY)?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}

/// Elsewhere the entry is opened through the capability dir, which keeps it beneath the workspace.
#[cfg(not(unix))]
pub(super) fn open_nofollow(dir: &Dir, name: &OsStr, access: Access) -> io::Result<File> {
    let mut options = cap_std::fs::OpenOptions::new();
    match access {
        Access::Read => options.read(true),
        Access::Write => options.write(true).create(true),
    };
    dir.open_with(name, &options)
}

#[cfg(not(unix))]
pub(super) fn open_dir_nofollow(dir: &Dir, name: &OsStr) -> io::Result<Dir> {
    dir.open_dir(name)
}

/// True when `file` is open on `path` (of `ws`) right now. On Linux the kernel says which path an open file has
/// (`/proc/self/fd`): a folder renamed while the path was walked, or moved while a rule's pin waited, shows here.
/// Without `/proc` the no-follow walk stands alone.
#[cfg(target_os = "linux")]
pub(super) fn opened_at(ws: &Workspace, file: &impl std::os::fd::AsFd, path: &WsPath) -> bool {
    use std::os::fd::AsRawFd;
    match std::fs::read_link(format!("/proc/self/fd/{}", file.as_fd().as_raw_fd())) {
        Ok(actual) => actual == ws.root.join(&path.0),
        Err(_) => true,
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn opened_at<T>(_ws: &Workspace, _file: &T, _path: &WsPath) -> bool {
    true
}

impl Workspace {
    /// Locates a path argument inside the workspace, following every symbolic link inside it (as opening it
    /// would) — or, with `follow_last` false, all but one in the last part: the entry itself, which is what
    /// deleting the path removes.
    pub fn locate(&self, raw: &str, follow_last: bool) -> Result<Located, String> {
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
        let cannot = |e: io::Error| format!("cannot resolve '{raw}': {e}");
        let mut pending: VecDeque<OsString> = match self.inside(Path::new(raw)) {
            Some(rel) => parts(&rel),
            None => return Err(outside()),
        };
        // The folders opened so far, the root first, and the path of the last one.
        let mut opened: Vec<Dir> = vec![self.dir.try_clone().map_err(cannot)?];
        let mut done = PathBuf::new();
        let mut names: Vec<OsString> = Vec::new();
        let (mut links, mut retries) = (0, 0);
        while let Some(part) = pending.pop_front() {
            if part == ".." {
                // Below a name that does not exist, `..` undoes that name; above, it returns to the folder opened
                // before (never opening `..`, which could lead anywhere).
                if names.pop().is_none() {
                    if opened.len() == 1 {
                        return Err(if links > 0 { link_outside() } else { outside() });
                    }
                    opened.pop();
                    done.pop();
                }
                continue;
            }
            let Some(top) = opened.last().filter(|_| names.is_empty()) else {
                names.push(part);
                continue;
            };
            let last = pending.is_empty();
            match entry(top, &part).map_err(cannot)? {
                Entry::Link if !last || follow_last => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(format!("the path '{raw}' goes through too many symbolic links (a loop?)"));
                    }
                    let target = match top.read_link_contents(&part) {
                        Ok(target) => target,
                        // No longer a link: look at it again.
                        Err(e) if e.kind() == io::ErrorKind::InvalidInput && retries < MAX_RETRIES => {
                            retries += 1;
                            pending.push_front(part);
                            continue;
                        }
                        Err(e) => return Err(cannot(e)),
                    };
                    // A relative target continues from the link's folder, an absolute one from the root (if inside).
                    let target = if target.is_absolute() {
                        opened.truncate(1);
                        done = PathBuf::new();
                        self.inside(&target).ok_or_else(link_outside)?
                    } else {
                        target
                    };
                    for p in parts(&target).into_iter().rev() {
                        pending.push_front(p);
                    }
                }
                // The last part is not opened here: the operation opens it, as it needs.
                Entry::Missing | Entry::Link | Entry::Folder | Entry::Other if last => names.push(part),
                Entry::Missing => names.push(part),
                Entry::Folder => match open_dir_nofollow(top, &part) {
                    Ok(dir) => {
                        opened.push(dir);
                        done.push(&part);
                    }
                    // It changed between the look and the opening (a link swapped in): look again.
                    Err(_) if retries < MAX_RETRIES => {
                        retries += 1;
                        pending.push_front(part);
                    }
                    Err(e) => return Err(cannot(e)),
                },
                Entry::Link | Entry::Other => {
                    done.push(&part);
                    return Err(format!(
                        "the path '{raw}' goes through '{}', which is a file, not a folder",
                        WsPath(done)
                    ));
                }
            }
        }
        let path = WsPath(names.iter().fold(done, |path, name| path.join(name)));
        let dir = opened.pop().ok_or_else(|| cannot(io::ErrorKind::NotFound.into()))?;
        Ok(Located { dir, names, path })
    }
}
