//! `noetic sessions rename KEY TITLE` (#33): a session gets a title that `noetic sessions` lists and `show` prints;
//! a bad title or an unknown session is refused saying what to do, and nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{noetic, run};

#[test]
fn a_renamed_session_is_listed_and_shown_with_its_title_and_a_bad_title_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    let queued = run(noetic().args(["sessions", "--db", db, "steer", "notes", "tidy up"]));
    assert!(queued.status.success(), "{}", queued.stderr);

    let renamed = run(noetic().args(["sessions", "--db", db, "rename", "notes", "  Release notes, draft 2  "]));
    assert!(renamed.status.success(), "{}", renamed.stderr);
    assert_eq!(renamed.stdout.trim(), "session notes is now titled Release notes, draft 2");
    let listed = run(noetic().args(["sessions", "--db", db]));
    let header = listed.stdout.lines().next().unwrap();
    assert!(header.starts_with("session") && header.contains(" title "), "{}", listed.stdout);
    let row = listed.stdout.lines().find(|l| l.starts_with("notes ")).unwrap_or_else(|| panic!("{}", listed.stdout));
    assert!(row.contains(" Release notes, draft 2 "), "{row}");
    let shown = run(noetic().args(["sessions", "--db", db, "show", "notes"]));
    assert!(shown.stdout.starts_with("session notes “Release notes, draft 2” — 0 turn(s)"), "{}", shown.stdout);

    let long = "x".repeat(121);
    for (title, says) in [("two\nlines", "control character U+000A"), (long.as_str(), "at most 120"), (" ", "empty")] {
        let refused = run(noetic().args(["sessions", "--db", db, "rename", "notes", title]));
        assert!(!refused.status.success() && refused.stderr.contains(says), "{title:?}: {}", refused.stderr);
    }
    let missing = run(noetic().args(["sessions", "--db", db, "rename", "nobody", "x"]));
    assert!(!missing.status.success() && missing.stderr.contains("no session 'nobody'"), "{}", missing.stderr);
    let listed = run(noetic().args(["sessions", "--db", db]));
    assert!(!listed.stdout.contains("nobody"), "a rename creates no session: {}", listed.stdout);
    assert!(listed.stdout.contains(" Release notes, draft 2 "), "the refused titles changed nothing");
}

#[test]
fn a_long_title_is_cut_to_its_column_in_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    assert!(run(noetic().args(["sessions", "--db", db, "steer", "k", "hi"])).status.success());
    let title = "A rather long title that does not fit the list's column";
    assert!(run(noetic().args(["sessions", "--db", db, "rename", "k", title])).status.success());
    let listed = run(noetic().args(["sessions", "--db", db]));
    let row = listed.stdout.lines().find(|l| l.starts_with("k ")).unwrap();
    assert!(row.contains(" A rather long title that do… "), "{row}");
}
