//! The file operations of the built-in tools, on a [`Located`] target: each opens the last name beneath the located
//! folder without following a link, so it acts on the path the rules checked. A link found there (swapped in since
//! the target was located) or a file that is no longer at that path gives [`Failure::Changed`]: the caller locates
//! the path again.
//!
//! Only regular files are read or written: a FIFO, socket or device is refused after a look at the entry, and the
//! file is opened non-blocking and checked again on the opened handle, so a FIFO swapped in between can never
//! block a thread that neither cancellation nor `/stop` could free. The number of names (hard links) is checked on
//! the opened handle too.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Seek, SeekFrom, Write};

use cap_std::fs::{Dir, File, Metadata};

use super::walk::{Access, Located, is_link, open_dir_nofollow, open_nofollow, opened_at};
use super::{HardLinks, Workspace, WsPath};

/// Largest part of a file `read_file` returns; the rest is cut with a marker.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 500;

/// Why a file operation did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Refused or failed, with what the model reads.
    Refused(String),
    /// The target is not where it was located (a symbolic link swapped in, a folder moved): locate it again.
    Changed,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Refused(message)
    }
}

/// What the model reads for an I/O error.
fn why(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::NotFound { "it does not exist".to_owned() } else { e.to_string() }
}

fn not_regular(path: &WsPath, tool: &str, does: &str) -> Failure {
    Failure::Refused(format!(
        "'{path}' is not a regular file (it is a FIFO, socket or device); {tool} {does} regular files only"
    ))
}

/// How many names the file has (hard links); 1 where the platform does not say.
fn names(meta: &Metadata) -> u64 {
    #[cfg(unix)]
    {
        cap_std::fs::MetadataExt::nlink(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        1
    }
}

fn write_through_hard_link(path: &WsPath, names: u64) -> String {
    format!(
        "'{path}' is a hard link (the file has {names} names, and the others may be outside the workspace), so \
         write_file does not write through it; delete_file it first, then write_file makes a new file of that name"
    )
}

/// The one entry of its folder a target is: `Ok(None)` for the folder itself, `Err(())` when folders on the way
/// do not exist.
fn single(target: &Located) -> Result<Option<&OsStr>, ()> {
    match target.names.as_slice() {
        [] => Ok(None),
        [name] => Ok(Some(name)),
        _ => Err(()),
    }
}

/// Opens the regular file `name` of `dir` (at `path`), checking what it is on the opened handle: that it is still
/// a regular file, and where it is.
fn open_regular(
    ws: &Workspace,
    (dir, name, path): (&Dir, &OsStr, &WsPath),
    access: Access,
    (tool, does): (&str, &str),
) -> Result<(File, Metadata), Failure> {
    let file = open_nofollow(dir, name, access).map_err(|e| {
        if is_link(dir, name) {
            Failure::Changed
        } else {
            Failure::Refused(format!("cannot open '{path}': {}", why(&e)))
        }
    })?;
    let meta = file.metadata().map_err(|e| format!("cannot open '{path}': {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(path, tool, does));
    }
    if !opened_at(ws, &file, path) {
        return Err(Failure::Changed);
    }
    Ok((file, meta))
}

/// Looks at the entry `name` of `dir` before opening it: a link means the target changed; a folder, FIFO, socket
/// or device is refused without being opened. `Ok(None)` when there is no such entry.
fn look(dir: &Dir, name: &OsStr, path: &WsPath, (tool, does): (&str, &str)) -> Result<Option<Metadata>, Failure> {
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.file_type().is_symlink() => Err(Failure::Changed),
        Ok(meta) if meta.is_dir() && tool == "read_file" => {
            Err(Failure::Refused(format!("'{path}' is a directory; use list_dir to see what it contains")))
        }
        Ok(meta) if meta.is_dir() => {
            Err(Failure::Refused(format!("'{path}' is a directory; write to a file path inside it")))
        }
        Ok(meta) if !meta.is_file() => Err(not_regular(path, tool, does)),
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::Refused(format!("cannot open '{path}': {e}"))),
    }
}

