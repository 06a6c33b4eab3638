//! The conformance kit for session-log stores: the same scenarios against every [`LogStore`] (in memory, SQLite,
//! PostgreSQL), so each behaves as the runtime expects.

use std::time::{Duration, SystemTime};

use super::conformance::{Checked, ConformanceFailure, check, fail};
use crate::agent::SteerMessage;
use crate::agent::log::{Entry, Expect, LogStore, Record, Snapshot, StoreError};

fn store_error(scenario: &'static str) -> impl Fn(StoreError) -> ConformanceFailure {
    move |e| fail(scenario, format!("the store failed: {e}"))
}

fn message(text: &str) -> Entry {
    Entry::MessageAccepted { message: SteerMessage::new(text) }
}

fn text_of(record: &Record) -> Option<&str> {
    match &record.entry {
        Entry::MessageAccepted { message } => Some(&message.text),
        _ => None,
    }
}

fn texts(records: &[Record]) -> Vec<&str> {
    records.iter().filter_map(text_of).collect()
}

/// Runs every scenario against `store`, each on keys of its own that start with `prefix` (so a database other
/// tests use is fine: pass something unique). The first scenario that fails is returned.
pub async fn check_log_store(store: &dyn LogStore, prefix: &str) -> Checked {
    let key = |name: &str| format!("{prefix}-{name}");
    appends_read_back_in_order(store, &key("order")).await?;
    a_writer_that_missed_an_append_is_fenced(store, &key("fence")).await?;
    of_two_writers_at_one_position_exactly_one_wins(store, &key("race")).await?;
    an_empty_append_is_refused_and_an_unknown_log_is_empty(store, &key("empty")).await?;
    watchers_hear_of_appends(store, &key("watch")).await?;
    the_list_keeps_each_sessions_summary(store, &key("list")).await?;
    snapshots_are_kept_up_to_the_logs_end(store, &key("snapshot")).await?;
    a_deleted_log_is_gone(store, &key("delete")).await?;
    a_large_batch_reads_back_whole_in_pages(store, &key("large")).await?;
    entries_that_share_content_read_back_whole_from_any_position(store, &key("shared")).await?;
    unusual_keys_are_kept_apart(store, prefix).await?;
    leases_have_one_holder_at_a_time(store, &key("lease")).await?;
    a_release_goes_with_its_append_only_when_the_append_lands(store, &key("release")).await?;
    Ok(())
}

async fn appends_read_back_in_order(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "appends read back in order";
    let before = SystemTime::now() - Duration::from_millis(1);
    let last = store.append(key, Expect::At(0), &[message("a"), message("b")]).await.map_err(store_error(S))?;
    check(S, last == 2, || format!("the first append of two entries ended at {last}, not 2"))?;
    let last = store.append(key, Expect::At(2), &[message("c")]).await.map_err(store_error(S))?;
    check(S, last == 3, || format!("the next append ended at {last}, not 3"))?;
    let all = store.read(key, 0, 100).await.map_err(store_error(S))?;
    let positions: Vec<u64> = all.iter().map(|r| r.pos).collect();
    check(S, positions == [1, 2, 3], || format!("positions {positions:?}, not [1, 2, 3]"))?;
    check(S, texts(&all) == ["a", "b", "c"], || format!("entries {:?}, not a, b, c", texts(&all)))?;
    let after = SystemTime::now() + Duration::from_millis(1);
    check(S, all.iter().all(|r| r.at >= before && r.at <= after), || "an entry's time is not its append's".into())?;
    let page = store.read(key, 1, 1).await.map_err(store_error(S))?;
    check(S, page.len() == 1 && page[0].pos == 2, || format!("read after 1, limit 1: {page:?}"))?;
    let end = store.last(key).await.map_err(store_error(S))?;
    check(S, end == 3, || format!("last is {end}, not 3"))
}

async fn a_writer_that_missed_an_append_is_fenced(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "a writer that missed an append is fenced";
    store.append(key, Expect::At(0), &[message("owner")]).await.map_err(store_error(S))?;
    // Another process adds a fact at the end; the owner, still at 1, must not write over or past it unseen.
    store.append(key, Expect::End, &[message("from elsewhere")]).await.map_err(store_error(S))?;
    match store.append(key, Expect::At(1), &[message("stale")]).await {
        Err(StoreError::Conflict { expected: 1, actual: 2, .. }) => {}
        other => return Err(fail(S, format!("a stale append answered {other:?}, not a conflict at 2"))),
    }
    let all = store.read(key, 0, 10).await.map_err(store_error(S))?;
    check(S, texts(&all) == ["owner", "from elsewhere"], || format!("after the refusal the log is {:?}", texts(&all)))?;
    let last = store.append(key, Expect::At(2), &[message("caught up")]).await.map_err(store_error(S))?;
    check(S, last == 3, || format!("the writer that read what it missed appended at {last}, not 3"))
}

