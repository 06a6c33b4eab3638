//! Checkpoints off the writer thread. SQLite copies the WAL back into the file (a checkpoint) in the commit that
//! takes the WAL past 1000 pages, so one append in ~250 waited for it, and the writer thread spent more time
//! checkpointing than writing its commits' pages. The writer connection's WAL hook now only tells a thread of the
//! store's own when the WAL has grown that far; that thread runs the checkpoint on a connection of its own (a
//! `PASSIVE` one: it never waits for the writer, and the writer starts the WAL over at its next commit once the
//! checkpoint got through). When commits come back to back, with no pause for a checkpoint to get through to the
//! WAL's end, the commit that takes the WAL past [`INLINE_AT`] pages checkpoints itself, as every 1000th page's did
//! before.

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
const CATCH_UP: usize = 16;

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
    /// WAL frames its last checkpoint left to copy (the writer added them meanwhile).
    behind: Arc<AtomicI64>,
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
        let behind = Arc::new(AtomicI64::new(0));
        let (asked, rounds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (counted, left, ran) = (done.clone(), behind.clone(), rounds.clone());
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
                                left.store(i64::from(frames - copied), Ordering::Relaxed);
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
        let hook = move |wal: &mut Wal, pages: c_int| {
            if pages >= INLINE_AT {
                // A full checkpoint (it waits, in the writer's busy handler, for the thread's to end), so that the
                // next commit starts the WAL over. The commit is done: an error returned here would report it
                // failed; one that could not checkpoint leaves it to the next commit.
                let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::FULL);
            } else if pages >= CHECKPOINT_AT {
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
        Some(Checkpointer { thread: Some(thread), progress: Progress { done, behind, asked, rounds } })
    }

    /// Checkpoints the thread ran so far, and the frames the last one left; `None` while a round asked for has not
    /// run yet.
    #[cfg(test)]
    fn settled(&self) -> Option<(u64, i64)> {
        let p = &self.progress;
        let asked = p.asked.load(Ordering::Acquire);
        (p.rounds.load(Ordering::Acquire) >= asked)
            .then(|| (p.done.load(Ordering::Relaxed), p.behind.load(Ordering::Relaxed)))
    }

    /// Gives `writer` SQLite's own automatic checkpoints back (which replaces the hook) and waits for the thread to
    /// end, so that its connection is closed before the writer's (the last connection to close folds the WAL back
    /// into the file).
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

    /// Frames in the WAL, read without copying any back (a `PASSIVE` checkpoint of a connection that writes
    /// nothing, asked only after the writer stopped).
    fn wal_frames(path: &Path) -> c_int {
        let conn = Connection::open(path).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, c_int>(1)).unwrap()
    }

    #[test]
    fn a_wal_past_a_thousand_pages_is_checkpointed_by_the_thread_and_the_writer_starts_it_over() {
        let dir = std::env::temp_dir().join(format!("noetic-checkpoint-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.db");
        let mut writer = Connection::open(&path).unwrap();
        writer.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
        writer.execute_batch("CREATE TABLE t (body BLOB NOT NULL)").unwrap();
        let mut checkpointer = Checkpointer::start(&mut writer, &path).expect("started");
        // Each commit adds its pages to the WAL (a 3 KB row and the table's pages): past a thousand, and below the
        // limit at which the writer would checkpoint itself.
        let row = vec![7u8; 3000];
        let commits = 1100;
        for _ in 0..commits {
            writer.execute("INSERT INTO t (body) VALUES (?1)", [&row]).unwrap();
        }
        // The writer pauses (as a turn does between its writes): the thread catches up.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let (checkpoints, behind) = loop {
            if let Some(settled) = checkpointer.settled() {
                break settled;
            }
            assert!(std::time::Instant::now() < deadline, "the rounds asked for did not run within 20 s");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(checkpoints >= 1 && behind == 0, "{checkpoints} checkpoints, {behind} frames left");
        // Everything is back in the file: the writer's next commit starts the WAL over (or it did earlier, and what
        // the WAL holds since is below the threshold).
        writer.execute("INSERT INTO t (body) VALUES (?1)", [&row]).unwrap();
        checkpointer.stop(&mut writer);
        let frames = wal_frames(&path);
        assert!(frames < CHECKPOINT_AT + 10, "the WAL holds {frames} frames (3,300 were written)");
        let rows: i64 = writer.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, commits + 1);
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn commits_back_to_back_keep_the_wal_below_the_writers_own_limit() {
        let dir = std::env::temp_dir().join(format!("noetic-checkpoint-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.db");
        let mut writer = Connection::open(&path).unwrap();
        writer.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
        writer.busy_timeout(Duration::from_secs(5)).unwrap();
        writer.execute_batch("CREATE TABLE t (body BLOB NOT NULL)").unwrap();
        let mut checkpointer = Checkpointer::start(&mut writer, &path).expect("started");
        // ~12,000 frames with no pause between commits: three times the writer's own limit.
        let row = vec![7u8; 3000];
        for _ in 0..4000 {
            writer.execute("INSERT INTO t (body) VALUES (?1)", [&row]).unwrap();
        }
        checkpointer.stop(&mut writer);
        // The WAL file keeps the size of the most frames it held (4 KB pages and a 24-byte header each).
        let most = std::fs::metadata(dir.join("log.db-wal")).unwrap().len() / (4096 + 24);
        assert!(most <= (INLINE_AT + 100) as u64, "the WAL held up to {most} frames");
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
