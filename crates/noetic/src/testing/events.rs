//! Collecting the events a session sends, to assert what happened and in which order.

use tokio::sync::broadcast::error::TryRecvError;

use crate::agent::Session;
use crate::context::{Event, EventKind, EventReceiver};

/// The `type` name an event has on the wire (`"turn_started"`, `"tool_call_completed"` …); `"<unnamed>"` if the
/// event does not serialise to an object with a `type`, so a comparison with the expected names fails visibly.
pub fn event_type(event: &Event) -> String {
    match serde_json::to_value(event) {
        Ok(value) => value["type"].as_str().unwrap_or("<unnamed>").to_owned(),
        Err(_) => "<unnamed>".to_owned(),
    }
}

/// Keeps every event received so far from one receiver. Collecting never waits: each accessor first takes what
/// has arrived since the last call. Events the receiver lost because it fell behind are counted in
/// [`missed`](Self::missed), never skipped silently.
#[derive(Debug)]
pub struct EventCollector {
    rx: EventReceiver,
    events: Vec<Event>,
    missed: u64,
}

impl EventCollector {
    /// Collects from `rx` (for example an [`EventSink`](crate::EventSink)'s subscription).
    pub fn new(rx: EventReceiver) -> Self {
        EventCollector { rx, events: Vec::new(), missed: 0 }
    }

    /// Subscribes to `session`'s events: only events sent from now on are collected.
    pub fn of(session: &Session) -> Self {
        EventCollector::new(session.subscribe())
    }

    fn collect(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(event) => self.events.push(event),
                Err(TryRecvError::Lagged(n)) => self.missed += n,
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// Every event received so far, in order.
    pub fn events(&mut self) -> &[Event] {
        self.collect();
        &self.events
    }

    /// What happened in every event received so far, in order.
    pub fn kinds(&mut self) -> Vec<EventKind> {
        self.events().iter().map(|e| e.kind.clone()).collect()
    }

    /// The [`event_type`] of every event received so far, in order.
    pub fn types(&mut self) -> Vec<String> {
        self.events().iter().map(event_type).collect()
    }

    /// Every event received so far that an earlier `take` did not return, in order; the collector forgets them,
    /// so the next call returns only newer events (to assert one phase of a test at a time).
    pub fn take(&mut self) -> Vec<Event> {
        self.collect();
        std::mem::take(&mut self.events)
    }

    /// How many events the receiver lost because it fell behind (0 in a test that keeps up).
    pub fn missed(&mut self) -> u64 {
        self.collect();
        self.missed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::context::{Context, EventSink};

    fn inbox(step: &str) -> EventKind {
        EventKind::LoopInboxMessage { step_id: step.into() }
    }

    #[test]
    fn the_collector_keeps_every_event_in_order_and_names_their_types() {
        let sink = EventSink::new(16);
        let mut events = EventCollector::new(sink.subscribe().unwrap());
        let ctx = Context::builder().events(sink).build();
        ctx.emit(|| inbox("a"));
        assert_eq!(events.types(), ["loop_inbox_message"]);
        ctx.emit(|| inbox("b"));
        let steps: Vec<String> = events
            .kinds()
            .into_iter()
            .map(|k| match k {
                EventKind::LoopInboxMessage { step_id } => step_id.to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(steps, ["a", "b"], "earlier events are kept, new ones appended");
        assert_eq!(events.missed(), 0);
        assert_eq!(events.take().len(), 2);
        ctx.emit(|| inbox("c"));
        assert_eq!(events.take().iter().map(event_type).collect::<Vec<_>>(), ["loop_inbox_message"]);
        assert!(events.types().is_empty(), "taken events are forgotten");
    }

    #[test]
    fn events_lost_by_a_lagging_receiver_are_counted_not_hidden() {
        let sink = EventSink::new(1);
        let mut events = EventCollector::new(sink.subscribe().unwrap());
        let ctx = Context::builder().events(sink).build();
        for step in ["a", "b", "c"] {
            ctx.emit(|| inbox(step));
        }
        assert_eq!((events.types().len(), events.missed()), (1, 2));
    }
}