async fn of_two_writers_at_one_position_exactly_one_wins(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "of two writers at one position exactly one wins";
    store.append(key, Expect::At(0), &[message("start")]).await.map_err(store_error(S))?;
    let (one, two) = ([message("one-a"), message("one-b")], [message("two-a"), message("two-b")]);
    let (a, b) = futures::join!(store.append(key, Expect::At(1), &one), store.append(key, Expect::At(1), &two));
    let won = usize::from(a.is_ok()) + usize::from(b.is_ok());
    check(S, won == 1, || format!("{won} of the two appends succeeded: {a:?} / {b:?}"))?;
    let loser = if a.is_ok() { b } else { a };
    check(S, matches!(loser, Err(StoreError::Conflict { .. })), || format!("the other got {loser:?}, not a conflict"))?;
    let all = store.read(key, 0, 10).await.map_err(store_error(S))?;
    let t = texts(&all);
    check(S, t == ["start", "one-a", "one-b"] || t == ["start", "two-a", "two-b"], || {
        format!("the log is {t:?}: an append must be all or nothing")
    })
}

async fn an_empty_append_is_refused_and_an_unknown_log_is_empty(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "an empty append is refused and an unknown log is empty";
    let empty = store.append(key, Expect::End, &[]).await;
    check(S, matches!(empty, Err(StoreError::Refused { .. })), || format!("an empty append answered {empty:?}"))?;
    let read = store.read(key, 0, 10).await.map_err(store_error(S))?;
    check(S, read.is_empty(), || format!("a log nobody wrote reads {read:?}"))?;
    let last = store.last(key).await.map_err(store_error(S))?;
    check(S, last == 0, || format!("its last position is {last}"))
}

