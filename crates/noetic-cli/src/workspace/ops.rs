//! The file operations of the built-in tools, each in two steps: resolve the argument (what the rules see), then
//! act on the resolved path through the workspace's capability dir.
//!
//! Only regular files are read or written: a FIFO, socket or device is refused after a `stat`, and the file is
//! opened non-blocking and checked again with `fstat`, so a FIFO swapped in between can never block a thread
//! that neither cancellation nor `/stop` could free.

use std::io::{self, Read, Seek, SeekFrom, Write};

use cap_std::fs::{File, Metadata, OpenOptions};

use super::{Workspace, WsPath};

/// Largest part of a file `read_file` returns; the rest is cut with a marker.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 500;

/// What the model reads for an I/O error; cap-std's "outside of the filesystem" means outside the workspace.
fn why(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::PermissionDenied && e.to_string().contains("outside of the filesystem") {
        "it leads outside the workspace (through a symbolic link)".to_owned()
    } else {
        e.to_string()
    }
}

fn not_regular(path: &WsPath, tool: &str, does: &str) -> String {
    format!("'{path}' is not a regular file (it is a FIFO, socket or device); {tool} {does} regular files only")
}

/// Opens `path` without blocking on a FIFO (`O_NONBLOCK`; it changes nothing for regular files).
fn open(ws: &Workspace, path: &WsPath, options: &mut OpenOptions) -> io::Result<File> {
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    ws.dir.open_with(path.arg(), options)
}

impl Workspace {
    /// Reads a resolved file from byte `offset`, at most [`MAX_READ_BYTES`], marking a cut.
    pub fn read_resolved(&self, path: &WsPath, offset: u64) -> Result<String, String> {
        let meta = self
            .dir
            .metadata(path.arg())
            .map_err(|e| format!("cannot read '{path}': {}; list_dir shows what exists", why(&e)))?;
        if meta.is_dir() {
            return Err(format!("'{path}' is a directory; use list_dir to see what it contains"));
        }
        let regular =
            |meta: &Metadata| if meta.is_file() { Ok(()) } else { Err(not_regular(path, "read_file", "reads")) };
        regular(&meta)?;
        let mut file = open(self, path, OpenOptions::new().read(true))
            .map_err(|e| format!("cannot open '{path}': {}", why(&e)))?;
        let meta = file.metadata().map_err(|e| format!("cannot read '{path}': {e}"))?;
        regular(&meta)?;
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

    /// The whole text of a resolved regular file as `write_file` would replace it (for an approval's diff):
    /// `None` when there is no such file yet; an error for a folder, a FIFO or device, or a file over
    /// `max_bytes`. Bytes that are not UTF-8 are shown as U+FFFD.
    pub fn current_text(&self, path: &WsPath, max_bytes: u64) -> Result<Option<String>, String> {
        let meta = match self.dir.metadata(path.arg()) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read '{path}': {}", why(&e))),
        };
        if !meta.is_file() {
            return Err(not_regular(path, "write_file", "writes"));
        }
        if meta.len() > max_bytes {
            return Err(format!("'{path}' has {} bytes, more than the {max_bytes} a diff is shown for", meta.len()));
        }
        let mut file = open(self, path, OpenOptions::new().read(true))
            .map_err(|e| format!("cannot open '{path}': {}", why(&e)))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(not_regular(path, "write_file", "writes"));
        }
        let mut bytes = Vec::new();
        (&mut file).take(max_bytes).read_to_end(&mut bytes).map_err(|e| format!("cannot read '{path}': {e}"))?;
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Writes a resolved file, creating missing parent directories.
    pub fn write_resolved(&self, path: &WsPath, content: &str) -> Result<String, String> {
        let not_a_file = || format!("'{path}' is a directory; write to a file path inside it");
        if path.is_root() {
            return Err(not_a_file());
        }
        match self.dir.metadata(path.arg()) {
            Ok(meta) if meta.is_dir() => return Err(not_a_file()),
            Ok(meta) if !meta.is_file() => return Err(not_regular(path, "write_file", "writes")),
            _ => {}
        }
        if let Some(parent) = path.0.parent().filter(|p| !p.as_os_str().is_empty()) {
            match self.dir.metadata(parent) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => return Err(format!("cannot write '{path}': a part of its folder is a file, not a folder")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => self
                    .dir
                    .create_dir_all(parent)
                    .map_err(|e| format!("cannot create the folders for '{path}': {}", why(&e)))?,
                Err(e) => return Err(format!("cannot write '{path}': {}", why(&e))),
            }
        }
        let mut file = open(self, path, OpenOptions::new().write(true).create(true).truncate(true))
            .map_err(|e| format!("cannot write '{path}': {}", why(&e)))?;
        let meta = file.metadata().map_err(|e| format!("cannot write '{path}': {e}"))?;
        if !meta.is_file() {
            return Err(not_regular(path, "write_file", "writes"));
        }
        file.write_all(content.as_bytes()).map_err(|e| format!("cannot write '{path}': {e}"))?;
        Ok(format!("wrote {} bytes to {path}", content.len()))
    }

    /// Lists a resolved directory: one entry a line, folders ending with `/`, sorted, at most
    /// [`MAX_LIST_ENTRIES`].
    pub fn list_resolved(&self, path: &WsPath) -> Result<String, String> {
        let entries = self.dir.read_dir(path.arg()).map_err(|e| format!("cannot list '{path}': {}", why(&e)))?;
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

    /// Deletes a resolved file (not a directory; resolve it with [`Workspace::resolve_entry`], so that a
    /// symbolic link is removed itself and its target stays).
    pub fn delete_resolved(&self, path: &WsPath) -> Result<String, String> {
        let meta = self.dir.symlink_metadata(path.arg()).map_err(|e| format!("cannot delete '{path}': {}", why(&e)))?;
        if meta.is_dir() {
            return Err(format!("'{path}' is a directory; delete_file removes files only"));
        }
        // `unlinkat` removes the entry named, never what a link points to.
        self.dir.remove_file(path.arg()).map_err(|e| format!("cannot delete '{path}': {}", why(&e)))?;
        Ok(format!("deleted {path}"))
    }
}
