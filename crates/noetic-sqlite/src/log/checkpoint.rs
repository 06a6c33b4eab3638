//! Checkpoints off the writer thread. SQLite copies the WAL back into the file (a checkpoint) in the commit that
//! takes the WAL past 1000 pages, so one append in ~250 waited for it, and the writer thread spent about as much time
//! checkpointing as writing its commits' pages. The writer connection's WAL hook now only tells a thread of the
//! store's own each time the WAL has grown by a thousand pages; that thread runs a `PASSIVE` checkpoint on a
//! connection of its own (it never waits for the writer; the writer starts the WAL over at its next commit when the
//! checkpoint got to the WAL's end, which it does when the writer paused meanwhile). When commits keep coming, the
//! commit that takes the WAL past [`INLINE_AT`] pages checkpoints what is left itself: the WAL holds at most ~4000
//! pages (16 MB at 4 KB a page), where SQLite's own checkpoints kept it near 1000.

use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags};

/// WAL pages after which a checkpoint is asked for (SQLite's own default for its automatic checkpoints).
const CHECKPOINT_AT: c_int = 1000;

/// WAL pages after which the committing connection checkpoints itself: commits come back to back, with no pause
/// long enough for the thread's checkpoint to get through to the WAL's end (which the WAL needs to start over).
const INLINE_AT: c_int = 4 * CHECKPOINT_AT;

/// Checkpoints in a row at most, while the writer keeps adding frames.
const CATCH_UP: usize = 4;

/// The checkpoint thread; ended by [`Checkpointer::stop`] (the writer's connection must outlive it).
pub(crate) struct Checkpointer {
    thread: Option<JoinHandle<()>>,
    // What the thread did, for the tests (the thread and the hook write them).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    progress: Progress,
}