async fn watchers_hear_of_appends(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "watchers hear of appends";
    let mut watch = store.watch();
    store.append(key, Expect::End, &[message("hello")]).await.map_err(store_error(S))?;
    let heard = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match watch.recv().await {
                Ok(appended) if appended.key == key => return Some(appended.last),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .await;
    check(S, matches!(heard, Ok(Some(1))), || format!("a watcher heard {heard:?}, not the append ending at 1"))
}

async fn the_list_keeps_each_sessions_summary(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "the list keeps each session's summary";
    let accepted = SteerMessage::new("waiting");
    let entries = [
        Entry::MessageAccepted { message: accepted.clone() },
        message("second"),
        Entry::MessagesDropped { ids: vec![accepted.id], reason: "cleared".into() },
        Entry::TurnStarted { turn: 1, execution_id: crate::context::ExecutionId::new(), input: "go".into() },
        Entry::Appended { turn: 1, items: vec![crate::model::Item::user("go")] },
    ];
    store.append(key, Expect::At(0), &entries).await.map_err(store_error(S))?;
    let list = store.list().await.map_err(store_error(S))?;
    let Some(line) = list.iter().find(|l| l.key == key) else {
        return Err(fail(S, "the session is not listed"));
    };
    let summary = &line.summary;
    check(S, line.last == 5, || format!("listed at {}, not 5", line.last))?;
    check(S, (summary.turns, summary.items, summary.queued, summary.open_turn) == (1, 1, 1, Some(1)), || {
        format!("summary {summary:?}, not 1 turn open, 1 item, 1 queued")
    })?;
    store
        .append(key, Expect::At(5), &[Entry::MessagesDropped { ids: Vec::new(), reason: "stop".into() }])
        .await
        .map_err(store_error(S))?;
    let list = store.list().await.map_err(store_error(S))?;
    let queued = list.iter().find(|l| l.key == key).map(|l| l.summary.queued);
    check(S, queued == Some(0), || format!("after a drop of all, {queued:?} queued"))?;
    check(S, list.first().is_some_and(|l| l.key == key), || "the session appended to last is not listed first".into())
}

async fn snapshots_are_kept_up_to_the_logs_end(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "snapshots are kept up to the log's end";
    let none = store.snapshot(key).await.map_err(store_error(S))?;
    check(S, none.is_none(), || "a session with no snapshot has one".into())?;
    store.append(key, Expect::At(0), &[message("a"), message("b")]).await.map_err(store_error(S))?;
    let past = store.save_snapshot(key, Snapshot { pos: 3, bytes: b"x".to_vec() }).await;
    check(S, matches!(past, Err(StoreError::Refused { .. })), || format!("a snapshot past the end: {past:?}"))?;
    store.save_snapshot(key, Snapshot { pos: 1, bytes: b"one".to_vec() }).await.map_err(store_error(S))?;
    store.save_snapshot(key, Snapshot { pos: 2, bytes: b"two".to_vec() }).await.map_err(store_error(S))?;
    let kept = store.snapshot(key).await.map_err(store_error(S))?;
    check(S, kept == Some(Snapshot { pos: 2, bytes: b"two".to_vec() }), || format!("kept {kept:?}, not the newest"))
}

async fn a_deleted_log_is_gone(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "a deleted log is gone";
    store.append(key, Expect::End, &[message("a")]).await.map_err(store_error(S))?;
    store.save_snapshot(key, Snapshot { pos: 1, bytes: b"s".to_vec() }).await.map_err(store_error(S))?;
    let deleted = store.delete(key).await.map_err(store_error(S))?;
    check(S, deleted, || "deleting a log answered false".into())?;
    let again = store.delete(key).await.map_err(store_error(S))?;
    check(S, !again, || "deleting it twice answered true".into())?;
    let read = store.read(key, 0, 10).await.map_err(store_error(S))?;
    let snapshot = store.snapshot(key).await.map_err(store_error(S))?;
    let listed = store.list().await.map_err(store_error(S))?.iter().any(|l| l.key == key);
    check(S, read.is_empty() && snapshot.is_none() && !listed, || {
        format!("after delete: {} entries, snapshot {snapshot:?}, listed {listed}", read.len())
    })?;
    let last = store.append(key, Expect::At(0), &[message("new")]).await.map_err(store_error(S))?;
    check(S, last == 1, || format!("a log made again after a delete starts at {last}, not 1"))
}

async fn a_large_batch_reads_back_whole_in_pages(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "a large batch reads back whole in pages";
    let batch: Vec<Entry> = (0..1000).map(|i| message(&format!("m{i}"))).collect();
    let last = store.append(key, Expect::At(0), &batch).await.map_err(store_error(S))?;
    check(S, last == 1000, || format!("a batch of 1000 ended at {last}"))?;
    let mut read = Vec::new();
    loop {
        let page = store.read(key, read.len() as u64, 128).await.map_err(store_error(S))?;
        if page.is_empty() {
            break;
        }
        check(S, page.len() <= 128, || format!("a page of {} entries for a limit of 128", page.len()))?;
        read.extend(page);
    }
    let in_order = read.iter().enumerate().all(|(i, r)| r.pos == i as u64 + 1 && text_of(r) == Some(&format!("m{i}")));
    check(S, read.len() == 1000 && in_order, || format!("{} entries read back, in order: {in_order}", read.len()))
}

/// A tool call's append as a turn makes it: two results joining the conversation and reaching the core (in another
/// order than they joined), a response whose items join too, a result that differs from the one that joined.
fn sharing_append() -> Vec<Entry> {
    use crate::agent::log::StepPath;
    use crate::model::{Item, ModelResponse, ToolResult};
    use crate::turn::Input;
    let step = StepPath("agent#0".into());
    let (first, second) = (ToolResult::ok("c1", "first\nresult"), ToolResult::error("c2", "second \"result\""));
    let response = ModelResponse::tool_calls([("c3", "search", serde_json::json!({"q": "retry"}))]);
    let core = |input| Entry::Core { turn: 1, step: step.clone(), input };
    vec![
        Entry::Appended { turn: 1, items: vec![Item::ToolResult(first.clone()), Item::ToolResult(second.clone())] },
        core(Input::ToolDone(second)),
        core(Input::ToolDone(first)),
        core(Input::ToolDone(ToolResult::ok("c1", "not what joined"))),
        Entry::Appended { turn: 1, items: response.items.clone() },
        core(Input::response(response)),
        Entry::ToolStarted { turn: 1, step, call_id: "c3".into(), tool: "search".into() },
    ]
}

async fn entries_that_share_content_read_back_whole_from_any_position(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "entries that share content read back whole from any position";
    let batch = sharing_append();
    let shown = |entries: &[&Entry]| entries.iter().map(|e| serde_json::to_string(e).unwrap_or_default()).collect();
    let written: Vec<String> = shown(&batch.iter().collect::<Vec<_>>());
    let last = store.append(key, Expect::At(0), &batch).await.map_err(store_error(S))?;
    check(S, last == batch.len() as u64, || format!("an append of {} entries ended at {last}", batch.len()))?;
    for after in 0..last {
        let read = store.read(key, after, 100).await.map_err(store_error(S))?;
        let got: Vec<String> = shown(&read.iter().map(|r| &r.entry).collect::<Vec<_>>());
        check(S, got[..] == written[after as usize..], || {
            format!("read after {after}: {got:?}, not {:?}", &written[after as usize..])
        })?;
    }
    Ok(())
}

async fn unusual_keys_are_kept_apart(store: &dyn LogStore, prefix: &str) -> Checked {
    const S: &str = "unusual keys are kept apart";
    let keys = [
        format!("{prefix}-ünïcode ✓"),
        format!("{prefix}-quote'\"; DROP TABLE x; --"),
        format!("{prefix}-percent%_"),
        format!("{prefix}-percent%"),
    ];
    for (i, key) in keys.iter().enumerate() {
        store.append(key, Expect::At(0), &[message(&format!("for {i}"))]).await.map_err(store_error(S))?;
    }
    for (i, key) in keys.iter().enumerate() {
        let read = store.read(key, 0, 10).await.map_err(store_error(S))?;
        let expected = format!("for {i}");
        check(S, texts(&read) == [expected.as_str()], || format!("key {key:?} reads {:?}", texts(&read)))?;
    }
    Ok(())
}

async fn leases_have_one_holder_at_a_time(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "leases have one holder at a time";
    let Some(leases) = store.leases() else { return Ok(()) };
    let term = Duration::from_secs(60);
    let first = leases.acquire(key, "worker-a", term).await.map_err(store_error(S))?;
    check(S, first.is_none(), || format!("a free lease was refused: held by {first:?}"))?;
    let second = leases.acquire(key, "worker-b", term).await.map_err(store_error(S))?;
    check(S, second.as_deref() == Some("worker-a"), || format!("a held lease answered {second:?}, not worker-a"))?;
    let renewed = leases.acquire(key, "worker-a", term).await.map_err(store_error(S))?;
    check(S, renewed.is_none(), || format!("its holder could not renew it: {renewed:?}"))?;
    leases.release(key, "worker-b").await.map_err(store_error(S))?;
    let holder = leases.holder(key).await.map_err(store_error(S))?;
    check(S, holder.as_deref() == Some("worker-a"), || format!("a release by another let it go: {holder:?}"))?;
    leases.release(key, "worker-a").await.map_err(store_error(S))?;
    let holder = leases.holder(key).await.map_err(store_error(S))?;
    check(S, holder.is_none(), || format!("released, yet held by {holder:?}"))?;
    // A term that has run out is no hold: a dead holder's session is taken over.
    let lapsed = leases.acquire(key, "worker-a", Duration::ZERO).await.map_err(store_error(S))?;
    check(S, lapsed.is_none(), || format!("{lapsed:?}"))?;
    let taken = leases.acquire(key, "worker-b", term).await.map_err(store_error(S))?;
    check(S, taken.is_none(), || format!("a lapsed lease could not be taken over: held by {taken:?}"))?;
    let holder = leases.holder(key).await.map_err(store_error(S))?;
    check(S, holder.as_deref() == Some("worker-b"), || format!("held by {holder:?} after the takeover"))
}

async fn a_release_goes_with_its_append_only_when_the_append_lands(store: &dyn LogStore, key: &str) -> Checked {
    const S: &str = "a release goes with its append, only when the append lands";
    let Some(leases) = store.leases() else { return Ok(()) };
    let taken = leases.acquire(key, "worker-a", Duration::from_secs(60)).await.map_err(store_error(S))?;
    check(S, taken.is_none(), || format!("a free lease was refused: held by {taken:?}"))?;
    let fenced = store.append_and_release(key, Expect::At(1), &[message("late")], "worker-a").await;
    check(S, matches!(fenced, Err(StoreError::Conflict { .. })), || format!("a fenced append answered {fenced:?}"))?;
    let holder = leases.holder(key).await.map_err(store_error(S))?;
    check(S, holder.as_deref() == Some("worker-a"), || format!("a fenced append gave the lease up: {holder:?}"))?;
    let end = [message("end")];
    let last = store.append_and_release(key, Expect::At(0), &end, "worker-a").await.map_err(store_error(S))?;
    check(S, last == 1, || format!("the last append ended at {last}, not 1"))?;
    let holder = leases.holder(key).await.map_err(store_error(S))?;
    check(S, holder.is_none(), || format!("the append landed, yet the lease is held by {holder:?}"))
}
