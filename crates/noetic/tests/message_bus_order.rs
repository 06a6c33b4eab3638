//! The message bus keeps a session's messages in the order it accepted them, also when a turn that is ending
//! and a turn waiting for its slot meet (SPEC 4.2, 4.8; issue #29 item 7).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use noetic::agent::{Delivery, InboundMessage, MessageBus};
use noetic::prelude::*;
use tokio::sync::{Notify, Semaphore};

/// An agent that notes what each turn handles (its input, or for a continuation the user messages it starts with),
/// then waits for a permit before it answers.
fn noting_agent(
    seen: &Arc<Mutex<Vec<String>>>,
    started: &Arc<Notify>,
    proceed: &Arc<Semaphore>,
) -> Step<String, String> {
    let (seen, started, proceed) = (seen.clone(), started.clone(), proceed.clone());
    // How many user items of the conversation earlier turns handled.
    let users_seen = Arc::new(Mutex::new(0usize));
    Step::run("agent", move |input: String, ctx: StepContext| {
        let (seen, started, proceed, users_seen) = (seen.clone(), started.clone(), proceed.clone(), users_seen.clone());
        async move {
            let users = ctx.with_items(|items| {
                items
                    .iter()
                    .filter(|i| i.role() == Some(Role::User))
                    .map(|i| i.text().unwrap_or("").to_owned())
                    .collect::<Vec<_>>()
            });
            let mut handled = if input.is_empty() { Vec::new() } else { vec![input.clone()] };
            // A continuation starts with the messages it took as user items (a `run` agent adds no other).
            {
                let mut done = users_seen.lock().unwrap();
                handled.extend(users.iter().skip(*done).cloned());
                *done = users.len();
            }
            seen.lock().unwrap().extend(handled);
            started.notify_one();
            proceed.acquire().await.map_err(NoeticError::other)?.forget();
            Ok(format!("answered {input}"))
        }
    })
    .build()
    .unwrap()
}

/// The messages in the order the agent handled them, once `turns` replies came back.
async fn handled_after(
    replies: &mut noetic::agent::BusReplies,
    seen: &Arc<Mutex<Vec<String>>>,
    turns: usize,
) -> Vec<String> {
    for _ in 0..turns {
        replies.recv().await.unwrap().result.unwrap();
    }
    seen.lock().unwrap().clone()
}

/// A bus with one turn slot and a session whose first turn ("zero") has started and waits for `proceed`; the first
/// turn's task holds the slot until its continuations are done.
struct Bus {
    seen: Arc<Mutex<Vec<String>>>,
    proceed: Arc<Semaphore>,
    session: noetic::agent::Session,
    bus: MessageBus,
    replies: noetic::agent::BusReplies,
}

async fn bus_with_a_first_turn() -> Bus {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (started, proceed) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let rt = Runtime::builder()
        .model(Arc::new(ScriptedModel::new([])))
        .agent(noting_agent(&seen, &started, &proceed))
        .build()
        .unwrap();
    let session = rt.session("s");
    let (bus, replies) = MessageBus::new(rt, 1);
    assert_eq!(bus.publish(InboundMessage::text("s", "zero")).await.unwrap(), Delivery::Started);
    started.notified().await;
    Bus { seen, proceed, session, bus, replies }
}

#[tokio::test]
async fn a_message_that_claimed_an_idle_session_runs_before_one_accepted_after_it_while_the_last_turn_ended() {
    // A spawned task, not the test's own future: the scheduler runs woken tasks in the order they were woken, and
    // polls the test's own future only between batches of them.
    tokio::spawn(claim_while_the_last_turn_ends()).await.unwrap();
}

async fn claim_while_the_last_turn_ends() {
    let Bus { seen, proceed, session, bus, mut replies } = bus_with_a_first_turn().await;
    proceed.add_permits(10);
    // The session is released before the bus looks for continuations: A and B arrive in that window (this task is
    // woken by the release, ahead of the bus's task, and publishing does not yield).
    session.idle().await;
    assert_eq!(bus.publish(InboundMessage::text("s", "A")).await.unwrap(), Delivery::Started);
    assert!(matches!(bus.publish(InboundMessage::text("s", "B")).await.unwrap(), Delivery::Steered(_)));
    let handled = handled_after(&mut replies, &seen, 3).await;
    assert_eq!(handled, ["zero", "A", "B"], "messages are handled in the order the bus accepted them");
}

#[tokio::test]
async fn a_message_queued_before_a_claim_still_runs_before_the_claiming_message() {
    tokio::spawn(claim_behind_a_queued_message()).await.unwrap();
}

async fn claim_behind_a_queued_message() {
    let Bus { seen, proceed, session, bus, mut replies } = bus_with_a_first_turn().await;
    // X arrives while the first turn runs but after its last checkpoint: it waits for a continuation.
    assert!(matches!(bus.publish(InboundMessage::text("s", "X")).await.unwrap(), Delivery::Steered(_)));
    proceed.add_permits(10);
    session.idle().await;
    bus.publish(InboundMessage::text("s", "A")).await.unwrap();
    bus.publish(InboundMessage::text("s", "B")).await.unwrap();
    let mut handled = Vec::new();
    while handled.len() < 4 {
        replies.recv().await.unwrap().result.unwrap();
        handled = seen.lock().unwrap().clone();
    }
    assert_eq!(handled, ["zero", "X", "A", "B"], "messages are handled in the order the bus accepted them");
    assert_eq!(session.queued(), 0);
}
