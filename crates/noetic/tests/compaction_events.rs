//! A compaction as the session's followers see it (#33): live when it happens (also one asked for by hand), and
//! from the session log after a restart, saying how many items it folded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use noetic::NoeticError;
use noetic::agent::log::MemoryLogStore;
use noetic::context::{EventKind, Followed};
use noetic::model::{Item, ModelRequest, ModelResponse, ScriptedModel};
use noetic::prelude::*;

/// Answers every message; a summary request gets "SUMMARY".
fn answering(request: &ModelRequest) -> Result<ModelResponse, NoeticError> {
    if request.instructions.as_deref().is_some_and(|i| i.starts_with("You compact a conversation")) {
        return Ok(ModelResponse::text("SUMMARY"));
    }
    let n = request.history.iter().filter(|i| matches!(i, Item::Message { .. })).count();
    Ok(ModelResponse::text(format!("answer {n} {}", "and some more words ".repeat(10))))
}

fn runtime(model: &ScriptedModel, store: &MemoryLogStore) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).model_id("m").log_store(Arc::new(store.clone())).build().unwrap()
}

/// (folded, upto, summarized) of a compaction event.
fn compaction(kind: &EventKind) -> Option<(usize, usize, bool)> {
    match kind {
        EventKind::ContextCompacted { folded, upto, summarized, .. } => Some((*folded, *upto, *summarized)),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_compaction_by_hand_reaches_the_sessions_followers_live_and_again_from_the_log_after_a_restart() {
    let model = ScriptedModel::responder(answering);
    let store = MemoryLogStore::new();
    let session = runtime(&model, &store).open("s").await.unwrap();
    for k in 1..=3 {
        session.send(format!("question {k} {}", "about the notes ".repeat(10))).await.unwrap().await.unwrap();
    }
    let mut live = session.subscribe();
    let done = session.compact("m").await.unwrap().unwrap();
    assert_eq!((done.folded, done.upto), (4, 4), "turns 1 and 2");
    let mut seen = Vec::new();
    while let Ok(event) = live.try_recv() {
        seen.extend(compaction(&event.kind));
    }
    assert_eq!(seen, [(4, 4, true)], "the followers were told as it happened");

    let reopened = runtime(&ScriptedModel::new([]), &store).open("s").await.unwrap();
    let mut follower = reopened.follow(0);
    let mut replayed = Vec::new();
    while let Ok(Some(next)) = tokio::time::timeout(Duration::from_secs(60), follower.next()).await {
        if let Followed::Event(event) = next {
            replayed.extend(compaction(&event.kind));
        }
    }
    assert_eq!(replayed, [(4, 4, true)], "a follower after a restart gets it from the log");
}