impl Workspace {
    /// Reads a located file from byte `offset`, at most [`MAX_READ_BYTES`], marking a cut.
    pub fn read(&self, target: Located, offset: u64) -> Result<String, Failure> {
        let path = &target.path;
        let absent =
            || Failure::Refused(format!("cannot read '{path}': it does not exist; list_dir shows what exists"));
        let name = match single(&target) {
            Ok(Some(name)) => name,
            Ok(None) => return Err(format!("'{path}' is a directory; use list_dir to see what it contains").into()),
            Err(()) => return Err(absent()),
        };
        let how = ("read_file", "reads");
        look(&target.dir, name, path, how)?.ok_or_else(absent)?;
        let (mut file, meta) = open_regular(self, (&target.dir, name, path), Access::Read, how)?;
        let links = names(&meta);
        if links > 1 && self.hard_links == HardLinks::Refuse {
            return Err(format!(
                "'{path}' is a hard link (the file has {links} names): the others may be outside the workspace or \
                 protected by a rule, so read_file does not read it; ask the user for what you need from it (they \
                 can allow reading hard links with --hard-links allow)"
            )
            .into());
        }
        file.seek(SeekFrom::Start(offset)).map_err(|e| format!("cannot read '{path}': {e}"))?;
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_READ_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read '{path}': {e}"))?;
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

    /// The whole text of a located regular file as `write_file` would replace it (for an approval's diff):
    /// `None` when there is no such file yet; an error for a folder, a FIFO or device, a hard link (which
    /// `write_file` refuses), or a file over `max_bytes`. Bytes that are not UTF-8 are shown as U+FFFD.
    pub fn current_text(&self, target: &Located, max_bytes: u64) -> Result<Option<String>, String> {
        let path = &target.path;
        let changed = || format!("'{path}' changed while it was read (a symbolic link was swapped in)");
        let explain = |failure: Failure| match failure {
            Failure::Refused(why) => why,
            Failure::Changed => changed(),
        };
        let name = match single(target) {
            Ok(Some(name)) => name,
            Ok(None) => return Err(format!("'{path}' is a directory; write to a file path inside it")),
            Err(()) => return Ok(None),
        };
        let how = ("write_file", "writes");
        let Some(meta) = look(&target.dir, name, path, how).map_err(explain)? else { return Ok(None) };
        if meta.len() > max_bytes {
            return Err(format!("'{path}' has {} bytes, more than the {max_bytes} a diff is shown for", meta.len()));
        }
        let (file, meta) = open_regular(self, (&target.dir, name, path), Access::Read, how).map_err(explain)?;
        if names(&meta) > 1 {
            return Err(write_through_hard_link(path, names(&meta)));
        }
        let mut bytes = Vec::new();
        file.take(max_bytes).read_to_end(&mut bytes).map_err(|e| format!("cannot read '{path}': {e}"))?;
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Writes a located file, creating missing folders on the way. A file with more than one name is not written.
    pub fn write(&self, target: Located, content: &str) -> Result<String, Failure> {
        let path = target.path.clone();
        let Some((name, folders)) = target.names.split_last() else {
            return Err(format!("'{path}' is a directory; write to a file path inside it").into());
        };
        let mut dir = target.dir;
        for folder in folders {
            dir = self.make_folder(dir, folder, &path)?;
        }
        let how = ("write_file", "writes");
        look(&dir, name, &path, how)?;
        let (mut file, meta) = open_regular(self, (&dir, name, &path), Access::Write, how)?;
        if names(&meta) > 1 {
            return Err(write_through_hard_link(&path, names(&meta)).into());
        }
        // Emptied only now: a hard link or a file of the wrong kind is left as it was.
        file.set_len(0).map_err(|e| format!("cannot write '{path}': {e}"))?;
        file.write_all(content.as_bytes()).map_err(|e| format!("cannot write '{path}': {e}"))?;
        Ok(format!("wrote {} bytes to {path}", content.len()))
    }

    /// Creates the folder `name` in `dir` unless it exists, and opens it without following a link.
    fn make_folder(&self, dir: Dir, name: &OsString, path: &WsPath) -> Result<Dir, Failure> {
        match dir.create_dir(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create the folders for '{path}': {e}").into()),
        }
        open_dir_nofollow(&dir, name).map_err(|e| {
            if is_link(&dir, name) {
                Failure::Changed
            } else {
                Failure::Refused(format!("cannot write '{path}': a part of its folder is not a folder ({e})"))
            }
        })
    }

    /// Lists a located folder: one entry a line, folders ending with `/`, sorted, at most [`MAX_LIST_ENTRIES`].
    pub fn list(&self, target: Located) -> Result<String, Failure> {
        let path = &target.path;
        let dir = match single(&target) {
            Ok(None) => target.dir,
            Ok(Some(name)) => open_dir_nofollow(&target.dir, name).map_err(|e| {
                if is_link(&target.dir, name) {
                    Failure::Changed
                } else {
                    Failure::Refused(format!("cannot list '{path}': {}", why(&e)))
                }
            })?,
            Err(()) => return Err(format!("cannot list '{path}': it does not exist").into()),
        };
        if !opened_at(self, &dir, path) {
            return Err(Failure::Changed);
        }
        let entries = dir.entries().map_err(|e| format!("cannot list '{path}': {e}"))?;
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
            return Ok(format!("{path} is empty"));
        }
        names.truncate(MAX_LIST_ENTRIES);
        let mut text = names.join("\n");
        if total > MAX_LIST_ENTRIES {
            text.push_str(&format!("\n[… {} more entries not shown; list a subfolder]", total - MAX_LIST_ENTRIES));
        }
        Ok(text)
    }

    /// Deletes a located file (not a folder; locate it without following the last part, so that a symbolic link
    /// is removed itself and its target stays). Removing one name of a hard-linked file leaves the others.
    pub fn delete(&self, target: Located) -> Result<String, Failure> {
        let path = &target.path;
        let name = match single(&target) {
            Ok(Some(name)) => name,
            Ok(None) => return Err(format!("'{path}' is a directory; delete_file removes files only").into()),
            Err(()) => return Err(format!("cannot delete '{path}': it does not exist").into()),
        };
        let meta = target.dir.symlink_metadata(name).map_err(|e| format!("cannot delete '{path}': {}", why(&e)))?;
        if meta.is_dir() {
            return Err(format!("'{path}' is a directory; delete_file removes files only").into());
        }
        if !opened_at(self, &target.dir, &target.dir_path()) {
            return Err(Failure::Changed);
        }
        // `unlinkat` in the opened folder removes the entry named, never what a link points to.
        target.dir.remove_file(name).map_err(|e| format!("cannot delete '{path}': {}", why(&e)))?;
        Ok(format!("deleted {path}"))
    }
}
