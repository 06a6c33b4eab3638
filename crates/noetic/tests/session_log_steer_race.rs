//! A message steered into a session while its log is read again — taking the lease to resume the turn a stopped
//! process left reads the log and replaces the session's queue with the log's — reaches the resumed turn. The
//! message's acceptance is still on its way to the log at that moment (the writer is busy with the read), so the
//! log's queue does not hold it yet; it used to be dropped from the session's queue and stay queued in the log for
//! good (the SQLite crash test saw it about once in 350 trials). A store that holds the read and the message's
//! append at gates makes that order certain here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::future::BoxFuture;
use noetic::agent::log::{Append, Entry, Expect, LogStore, StoreError};
use noetic::model::{ModelRequest, ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{HookedLogStore, ReadCall, RecordingLogStore, StoreHooks};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Calls `search` twice, one call a round, then answers.
fn respond(request: &ModelRequest) -> Result<ModelResponse, NoeticError> {
    let done = request.history.iter().filter(|item| matches!(item, Item::ToolResult(_))).count();
    Ok(if done < 2 {
        ModelResponse::tool_calls([(format!("c{done}").as_str(), "search", json!({"q": done}))])
    } else {
        ModelResponse::text("found it")
    })
}

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>) -> Runtime {
    let search = FnTool::builder("search", "Searches.")
        .handler(|_, _| async { Ok(Value::from("src/lib.rs:1")) })
        .idempotent(true)
        .build()
        .unwrap();
    Runtime::builder().model(Arc::new(model.clone())).tool(Arc::new(search)).log_store(store).build().unwrap()
}

/// A memory store which, once armed, holds its first read until the test says the message is queued, and holds
/// the message's append until a later read (the session reading the left turn again, after its queue was set).
type Gated = HookedLogStore<Holds>;

#[derive(Default)]
struct Holds {
    armed: AtomicBool,
    reads: AtomicUsize,
    queued: Notify,
    read_again: Notify,
}

impl StoreHooks for Holds {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let message = append.entries.iter().any(|e| matches!(e, Entry::MessageAccepted { .. }));
            if self.armed.load(Ordering::SeqCst) && message && self.reads.load(Ordering::SeqCst) < 2 {
                self.read_again.notified().await;
            }
            Ok(())
        })
    }

    fn read<'a>(&'a self, call: ReadCall, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if call == ReadCall::Entries && self.armed.load(Ordering::SeqCst) {
                match self.reads.fetch_add(1, Ordering::SeqCst) {
                    0 => self.queued.notified().await,
                    _ => self.read_again.notify_one(),
                }
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_message_steered_while_the_left_turn_is_read_again_reaches_the_resumed_turn() {
    // The log of a turn that stopped after its first call was written.
    let recording = Arc::new(RecordingLogStore::default());
    let reference = ScriptedModel::responder(respond);
    let session = runtime(&reference, recording.clone()).open("s").await.unwrap();
    session.send("find it").await.unwrap().await.unwrap();
    let appends = recording.appends();
    let cut = appends
        .iter()
        .position(|batch| batch.iter().any(|e| matches!(e, Entry::ToolStarted { .. })))
        .expect("a call's start was written")
        + 1;
    let prefix: Vec<Entry> = appends[..cut].iter().flatten().cloned().collect();

    let store = Arc::new(Gated::default());
    store.inner.append("s", Expect::At(0), &prefix).await.unwrap();
    let model = ScriptedModel::responder(respond);
    let rt = runtime(&model, store.clone());
    let session = rt.open("s").await.unwrap();
    assert!(session.unfinished_turn().is_some(), "the log holds a turn left open");
    store.hooks.armed.store(true, Ordering::SeqCst);

    // Resuming takes the lease and reads the log again, through the writer: held at the gate.
    let resumed = tokio::spawn({
        let session = session.clone();
        async move { session.resume().await }
    });
    noetic::testing::until("the log is being read again", || store.hooks.reads.load(Ordering::SeqCst) == 1)
        .await
        .unwrap();
    // Steered meanwhile: queued here at once, its acceptance behind the read in the writer's queue.
    let steered = tokio::spawn({
        let session = session.clone();
        async move { session.steer("prefer the cache").await }
    });
    noetic::testing::until("the message is queued", || session.queued() == 1).await.unwrap();
    store.hooks.queued.notify_one();

    let turn = resumed.await.unwrap().unwrap().expect("the left turn resumes");
    assert_eq!(turn.await.unwrap(), "found it");
    steered.await.unwrap().unwrap();
    assert!(
        session.history().contains(&Item::user("prefer the cache")),
        "the resumed turn showed the model the message: {:?}",
        session.history()
    );
    assert_eq!(session.queued(), 0, "nothing is left queued here");
    let left: Vec<Entry> = store.inner.read("s", 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect();
    let accepted = left.iter().filter(|e| matches!(e, Entry::MessageAccepted { .. })).count();
    let injected = left.iter().filter(|e| matches!(e, Entry::Injected { .. })).count();
    assert_eq!((accepted, injected), (1, 1), "the log holds the message once, and its delivery");
}
