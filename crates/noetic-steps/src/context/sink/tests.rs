//! The event sink's receivers: what they read, when they fall behind, when they wake and when they close.
#![allow(clippy::unwrap_used, clippy::panic)]
use std::sync::atomic::AtomicUsize;

use super::super::events::StepKind;
use super::*;

fn started(step: &Arc<str>) -> EventKind {
    EventKind::StepStarted { step_id: step.clone(), kind: StepKind::Run }
}

/// Emits `n` step starts of `step`.
fn emit_started(sink: &EventSink, step: &Arc<str>, n: usize) {
    for _ in 0..n {
        sink.emit(ExecutionId::new(), || started(step));
    }
}

/// A logged sink keeping `log` events, a receiver of it, and `n` step starts of one step emitted after it subscribed.
fn logged_after(log: usize, n: usize) -> (EventSink, EventReceiver, Arc<str>) {
    let sink = EventSink::with_log(8, log);
    let rx = sink.subscribe().unwrap();
    let step: Arc<str> = Arc::from("plan");
    emit_started(&sink, &step, n);
    (sink, rx, step)
}

/// The numbers of the next `n` events `rx` reads.
fn seqs(rx: &mut EventReceiver, n: usize) -> Vec<u64> {
    (0..n).map(|_| rx.try_recv().unwrap().seq).collect()
}

fn waiting(rx: &EventReceiver) -> usize {
    rx.ring.waiting.load(Ordering::SeqCst)
}

#[test]
fn a_receiver_reads_each_event_once_in_order_as_copies_that_share_the_events_texts() {
    let (sink, mut rx, step) = logged_after(16, 3);
    assert_eq!(seqs(&mut rx, 3), [1, 2, 3]);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    // The follower reads the same events; their texts are the emitter's strings, not copies of them.
    let mut follower = sink.follow(0).unwrap();
    let Some(Followed::Event(first)) = follower.ready() else { panic!("the log holds the first event") };
    let EventKind::StepStarted { step_id, .. } = &first.kind else { panic!("{first:?}") };
    assert!(Arc::ptr_eq(step_id, &step));
}

#[test]
fn a_receiver_the_log_outran_is_told_how_many_it_lost_and_reads_on_from_the_oldest_held() {
    let (sink, mut rx, step) = logged_after(3, 5);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Lagged(2))));
    assert_eq!(seqs(&mut rx, 3), [3, 4, 5]);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    // A receiver made now reads only what comes next.
    let mut later = rx.resubscribe();
    assert!(matches!(later.try_recv(), Err(TryRecvError::Empty)));
    sink.emit(ExecutionId::new(), || started(&step));
    assert_eq!(later.try_recv().unwrap().seq, 6);
    assert_eq!(rx.try_recv().unwrap().seq, 6);
}

#[test]
fn a_plain_sink_builds_events_only_while_a_receiver_lives_and_holds_what_it_has_not_read() {
    let sink = EventSink::new(2);
    let built = AtomicUsize::new(0);
    let step: Arc<str> = Arc::from("s");
    let emit = || {
        sink.emit(ExecutionId::new(), || {
            built.fetch_add(1, Ordering::SeqCst);
            started(&step)
        })
    };
    emit();
    assert_eq!(built.load(Ordering::SeqCst), 0, "nobody listens: nothing is built");
    let mut rx = sink.subscribe().unwrap();
    assert!(sink.is_active());
    for _ in 0..3 {
        emit();
    }
    assert_eq!(built.load(Ordering::SeqCst), 3);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Lagged(1))));
    assert_eq!(rx.try_recv().unwrap().seq, 0, "a plain sink numbers nothing");
    assert!(rx.try_recv().is_ok());
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    let ring = rx.ring.clone();
    drop(rx);
    assert!(!sink.is_active());
    assert!(lock(&ring.state).recent.is_empty(), "the last receiver gone: the events it read are let go");
    emit();
    assert_eq!(built.load(Ordering::SeqCst), 3, "the last receiver gone: nothing is built again");
    let mut again = sink.subscribe().unwrap();
    emit();
    assert_eq!(again.try_recv().map(|e| e.seq), Ok(0), "a new receiver reads what comes next");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_receiver_wakes_for_the_next_event_and_learns_when_the_sink_is_gone() {
    let sink = EventSink::with_log(8, 16);
    let mut rx = sink.subscribe().unwrap();
    let step: Arc<str> = Arc::from("s");
    let mut waiter = Box::pin(rx.recv());
    // Polled once: nothing is held, so it registers and waits.
    assert!(futures::poll!(waiter.as_mut()).is_pending());
    drop(waiter);
    assert_eq!(waiting(&rx), 0, "a receiver that stopped waiting is not counted");
    let (told, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let _ = told.send(rx.recv().await.map(|e| e.seq));
        rx.recv().await.map(|e| e.seq)
    });
    // The reader runs until it waits (this runtime has one thread: each yield lets it run).
    let probe = sink.subscribe().unwrap();
    while waiting(&probe) == 0 {
        tokio::task::yield_now().await;
    }
    sink.emit(ExecutionId::new(), || started(&step));
    // Woken by the event while the sink lives (a receiver never woken would let the paused clock run out).
    let heard = tokio::time::timeout(std::time::Duration::from_secs(60), heard.recv()).await;
    assert_eq!(heard.ok().flatten(), Some(Ok(1)));
    drop(sink);
    assert_eq!(reader.await.unwrap(), Err(RecvError::Closed));
    assert!(matches!(EventReceiver::closed().recv().await, Err(RecvError::Closed)));
}