/// What the checkpoint thread did.
#[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
struct Progress {
    /// Checkpoints the thread ran.
    done: Arc<AtomicU64>,
    /// WAL frames back in the file after its last checkpoint.
    copied: Arc<AtomicI64>,
    /// Checkpoints asked for (each a round of up to [`CATCH_UP`]) and rounds run.
    asked: Arc<AtomicU64>,
    rounds: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Starts the thread checkpointing `path` and hands `writer`'s checkpoints to it. `None` (and the writer keeps
    /// checkpointing as SQLite does by itself) when the thread's connection cannot be opened or the hook cannot be
    /// set.
    pub(crate) fn start(writer: &mut Connection, path: &Path) -> Option<Checkpointer> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
        conn.busy_timeout(Duration::from_secs(5)).ok()?;
        // Reading the journal mode opens the WAL for this connection; a connection that has not read the file yet
        // takes it for a rollback-journal file, and its checkpoints do nothing (and answer -1).
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).ok()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return None;
        }
        let (ask, waiting) = mpsc::sync_channel::<()>(1);
        let done = Arc::new(AtomicU64::new(0));
        let copied_so_far = Arc::new(AtomicI64::new(0));
        let (asked, rounds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (counted, back, ran) = (done.clone(), copied_so_far.clone(), rounds.clone());
        let thread = std::thread::Builder::new()
            .name("noetic-sqlite-checkpoint".into())
            .spawn(move || {
                // Ends when the writer's hook (the only sender) is dropped.
                while waiting.recv().is_ok() {
                    // Again while the writer added frames during the last one: the WAL starts over only once every
                    // frame is back in the file.
                    for _ in 0..CATCH_UP {
                        match conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), rusqlite::wal::CheckpointMode::PASSIVE) {
                            Ok((frames, copied)) => {
                                back.store(i64::from(copied), Ordering::Relaxed);
                                counted.fetch_add(1, Ordering::Relaxed);
                                if copied >= frames {
                                    break;
                                }
                            }
                            Err(error) => {
                                tracing::debug!(%error, "a session-log checkpoint did not run; the next one will");
                                break;
                            }
                        }
                    }
                    ran.fetch_add(1, Ordering::Release);
                }
            })
            .ok()?;
        let asking = asked.clone();
        // The WAL's size when a round was last asked for: one is asked for each thousand pages it grows by, not at
        // every commit (a thread asked at every commit checkpoints without pause beside a busy writer).
        let mut asked_at: c_int = 0;
        let hook = move |wal: &mut Wal, pages: c_int| {
            if pages < asked_at {
                // The WAL started over.
                asked_at = 0;
            }
            if pages >= INLINE_AT {
                // A passive checkpoint, as SQLite's own: it never waits. Nothing is asked of the thread from here on,
                // so once its round ends a commit's checkpoint gets through, to the WAL's end (no frame is added
                // during it), and the next commit starts the WAL over. The commit is done: an error returned here
                // would report it failed; one that could not checkpoint (the thread is at it) leaves it to the next.
                let _ = wal.checkpoint();
            } else if pages >= asked_at + CHECKPOINT_AT {
                asked_at = pages;
                // Counted before it is sent, so that a round is never seen run before it is seen asked for. Full
                // means one is asked for already.
                asking.fetch_add(1, Ordering::AcqRel);
                if ask.try_send(()).is_err() {
                    asking.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Ok(())
        };
        if writer.wal_hook(Some(hook)).is_err() {
            // The thread ends with the hook's sender, dropped with the hook.
            return None;
        }
        Some(Checkpointer { thread: Some(thread), progress: Progress { done, copied: copied_so_far, asked, rounds } })
    }

    /// Checkpoints the thread ran so far, and the WAL frames back in the file after the last; `None` while a round
    /// asked for has not run yet.
    #[cfg(test)]
    fn settled(&self) -> Option<(u64, i64)> {
        let p = &self.progress;
        let asked = p.asked.load(Ordering::Acquire);
        (p.rounds.load(Ordering::Acquire) >= asked)
            .then(|| (p.done.load(Ordering::Relaxed), p.copied.load(Ordering::Relaxed)))
    }

    /// Takes the hook off `writer`, gives it SQLite's own automatic checkpoints back and waits for the thread to end,
    /// so that the thread's connection is closed before the writer's (the last connection to close folds the WAL
    /// back into the file).
    pub(crate) fn stop(&mut self, writer: &mut Connection) {
        // Taking the hook off drops it, and with it the thread's only sender (setting the pragma alone would replace
        // the hook in SQLite but leave it held).
        let _ = writer.wal_hook(None::<fn(&mut Wal, c_int) -> rusqlite::Result<()>>);
        let _ = writer.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_AT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A new file in WAL mode with a table `t`, in a directory of its own: its directory, the writer's connection
    /// and its checkpointer.
    fn file_with_checkpointer() -> (std::path::PathBuf, Connection, Checkpointer) {
        let dir = std::env::temp_dir().join(format!("noetic-checkpoint-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.db");
        let mut writer = Connection::open(&path).unwrap();
        writer.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
        writer.busy_timeout(Duration::from_secs(5)).unwrap();
        writer.execute_batch("CREATE TABLE t (body BLOB NOT NULL)").unwrap();
        let checkpointer = Checkpointer::start(&mut writer, &path).expect("started");
        (dir, writer, checkpointer)
    }

    /// Commits `n` rows of 3 KB one by one: each adds its pages to the WAL (the row's and the table's, ~3 a commit).
    fn insert_rows(writer: &Connection, n: usize) {
        let row = vec![7u8; 3000];
        for _ in 0..n {
            writer.execute("INSERT INTO t (body) VALUES (?1)", [&row]).unwrap();
        }
    }

    #[test]
    fn a_wal_past_a_thousand_pages_is_checkpointed_by_the_thread() {
        let (dir, mut writer, mut checkpointer) = file_with_checkpointer();
        // Past a thousand WAL pages, and below the limit at which the writer would checkpoint itself.
        insert_rows(&writer, 1100);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let (checkpoints, copied) = loop {
            if let Some(settled) = checkpointer.settled() {
                break settled;
            }
            assert!(std::time::Instant::now() < deadline, "the rounds asked for did not run within 20 s");
            std::thread::sleep(Duration::from_millis(5));
        };
        // The thread's checkpoint put at least the first thousand frames back into the file (with the connection
        // that had not read the file, it ran and copied nothing).
        assert!(checkpoints >= 1 && copied >= i64::from(CHECKPOINT_AT), "{checkpoints} checkpoints, {copied} frames");
        checkpointer.stop(&mut writer);
        let rows: i64 = writer.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 1100);
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn commits_back_to_back_keep_the_wal_below_the_writers_own_limit() {
        let (dir, mut writer, mut checkpointer) = file_with_checkpointer();
        // ~12,000 frames with no pause between commits: three times the writer's own limit.
        insert_rows(&writer, 4000);
        checkpointer.stop(&mut writer);
        // The WAL file keeps the size of the most frames it held (4 KB pages and a 24-byte header each).
        let most = std::fs::metadata(dir.join("log.db-wal")).unwrap().len() / (4096 + 24);
        assert!(most <= (INLINE_AT + 400) as u64, "the WAL held up to {most} frames");
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
