//! The PostgreSQL session-log store against a real server, each test in a database of its own: the conformance
//! kit, two store objects as two workers (leases, watching), group commit, a corrupt entry, a newer schema, and a
//! listening connection that drops.
//!
//! Needs a server: `scripts/postgres.sh setup && scripts/postgres.sh start` (URL from `NOETIC_POSTGRES_URL`, by
//! default the script's). Without one these tests say so and pass, unless `NOETIC_E2E_REQUIRED=1` (as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use noetic::agent::SteerMessage;
use noetic::agent::log::{Appended, DecodeError, Entry, Expect, LogStore, StoreError, Taken};
use noetic::testing::check_log_store;
use noetic_postgres::testing::Throwaway;
use noetic_postgres::{PgLogOptions, PgLogStore};
use tokio::sync::broadcast;

/// A database of the test's own, or `None` (with the reason printed) when there is no server and none is required.
async fn database(name: &str) -> Option<Throwaway> {
    Throwaway::or_skip(name).await.unwrap_or_else(|e| panic!("{e}"))
}

fn message(text: &str) -> Entry {
    Entry::MessageAccepted { message: SteerMessage::new(text) }
}

/// The next append `watch` hears for `key` (30 s at most).
async fn heard(watch: &mut broadcast::Receiver<Appended>, key: &str) -> Option<u64> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match watch.recv().await {
                Ok(appended) if appended.key == key => return Some(appended.last),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Waits (30 s at most) until `condition` holds.
async fn until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition().await {
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends `store`'s listening connection from the server's side and waits until it is gone.
async fn terminate_listener(db: &Throwaway, store: &PgLogStore) {
    let name = format!("noetic-listen {}", store.id());
    let ended: i64 = db
        .admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, 1, "one listening connection");
    until("the listening connection is gone", async || {
        let left: i64 = db
            .admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&name])
            .await
            .unwrap()
            .get(0);
        left == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_log_store_passes_the_conformance_kit() {
    let Some(db) = database("log_conformance").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    check_log_store(&store, "pg").await.unwrap();
    drop(store);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_through_one_worker_is_refused_to_another_until_it_lapses() {
    let Some(db) = database("log_leases").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    let (la, lb) = (a.leases().unwrap(), b.leases().unwrap());
    let term = Duration::from_secs(60);
    assert_eq!(la.acquire("s", "worker-a", term).await.unwrap(), None);
    assert_eq!(lb.acquire("s", "worker-b", term).await.unwrap().as_deref(), Some("worker-a"));
    assert_eq!(lb.holder("s").await.unwrap().as_deref(), Some("worker-a"));
    // Renewed with a zero term: it lapses at once, by the database's clock, and the other worker takes it.
    assert_eq!(la.acquire("s", "worker-a", Duration::ZERO).await.unwrap(), None);
    assert_eq!(lb.acquire("s", "worker-b", term).await.unwrap(), None);
    assert_eq!(la.holder("s").await.unwrap().as_deref(), Some("worker-b"));
    assert_eq!(la.acquire("s", "worker-a", term).await.unwrap().as_deref(), Some("worker-b"));
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_a_lease_says_where_the_log_ends_and_a_turns_end_gives_it_up() {
    let Some(db) = database("log_take_lease").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    let term = Duration::from_secs(60);
    assert_eq!(a.take_lease("s", "worker-a", term).await.unwrap(), Some(Taken::Held { last: 0 }));
    let last = a.append("s", Expect::At(0), &[message("one"), message("two")]).await.unwrap();
    assert_eq!(a.take_lease("s", "worker-a", term).await.unwrap(), Some(Taken::Held { last }));
    assert_eq!(b.take_lease("s", "worker-b", term).await.unwrap(), Some(Taken::Elsewhere("worker-a".into())));
    // A fenced end gives nothing up; one that lands gives the lease up in its transaction (the fast way: `a` wrote
    // the session last; the batch way: `b` never did).
    let stale = a.append_and_release("s", Expect::At(0), &[message("late")], "worker-a").await;
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
    let before = a.stats().transactions;
    a.append_and_release("s", Expect::At(last), &[message("end")], "worker-a").await.unwrap();
    assert_eq!(a.stats().transactions - before, 1);
    assert_eq!(b.take_lease("s", "worker-b", term).await.unwrap(), Some(Taken::Held { last: last + 1 }));
    let stale = b.append_and_release("s", Expect::At(0), &[message("late")], "worker-b").await;
    assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
    assert_eq!(a.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("worker-b"));
    b.append_and_release("s", Expect::At(last + 1), &[message("end")], "worker-b").await.unwrap();
    assert_eq!(a.leases().unwrap().holder("s").await.unwrap(), None);
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_an_append_made_through_another_worker() {
    let Some(db) = database("log_watch").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    let mut watch = a.watch();
    b.append("s", Expect::End, &[message("one"), message("two")]).await.unwrap();
    assert_eq!(heard(&mut watch, "s").await, Some(2));
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_worker_hears_every_session_of_batches_announced_together_whatever_their_keys_hold() {
    let Some(db) = database("log_watch_many").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    let mut watch = b.watch();
    // A plain listener counting the notifications themselves.
    let (listener, mut connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    let (sent, mut notified) = tokio::sync::mpsc::unbounded_channel();
    let driving = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = futures::StreamExt::next(&mut messages).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = sent.send(n.payload().len());
            }
        }
    });
    listener.batch_execute("LISTEN noetic_log").await.unwrap();
    // Long keys with tabs and line breaks: 600 of them do not fit one notification's payload.
    let keys: Vec<String> = (0..600).map(|i| format!("s\t{i}\n{}", "k".repeat(100))).collect();
    let m = [message("m")];
    // New sessions (the batch transaction), then the same sessions continued (the one-statement append).
    for round in 0..2u64 {
        let all = futures::future::join_all(keys.iter().map(|k| a.append(k, Expect::At(round), &m))).await;
        assert!(all.iter().all(|r| matches!(r, Ok(last) if *last == round + 1)), "{all:?}");
    }
    assert!(a.stats().transactions < 100, "the appends went in batches: {:?}", a.stats());
    let mut heard: std::collections::HashMap<String, Vec<u64>> = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while heard.values().map(Vec::len).sum::<usize>() < keys.len() * 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, watch.recv()).await {
            Ok(Ok(appended)) => heard.entry(appended.key).or_default().push(appended.last),
            other => panic!("{} of {} appends heard: {other:?}", heard.values().map(Vec::len).sum::<usize>(), 1200),
        }
    }
    for k in &keys {
        assert_eq!(heard.get(k).map(Vec::as_slice), Some(&[1, 2][..]), "{k:?}");
    }
    // Every notification has been delivered once a query after the last commit is answered on the listener.
    listener.batch_execute("SELECT 1").await.unwrap();
    let mut sizes = Vec::new();
    while let Ok(size) = notified.try_recv() {
        sizes.push(size);
    }
    // 1200 ends of ~125 bytes each: ~20 payloads of up to 7,900 bytes (a few more where batches split them).
    assert!(sizes.len() >= 19 && sizes.len() <= 100, "{} notifications for 1200 appends", sizes.len());
    assert!(sizes.iter().all(|&size| size < 8000), "{sizes:?}");
    drop((a, b, listener));
    driving.abort();
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_of_many_sessions_arriving_together_share_transactions_and_each_is_fenced() {
    let Some(db) = database("log_group").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
    let a = [message("a")];
    let first = futures::future::join_all(keys.iter().map(|k| store.append(k, Expect::At(0), &a))).await;
    assert!(first.iter().all(|r| matches!(r, Ok(1))), "{first:?}");
    // Each session gets a current writer (at 1) and a stale one (at 0), all at once: the stale ones are refused
    // one by one, without failing the others in their transaction.
    let current = [message("b")];
    let stale = [message("stale")];
    let second = futures::future::join_all(
        keys.iter().flat_map(|k| [store.append(k, Expect::At(1), &current), store.append(k, Expect::At(0), &stale)]),
    )
    .await;
    for (i, pair) in second.chunks(2).enumerate() {
        assert!(matches!(pair[0], Ok(2)), "session {i}: {:?}", pair[0]);
        assert!(matches!(pair[1], Err(StoreError::Conflict { expected: 0, .. })), "session {i}: {:?}", pair[1]);
    }
    for k in &keys {
        let texts: Vec<String> = store
            .read(k, 0, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| match r.entry {
                Entry::MessageAccepted { message } => message.text,
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["a", "b"], "{k}");
    }
    let stats = store.stats();
    assert_eq!(stats.appends, 400);
    assert!(
        stats.transactions < stats.appends / 4,
        "{} transactions for {} appends",
        stats.transactions,
        stats.appends
    );
    drop(store);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_hears_every_append_once_and_in_order_when_large_batches_are_answered_in_slices() {
    let Some(db) = database("log_answer_order").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    let mut watch = store.watch();
    let keys: Vec<String> = (0..300).map(|i| format!("s{i}")).collect();
    // Rounds of 300 appends at once (batches far above the answering slice, answered by the writer's answering
    // task), and meanwhile small batches of one session (answered by the writer itself when nothing is pending).
    for round in 0..3u64 {
        let m = [message("m")];
        let all = futures::future::join_all(keys.iter().map(|k| store.append(k, Expect::At(round), &m)));
        let one = async {
            for _ in 0..5 {
                store.append("alone", Expect::End, &[message("x")]).await.unwrap();
            }
        };
        let (results, ()) = tokio::join!(all, one);
        assert!(results.iter().all(|r| matches!(r, Ok(last) if *last == round + 1)), "{results:?}");
    }
    let mut heard: std::collections::HashMap<String, Vec<u64>> = std::collections::HashMap::new();
    while let Ok(appended) = watch.try_recv() {
        heard.entry(appended.key).or_default().push(appended.last);
    }
    assert_eq!(heard.get("alone").map(Vec::as_slice), Some(&(1..=15).collect::<Vec<u64>>()[..]));
    for k in &keys {
        assert_eq!(heard.get(k).map(Vec::as_slice), Some(&[1, 2, 3][..]), "{k}");
    }
    drop(store);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_is_one_row_and_reads_back_entry_by_entry_from_any_position_in_pages_of_any_size() {
    let Some(db) = database("log_rows").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    let texts = ["a", "b", "c", "d", "e", "f"];
    store.append("s", Expect::At(0), &[message("a"), message("b"), message("c")]).await.unwrap();
    store.append("s", Expect::At(3), &[message("d")]).await.unwrap();
    store.append("s", Expect::At(4), &[message("e"), message("f")]).await.unwrap();
    let client = db.client().await.unwrap();
    let rows: Vec<i64> = client
        .query("SELECT pos FROM noetic_log WHERE session = 's' ORDER BY pos", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, [1, 4, 5], "one row per append, at its first entry's position");
    for after in 0..=6u64 {
        for limit in 1..=7usize {
            let read = store.read("s", after, limit).await.unwrap();
            let got: Vec<(u64, String)> = read
                .iter()
                .map(|r| match &r.entry {
                    Entry::MessageAccepted { message } => (r.pos, message.text.clone()),
                    other => panic!("{other:?}"),
                })
                .collect();
            let want: Vec<(u64, String)> =
                (after + 1..=6).take(limit).map(|pos| (pos, texts[pos as usize - 1].to_owned())).collect();
            assert_eq!(got, want, "after {after}, at most {limit}");
        }
    }
    drop((store, client));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_entry_is_reported_with_its_session_and_position_and_the_entries_after_it_still_read() {
    let Some(db) = database("log_corrupt").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    store.append("s", Expect::At(0), &[message("a"), message("b"), message("c")]).await.unwrap();
    let client = db.client().await.unwrap();
    // The append is one row: its second line damaged.
    let damage = |line: &str| {
        format!(
            "UPDATE noetic_log SET entry = split_part(entry, E'\\n', 1) || E'\\n' || '{line}' || E'\\n' || \
             split_part(entry, E'\\n', 3) WHERE session = 's' AND pos = 1"
        )
    };
    client.execute(&damage("{not json"), &[]).await.unwrap();
    match store.read("s", 0, 10).await {
        Err(StoreError::Corrupt { key, pos: 2, source: DecodeError::Unreadable { .. } }) => assert_eq!(key, "s"),
        other => panic!("reading a damaged entry gave {other:?}"),
    }
    assert_eq!(store.read("s", 0, 1).await.unwrap().len(), 1, "the entry before it still reads");
    assert_eq!(store.read("s", 2, 10).await.unwrap().len(), 1, "the entries after it still read");
    client.execute(&damage(r#"{"v":99,"at_ms":0,"type":"x"}"#), &[]).await.unwrap();
    let newer = store.read("s", 1, 10).await;
    assert!(
        matches!(newer, Err(StoreError::Corrupt { pos: 2, source: DecodeError::Newer { found: 99 }, .. })),
        "{newer:?}"
    );
    // A row that does not start where the one before it ends.
    store.append("s", Expect::At(3), &[message("d")]).await.unwrap();
    client.execute("UPDATE noetic_log SET pos = 5 WHERE session = 's' AND pos = 4", &[]).await.unwrap();
    let gap = store.read("s", 2, 10).await;
    assert!(matches!(gap, Err(StoreError::Corrupt { pos: 4, .. })), "{gap:?}");
    drop((store, client));
    db.remove().await.unwrap();
}

/// A database of `name` holding only the version table, saying `version`; with a client of its owner.
async fn with_schema_version(name: &str, version: i32) -> Option<(Throwaway, tokio_postgres::Client)> {
    let db = database(name).await?;
    let client = db.client().await.unwrap();
    client.batch_execute("CREATE TABLE noetic_schema (version INTEGER NOT NULL)").await.unwrap();
    client.execute("INSERT INTO noetic_schema VALUES ($1)", &[&version]).await.unwrap();
    Some((db, client))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_a_newer_schema_is_refused_and_left_untouched() {
    let Some((db, client)) = with_schema_version("log_newer", 99).await else { return };
    let e = PgLogStore::connect(&db.url).await.unwrap_err();
    assert!(matches!(e, StoreError::Refused { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("version 99") && e.contains("nothing was changed"), "{e}");
    let tables: i64 = client
        .query_one("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'noetic_%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "only the version table");
    drop(client);
    db.remove().await.unwrap();
}

/// Whether `noetic_log_sessions` keeps half of each page free for its rows' updates.
async fn summary_rows_keep_room(client: &tokio_postgres::Client) -> bool {
    let options: Option<Vec<String>> = client
        .query_one("SELECT reloptions FROM pg_class WHERE oid = 'noetic_log_sessions'::regclass", &[])
        .await
        .unwrap()
        .get(0);
    options.unwrap_or_default().iter().any(|o| o == "fillfactor=50")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_rows_keep_room_for_their_updates_on_a_new_database_and_once_more_where_it_was_taken_away() {
    let Some(db) = database("log_storage").await else { return };
    let client = db.client().await.unwrap();
    let store = PgLogStore::connect(&db.url).await.unwrap();
    assert!(summary_rows_keep_room(&client).await, "set when the tables are made");
    // A database of this schema version without the setting (made by an earlier build, or reset by hand) gets it
    // when a store connects; the sessions in it are as they were.
    store.append("s", Expect::End, &[message("kept")]).await.unwrap();
    drop(store);
    client.batch_execute("ALTER TABLE noetic_log_sessions RESET (fillfactor)").await.unwrap();
    assert!(!summary_rows_keep_room(&client).await);
    let store = PgLogStore::connect(&db.url).await.unwrap();
    assert!(summary_rows_keep_room(&client).await, "set again on connecting");
    assert_eq!(store.last("s").await.unwrap(), 1);
    drop((store, client));
    db.remove().await.unwrap();
}

/// A login role of this test process that may read and write every table and sequence in `db` (made by their owner)
/// but neither create tables nor alter them: its name and a URL that connects as it.
async fn writer_role(db: &Throwaway, client: &tokio_postgres::Client, name: &str) -> (String, String) {
    let role = format!("noetic_{name}_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role};
             CREATE ROLE {role} LOGIN PASSWORD 'writer';
             GRANT CONNECT ON DATABASE {db} TO {role};
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
             GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role};",
            db = db.name
        ))
        .await
        .unwrap();
    let (base, _) = db.url.rsplit_once('/').unwrap();
    let (_, host) = base.rsplit_once('@').unwrap();
    let url = format!("postgres://{role}:writer@{host}/{}", db.name);
    (role, url)
}

/// A database of `name` whose tables its owner made, holding session "s" of one entry; with a client of the owner.
async fn made_by_its_owner(name: &str) -> Option<(Throwaway, tokio_postgres::Client)> {
    let db = database(name).await?;
    let client = db.client().await.unwrap();
    let owner = PgLogStore::connect(&db.url).await.unwrap();
    owner.append("s", Expect::End, &[message("one")]).await.unwrap();
    Some((db, client))
}

async fn drop_role(role: &str) {
    let admin = noetic_postgres::testing::client(&noetic_postgres::testing::server_url()).await.unwrap();
    admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_neither_create_nor_alter_tables_works_on_tables_their_owner_made() {
    // The tables exist (made by their owner), without the storage setting; another user may read and write them,
    // not create tables (as production roles often are) nor alter these.
    let Some((db, client)) = made_by_its_owner("log_storage_user").await else { return };
    client.batch_execute("ALTER TABLE noetic_log_sessions RESET (fillfactor)").await.unwrap();
    let (role, url) = writer_role(&db, &client, "writer").await;
    let store = PgLogStore::connect(&url).await.unwrap();
    assert!(!summary_rows_keep_room(&client).await, "it could not set it");
    assert_eq!(store.append("s", Expect::At(1), &[message("two")]).await.unwrap(), 2);
    assert_eq!(store.append("new", Expect::End, &[message("three")]).await.unwrap(), 1);
    assert_eq!(store.read("s", 0, 10).await.unwrap().len(), 2);
    drop((store, client));
    db.remove().await.unwrap();
    drop_role(&role).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_create_tables_is_told_so_where_the_schema_needs_them_and_a_newer_one_is_refused() {
    // A database whose version table says 2 (before the log): migrating it makes tables.
    let Some((db, client)) = with_schema_version("log_storage_rights", 2).await else { return };
    let (role, url) = writer_role(&db, &client, "reader").await;
    let Err(refused) = PgLogStore::connect(&url).await else {
        panic!("the migration needs the right to create tables")
    };
    let said = refused.to_string();
    assert!(said.contains("may not do this") && said.contains("connect once as a user who may create"), "{said}");
    assert!(said.contains("the server said: permission denied for schema public"), "the server's words: {said}");
    let version: i32 = client.query_one("SELECT version FROM noetic_schema", &[]).await.unwrap().get(0);
    assert_eq!(version, 2, "nothing was changed");
    // A newer version is refused as it is, whatever the user may do.
    client.batch_execute("UPDATE noetic_schema SET version = 99").await.unwrap();
    let Err(refused) = PgLogStore::connect(&url).await else { panic!("a newer schema is refused") };
    assert!(refused.to_string().contains("newer than this noetic supports"), "{refused}");
    drop(client);
    db.remove().await.unwrap();
    drop_role(&role).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_create_tables_waits_for_the_owners_migration_and_then_works() {
    let Some((db, client)) = made_by_its_owner("log_storage_wait").await else { return };
    let (role, url) = writer_role(&db, &client, "waiter").await;
    // The owner is migrating: the database reads as an older version while its migration holds the lock.
    client.batch_execute("UPDATE noetic_schema SET version = 3").await.unwrap();
    let mut migrating = db.client().await.unwrap();
    let tx = migrating.transaction().await.unwrap();
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&noetic_postgres::testing::MIGRATION_LOCK]).await.unwrap();
    tx.execute("UPDATE noetic_schema SET version = $1", &[&noetic_postgres::LOG_SCHEMA_VERSION]).await.unwrap();
    let connecting = tokio::spawn(async move { PgLogStore::connect(&url).await });
    until("the other user waits for the migration's lock", async || {
        let waiting: i64 = client
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", &[])
            .await
            .unwrap()
            .get(0);
        waiting == 1
    })
    .await;
    tx.commit().await.unwrap();
    // It finds the migration done and needs no right to create anything.
    let store = connecting.await.unwrap().unwrap();
    assert_eq!(store.append("s", Expect::At(1), &[message("two")]).await.unwrap(), 2);
    drop((store, client, migrating));
    db.remove().await.unwrap();
    drop_role(&role).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listening_connection_comes_back_and_later_appends_are_heard() {
    let Some(db) = database("log_relisten").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    assert_eq!(a.stats().listening, 1, "the store listens once connected");
    // A session A knows is continued in one statement on the listening connection.
    a.append("mine", Expect::At(0), &[message("1")]).await.unwrap();
    a.append("mine", Expect::At(1), &[message("2")]).await.unwrap();
    assert_eq!(a.stats().on_listening_connection, 1, "{:?}", a.stats());
    let mut watch = a.watch();
    terminate_listener(&db, &a).await;
    until("the store listens again", async || a.stats().listening == 2).await;
    b.append("s", Expect::End, &[message("after")]).await.unwrap();
    assert_eq!(heard(&mut watch, "s").await, Some(1));
    // And on the new listening connection once it listens.
    a.append("mine", Expect::At(2), &[message("3")]).await.unwrap();
    assert_eq!(a.stats().on_listening_connection, 2, "{:?}", a.stats());
    assert_eq!(a.read("mine", 0, 10).await.unwrap().len(), 3);
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_made_while_the_listening_connection_was_away_are_caught_up_when_it_comes_back() {
    let Some(db) = database("log_catch_up").await else { return };
    let options = PgLogOptions { connections: 1, ..PgLogOptions::default() };
    let (a, b) =
        (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect_with(&db.url, options).await.unwrap());
    // B's one pooled connection is open before new connections are refused.
    b.append("before", Expect::End, &[message("x")]).await.unwrap();
    let mut watch = a.watch();
    let refuse = |allow: bool| format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {allow}", db.name);
    db.admin.batch_execute(&refuse(false)).await.unwrap();
    terminate_listener(&db, &a).await;
    b.append("while away", Expect::End, &[message("y"), message("z")]).await.unwrap();
    db.admin.batch_execute(&refuse(true)).await.unwrap();
    assert_eq!(heard(&mut watch, "while away").await, Some(2), "the append no notification announced is heard");
    assert!(a.stats().caught_up >= 1, "{:?}", a.stats());
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_database_cannot_hold_is_refused_saying_what_to_use() {
    let Some(db) = database("log_long_key").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    for key in ["k".repeat(noetic_postgres::log::MAX_KEY_BYTES + 1), "nul\0key".to_owned()] {
        match store.append(&key, Expect::End, &[message("x")]).await {
            Err(StoreError::Refused { message }) => assert!(message.contains("at most 1024 bytes"), "{message}"),
            other => panic!("a key of {} bytes: {other:?}", key.len()),
        }
        assert!(store.read(&key, 0, 10).await.unwrap().is_empty());
        assert_eq!(store.last(&key).await.unwrap(), 0);
    }
    drop(store);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_reads_go_on_after_the_server_ends_the_pools_connections_and_the_listening_one() {
    let Some(db) = database("log_pool_dropped").await else { return };
    let store = PgLogStore::connect(&db.url).await.unwrap();
    store.append("s", Expect::At(0), &[message("before")]).await.unwrap();
    // How many of the store's connections named `role` (`noetic-log`: the pool's; `noetic-listen`: the listening
    // one, which also carries the one-statement appends while it listens) the server ended.
    let end = async |role: &str| -> i64 {
        let name = format!("{role} {}", store.id());
        let sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1";
        db.admin.query_one(sql, &[&name]).await.unwrap().get(0)
    };
    assert!(end("noetic-log").await >= 1, "the pool had a connection open");
    assert_eq!(store.append("s", Expect::At(1), &[message("after the pool's")]).await.unwrap(), 2);
    assert_eq!(end("noetic-listen").await, 1, "one listening connection");
    // At once, before the store may have noticed: the append lands on another connection, or on the listening
    // one once it listens again.
    assert_eq!(store.append("s", Expect::At(2), &[message("after the listening one")]).await.unwrap(), 3);
    assert_eq!(store.append("s", Expect::At(3), &[message("and again")]).await.unwrap(), 4);
    end("noetic-log").await;
    let texts: Vec<String> = store.read("s", 0, 10).await.unwrap().iter().map(|r| format!("{:?}", r.entry)).collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts[3].contains("and again"), "{texts:?}");
    drop(store);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continuing_a_session_another_worker_appended_to_is_fenced() {
    let Some(db) = database("log_stale_writer").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    assert_eq!(a.append("s", Expect::At(0), &[message("a1")]).await.unwrap(), 1);
    b.append("s", Expect::End, &[message("from b")]).await.unwrap();
    // A last saw the log end at 1: its append there is refused, however it writes.
    match a.append("s", Expect::At(1), &[message("stale")]).await {
        Err(StoreError::Conflict { expected: 1, actual: 2, .. }) => {}
        other => panic!("a stale append answered {other:?}"),
    }
    assert_eq!(a.append("s", Expect::At(2), &[message("a2")]).await.unwrap(), 3);
    assert_eq!(a.read("s", 0, 10).await.unwrap().len(), 3);
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continuing_many_sessions_one_of_which_another_worker_appended_to_writes_the_rest() {
    let Some(db) = database("log_stale_many").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    let keys: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
    let first = [message("a1")];
    let written = futures::future::join_all(keys.iter().map(|k| a.append(k, Expect::At(0), &first))).await;
    assert!(written.iter().all(|r| matches!(r, Ok(1))), "{written:?}");
    b.append("s7", Expect::End, &[message("from b")]).await.unwrap();
    // A remembers every session at 1 and appends to all of them at once: s7 is refused, the others land.
    let second = [message("a2")];
    let answers = futures::future::join_all(keys.iter().map(|k| a.append(k, Expect::At(1), &second))).await;
    for (key, answer) in keys.iter().zip(&answers) {
        if key == "s7" {
            assert!(matches!(answer, Err(StoreError::Conflict { expected: 1, actual: 2, .. })), "{key}: {answer:?}");
        } else {
            assert!(matches!(answer, Ok(2)), "{key}: {answer:?}");
        }
    }
    // And again, everyone where they are now: all land, and the list's summaries say so.
    let third = [message("a3")];
    let answers = futures::future::join_all(keys.iter().map(|k| a.append(k, Expect::At(2), &third))).await;
    assert!(answers.iter().all(|r| matches!(r, Ok(3))), "{answers:?}");
    let lines = b.list().await.unwrap();
    assert_eq!(lines.len(), keys.len());
    assert!(lines.iter().all(|l| l.last == 3 && l.summary.queued == 3), "{lines:?}");
    for key in &keys {
        assert_eq!(b.read(key, 0, 10).await.unwrap().len(), 3, "{key}");
    }
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_deleted_and_written_again_by_another_worker_keeps_a_true_summary() {
    let Some(db) = database("log_recreated").await else { return };
    let (a, b) = (PgLogStore::connect(&db.url).await.unwrap(), PgLogStore::connect(&db.url).await.unwrap());
    a.append("s", Expect::At(0), &[message("queued 1"), message("queued 2")]).await.unwrap();
    assert!(b.delete("s").await.unwrap());
    let stop = Entry::StopRequested { reason: "b".into() };
    b.append("s", Expect::At(0), &[stop.clone(), stop]).await.unwrap();
    // The log ends at 2 again, as A last saw it, but it is another log: A's append counts from what is there.
    assert_eq!(a.append("s", Expect::At(2), &[message("queued 3")]).await.unwrap(), 3);
    let line = a.list().await.unwrap().into_iter().find(|l| l.key == "s").unwrap();
    assert_eq!((line.last, line.summary.queued), (3, 1), "{line:?}");
    drop((a, b));
    db.remove().await.unwrap();
}
