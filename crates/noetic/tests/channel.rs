//! Behaviour of channels: value, queue and topic modes, timeouts, cancellation, closing and wake handles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use noetic::context::{ChannelMode, TrySendError, WakeHandle};
use noetic::prelude::*;
use tokio::time::{Instant, sleep};

const LONG: Duration = Duration::from_secs(3600);

/// Lets spawned tasks run until they block (paused time advances only when every task is idle).
async fn settle() {
    sleep(Duration::from_millis(1)).await;
}

fn assert_timeout(result: Result<impl std::fmt::Debug, NoeticError>, channel: &str, after: Duration) {
    match result {
        Err(NoeticError::ChannelTimeout { channel: c, timeout }) => {
            assert_eq!(c, channel);
            assert_eq!(timeout, after);
        }
        other => panic!("expected ChannelTimeout, got {other:?}"),
    }
}

fn assert_cancelled(result: Result<impl std::fmt::Debug, NoeticError>, why: &str) {
    match result {
        Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some(why)),
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

fn assert_closed(result: Result<impl std::fmt::Debug, NoeticError>, channel: &str) {
    match result {
        Err(NoeticError::ChannelClosed { channel: c }) => assert_eq!(c, channel),
        other => panic!("expected ChannelClosed, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Value mode
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn value_recv_returns_the_latest_value_without_consuming_it() {
    let ch = Channel::value("latest");
    assert_eq!(ch.mode(), ChannelMode::Value);
    let ctx = Context::new();
    ch.send(1u32, &ctx).await.unwrap();
    ch.try_send(2).unwrap();
    assert_eq!(ch.recv(&ctx, LONG).await.unwrap(), 2, "the latest value, not the first");
    assert_eq!(ch.recv(&ctx, LONG).await.unwrap(), 2, "reading did not consume it");
    assert_eq!(ch.try_recv(), Some(2));
    assert_eq!(ch.try_recv(), Some(2));
    assert_eq!(ch.len(), 1);
}

#[test]
fn value_try_recv_is_none_before_any_send_and_the_latest_value_after() {
    let ch: Channel<&str> = Channel::value("v");
    assert_eq!(ch.try_recv(), None);
    assert!(ch.is_empty());
    ch.try_send("a").unwrap();
    ch.try_send("b").unwrap();
    assert_eq!(ch.try_recv(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn value_recv_waits_until_a_value_is_sent() {
    let ch: Channel<u32> = Channel::value("v");
    let ctx = Context::new();
    let receiver = tokio::spawn({
        let (ch, ctx) = (ch.clone(), ctx.clone());
        async move {
            let start = Instant::now();
            let v = ch.recv(&ctx, LONG).await;
            (v, start.elapsed())
        }
    });
    sleep(Duration::from_secs(5)).await;
    assert!(!receiver.is_finished(), "recv waits while there is no value");
    ch.try_send(7).unwrap();
    let (v, waited) = receiver.await.unwrap();
    assert_eq!(v.unwrap(), 7);
    assert_eq!(waited, Duration::from_secs(5), "woken by the send, not by the timeout");
}

// ---------------------------------------------------------------------------------------------------------------
// Queue mode
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn queue_delivers_values_in_fifo_order() {
    let ch = Channel::queue("q", 8).unwrap();
    assert_eq!(ch.mode(), ChannelMode::Queue { capacity: 8 });
    let ctx = Context::new();
    for v in 1..=5u32 {
        ch.send(v, &ctx).await.unwrap();
    }
    assert_eq!(ch.len(), 5);
    let mut got = vec![ch.try_recv().unwrap()];
    for _ in 0..4 {
        got.push(ch.recv(&ctx, LONG).await.unwrap());
    }
    assert_eq!(got, [1, 2, 3, 4, 5]);
    assert!(ch.is_empty(), "recv consumes");
    assert_eq!(ch.try_recv(), None);
}

#[test]
fn queue_try_send_on_a_full_queue_hands_the_value_back() {
    let ch = Channel::queue("q", 2).unwrap();
    ch.try_send("a").unwrap();
    ch.try_send("b").unwrap();
    assert_eq!(ch.try_send("c"), Err(TrySendError::Full("c")));
    assert_eq!(ch.len(), 2, "the rejected value was not buffered");
    assert_eq!(ch.try_recv(), Some("a"));
    ch.try_send("c").unwrap();
    assert_eq!((ch.try_recv(), ch.try_recv(), ch.try_recv()), (Some("b"), Some("c"), None));
}

#[tokio::test(start_paused = true)]
async fn queue_send_waits_for_room_and_succeeds_after_a_recv() {
    let ch = Channel::queue("q", 1).unwrap();
    let ctx = Context::new();
    ch.try_send(1u32).unwrap();
    let sender = tokio::spawn({
        let (ch, ctx) = (ch.clone(), ctx.clone());
        async move { ch.send(2, &ctx).await }
    });
    sleep(Duration::from_secs(5)).await;
    assert!(!sender.is_finished(), "send waits while the queue is full");
    assert_eq!(ch.len(), 1);
    assert_eq!(ch.recv(&ctx, LONG).await.unwrap(), 1);
    sender.await.unwrap().unwrap();
    assert_eq!(ch.try_recv(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn queue_send_timeout_fails_with_channel_timeout_when_no_room_appears() {
    let ch = Channel::queue("full", 1).unwrap();
    let ctx = Context::new();
    ch.try_send(1u32).unwrap();
    let start = Instant::now();
    assert_timeout(ch.send_timeout(2, &ctx, Duration::from_millis(250)).await, "full", Duration::from_millis(250));
    assert_eq!(start.elapsed(), Duration::from_millis(250));
    assert_eq!((ch.len(), ch.try_recv()), (1, Some(1)), "the timed-out value was not queued");
}

#[tokio::test(start_paused = true)]
async fn queue_send_gives_up_after_the_default_timeout() {
    let ch = Channel::queue("full", 1).unwrap();
    let ctx = Context::new();
    ch.try_send(1u32).unwrap();
    let start = Instant::now();
    assert_timeout(ch.send(2, &ctx).await, "full", Duration::from_secs(30));
    assert_eq!(start.elapsed(), Duration::from_secs(30));
}

#[test]
fn queue_with_zero_capacity_is_rejected() {
    let err = Channel::<u32>::queue("q", 0).unwrap_err();
    assert_eq!(err.code, ConfigCode::InvalidChannelCapacity);
    assert!(Channel::<u32>::queue("q", 1).is_ok());
}

// ---------------------------------------------------------------------------------------------------------------
// Topic mode
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn topic_delivers_the_next_value_to_every_waiting_receiver() {
    let ch: Channel<u32> = Channel::topic("t");
    assert_eq!(ch.mode(), ChannelMode::Topic);
    let ctx = Context::new();
    let receivers: Vec<_> = (0..3)
        .map(|_| {
            let (ch, ctx) = (ch.clone(), ctx.clone());
            tokio::spawn(async move { ch.recv(&ctx, LONG).await })
        })
        .collect();
    settle().await;
    ch.try_send(42).unwrap();
    ch.try_send(43).unwrap();
    for r in receivers {
        assert_eq!(r.await.unwrap().unwrap(), 42, "each waiting receiver gets the next value");
    }
}

#[test]
fn topic_try_recv_is_always_none() {
    let ch: Channel<u32> = Channel::topic("t");
    assert_eq!(ch.try_recv(), None);
    ch.try_send(1).unwrap();
    assert_eq!(ch.try_recv(), None);
    assert_eq!(ch.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn topic_value_sent_when_nobody_waits_is_not_delivered_to_a_later_receiver() {
    let ch: Channel<u32> = Channel::topic("t");
    let ctx = Context::new();
    ch.try_send(1).unwrap();
    // Nothing is stored: a receiver arriving later times out...
    assert_timeout(ch.recv(&ctx, Duration::from_millis(100)).await, "t", Duration::from_millis(100));
    // ...or gets the first value sent after it started waiting.
    let receiver = tokio::spawn({
        let (ch, ctx) = (ch.clone(), ctx.clone());
        async move { ch.recv(&ctx, LONG).await }
    });
    settle().await;
    ch.try_send(2).unwrap();
    assert_eq!(receiver.await.unwrap().unwrap(), 2);
}

// ---------------------------------------------------------------------------------------------------------------
// Timeouts, cancellation, closing
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn recv_times_out_with_channel_timeout_in_every_mode() {
    let ctx = Context::new();
    let channels = [Channel::<u32>::value("value"), Channel::queue("queue", 4).unwrap(), Channel::topic("topic")];
    for ch in channels {
        let start = Instant::now();
        assert_timeout(ch.recv(&ctx, Duration::from_secs(2)).await, ch.name(), Duration::from_secs(2));
        assert_eq!(start.elapsed(), Duration::from_secs(2), "{}", ch.name());
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_context_wakes_a_blocked_recv_with_cancelled() {
    let channels = [Channel::<u32>::value("value"), Channel::queue("queue", 4).unwrap(), Channel::topic("topic")];
    for ch in channels {
        let ctx = Context::new();
        let receiver = tokio::spawn({
            let (ch, ctx) = (ch.clone(), ctx.clone());
            async move {
                let start = Instant::now();
                (ch.recv(&ctx, LONG).await, start.elapsed())
            }
        });
        sleep(Duration::from_secs(1)).await;
        assert!(!receiver.is_finished());
        ctx.cancel("shutting down");
        let (result, waited) = receiver.await.unwrap();
        assert_cancelled(result, "shutting down");
        assert_eq!(waited, Duration::from_secs(1), "{}: woken by the cancellation, not the timeout", ch.name());
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_parent_context_wakes_a_recv_blocked_in_a_child_context() {
    let ch: Channel<u32> = Channel::queue("q", 1).unwrap();
    let parent = Context::new();
    let child = parent.fork_child();
    let receiver = tokio::spawn({
        let ch = ch.clone();
        async move { ch.recv(&child, LONG).await }
    });
    settle().await;
    parent.cancel("parent gone");
    assert_cancelled(receiver.await.unwrap(), "parent gone");
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_context_wakes_a_blocked_send_with_cancelled() {
    let ch = Channel::queue("q", 1).unwrap();
    ch.try_send(1u32).unwrap();
    let ctx = Context::new();
    let sender = tokio::spawn({
        let (ch, ctx) = (ch.clone(), ctx.clone());
        async move {
            let start = Instant::now();
            (ch.send(2, &ctx).await, start.elapsed())
        }
    });
    sleep(Duration::from_secs(1)).await;
    assert!(!sender.is_finished());
    ctx.cancel("shutting down");
    let (result, waited) = sender.await.unwrap();
    assert_cancelled(result, "shutting down");
    assert_eq!(waited, Duration::from_secs(1), "woken by the cancellation, not the 30 s timeout");
    assert_eq!((ch.len(), ch.try_recv()), (1, Some(1)), "the cancelled value was not queued");
}

#[tokio::test(start_paused = true)]
async fn close_wakes_blocked_receivers_with_channel_closed() {
    let channels = [Channel::<u32>::value("value"), Channel::queue("queue", 4).unwrap(), Channel::topic("topic")];
    for ch in channels {
        let ctx = Context::new();
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let (ch, ctx) = (ch.clone(), ctx.clone());
                tokio::spawn(async move {
                    let start = Instant::now();
                    (ch.recv(&ctx, LONG).await, start.elapsed())
                })
            })
            .collect();
        sleep(Duration::from_secs(1)).await;
        ch.close();
        assert!(ch.is_closed());
        for r in receivers {
            let (result, waited) = r.await.unwrap();
            assert_closed(result, ch.name());
            assert_eq!(waited, Duration::from_secs(1), "{}: woken by close, not the timeout", ch.name());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_queue_is_drained_before_receivers_see_channel_closed() {
    let ch = Channel::queue("q", 4).unwrap();
    let ctx = Context::new();
    ch.try_send(1u32).unwrap();
    ch.try_send(2).unwrap();
    ch.close();
    assert_eq!(ch.try_send(3), Err(TrySendError::Closed(3)), "sends fail once closed");
    assert_closed(ch.send(3, &ctx).await, "q");
    assert_eq!(ch.recv(&ctx, LONG).await.unwrap(), 1);
    assert_eq!(ch.recv(&ctx, LONG).await.unwrap(), 2);
    assert_closed(ch.recv(&ctx, LONG).await, "q");
}

#[tokio::test(start_paused = true)]
async fn close_wakes_a_sender_blocked_on_a_full_queue_with_channel_closed() {
    let ch = Channel::queue("q", 1).unwrap();
    ch.try_send(1u32).unwrap();
    let ctx = Context::new();
    let sender = tokio::spawn({
        let (ch, ctx) = (ch.clone(), ctx.clone());
        async move { ch.send(2, &ctx).await }
    });
    settle().await;
    assert!(!sender.is_finished());
    ch.close();
    assert_closed(sender.await.unwrap(), "q");
}

// ---------------------------------------------------------------------------------------------------------------
// Wake handles
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn wake_handle_notified_resolves_on_the_next_send_without_consuming() {
    let ch = Channel::queue("q", 4).unwrap();
    let handle: WakeHandle = (&ch).into();
    let waiter = tokio::spawn({
        let handle = handle.clone();
        async move {
            let start = Instant::now();
            handle.notified().await;
            start.elapsed()
        }
    });
    sleep(Duration::from_secs(3)).await;
    assert!(!waiter.is_finished(), "nothing was sent yet");
    ch.try_send(9u32).unwrap();
    assert_eq!(waiter.await.unwrap(), Duration::from_secs(3), "woken by the send");
    assert_eq!(ch.try_recv(), Some(9), "the wake handle did not consume the value");
}

#[tokio::test(start_paused = true)]
async fn wake_handle_does_not_resolve_for_a_send_that_happened_before_it_waited() {
    let ch: Channel<u32> = Channel::value("v");
    let handle = ch.wake_handle();
    ch.try_send(1).unwrap();
    let early = tokio::time::timeout(Duration::from_secs(1), handle.notified()).await;
    assert!(early.is_err(), "a past send does not wake a new waiter");
    let waiter = tokio::spawn({
        let handle = handle.clone();
        async move { handle.notified().await }
    });
    settle().await;
    ch.try_send(2).unwrap();
    tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("woken by the next send").unwrap();
}
