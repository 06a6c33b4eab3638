//! Waiting for an answer from another thread or task without putting a tokio worker to sleep for it.
//!
//! A store's writer (a thread for SQLite, a task on a connection for PostgreSQL) answers a request that is alone in
//! flight within a commit, tens of microseconds. A tokio worker with nothing else to do parks while it waits, and the
//! answer then has to wake it; on a virtual machine waking a core that went idle costs about as much as the commit
//! itself (measured on SQLite: one append 51–62 µs seen by its caller, 30–34 µs when the caller keeps looking; the
//! same ~29 µs with everything pinned to one core, where nothing sleeps on another core). So the caller of a lone
//! request *looks* for its answer for up to [`LOOK`] — between looks giving the core to any other thread ready on it
//! (the writer itself, when the scheduler put the two side by side) and the worker to any other task — before it
//! waits as any future does. With other requests in flight ([`InFlight`], [`Sent::wait`]) it waits at once: group commit makes
//! those answers slower, and the worker has other tasks to run meanwhile. On a machine of one core it never looks:
//! the looks would only keep the writer from its commit.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long the caller of a lone request looks for its answer before it waits: a commit and a little more.
pub const LOOK: Duration = Duration::from_micros(200);

/// How an answer was taken ([`wait_telling`], for the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// While looking.
    Looked,
    /// By waiting for it as a future does (not alone, or the looks ran out).
    Waited,
}

/// Requests in flight to one writer: whether a new one is alone decides whether its caller looks.
#[derive(Debug, Default)]
pub struct InFlight(AtomicUsize);

impl InFlight {
    /// Marks a request as sent (call it before sending): the request in flight, which knows whether it is alone
    /// and stops counting once its answer is taken (or it is dropped).
    pub fn sent(&self) -> Sent<'_> {
        let before = self.0.fetch_add(1, Ordering::AcqRel);
        Sent { flight: self, alone: before == 0 }
    }
}

/// A request in flight (see [`InFlight::sent`]); dropping it marks it answered.
pub struct Sent<'a> {
    flight: &'a InFlight,
    alone: bool,
}

impl Sent<'_> {
    /// Whether no other request was in flight when this one was sent.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// Waits for `answer`, looking for it first when the request is alone in flight and the process may use more
    /// than one core (see the [module docs](self)); `None` when its sender was dropped unanswered (the writer is
    /// gone).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use noetic_core::handoff::InFlight;
    ///
    /// let in_flight = InFlight::default();
    /// let (reply, answer) = tokio::sync::oneshot::channel();
    /// let sent = in_flight.sent();
    /// std::thread::spawn(move || reply.send(42).unwrap());
    /// assert_eq!(sent.wait(answer).await, Some(42));
    /// # }
    /// ```
    pub async fn wait<T>(self, answer: oneshot::Receiver<T>) -> Option<T> {
        wait_telling(answer, look_for(self.alone)).await.map(|(value, _)| value)
    }
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        self.flight.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long [`Sent::wait`] looks for an answer.
fn look_for(alone: bool) -> Duration {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if alone && cores > 1 { LOOK } else { Duration::ZERO }
}

/// [`Sent::wait`], looking for up to `look` (none when zero), and saying how the answer was taken.
async fn wait_telling<T>(mut answer: oneshot::Receiver<T>, look: Duration) -> Option<(T, Taken)> {
    if !look.is_zero() {
        let start = Instant::now();
        loop {
            match answer.try_recv() {
                Ok(value) => return Some((value, Taken::Looked)),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if start.elapsed() >= look {
                break;
            }
            // The core goes to any other thread ready on it (the writer, when the scheduler put it beside this
            // worker: without this the writer's commit waited for the looks to end, ~10× its time), the worker to
            // any other task (and it polls its I/O driver without sleeping); then look again.
            std::thread::yield_now();
            tokio::task::yield_now().await;
        }
    }
    answer.await.ok().map(|value| (value, Taken::Waited))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_lone_request_takes_an_answer_another_task_gives_while_it_looks() {
        // One thread: the answering task runs only when the looking caller hands the worker over between looks.
        let (reply, answer) = oneshot::channel();
        let answering = tokio::spawn(async move { reply.send(7).unwrap() });
        // Looking for as long as it takes: only handing the worker over lets the answer come.
        assert_eq!(wait_telling(answer, Duration::MAX).await.unwrap(), (7, Taken::Looked));
        answering.await.unwrap();
    }

    #[test]
    fn only_a_lone_request_on_a_machine_of_several_cores_looks() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(look_for(true), if cores > 1 { LOOK } else { Duration::ZERO });
        assert_eq!(look_for(false), Duration::ZERO);
    }

    #[tokio::test]
    async fn an_answer_that_comes_after_the_looks_is_still_taken() {
        let (reply, answer) = oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        // The answer comes from a thread held back until the caller has stopped looking and waits.
        let thread = std::thread::spawn(move || {
            released.recv().unwrap();
            reply.send("late").unwrap();
        });
        let waiting = tokio::spawn(wait_telling(answer, Duration::from_nanos(1)));
        // This one-thread runtime polls the caller while this task yields: it looks once, its look is over, and
        // it waits.
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        assert_eq!(waiting.await.unwrap().unwrap(), ("late", Taken::Waited));
        thread.join().unwrap();
    }

    #[tokio::test]
    async fn a_request_whose_writer_is_gone_is_told_so_while_looking_and_while_waiting() {
        let flight = InFlight::default();
        let lone = flight.sent();
        let other = flight.sent();
        for (sent, alone) in [(other, false), (lone, true)] {
            assert_eq!(sent.alone(), alone);
            let (reply, answer) = oneshot::channel::<u8>();
            drop(reply);
            assert_eq!(sent.wait(answer).await, None);
        }
    }

    #[test]
    fn only_the_first_request_in_flight_is_alone_and_answered_ones_leave() {
        let flight = InFlight::default();
        let first = flight.sent();
        assert!(first.alone());
        let second = flight.sent();
        assert!(!second.alone());
        drop(first);
        drop(second);
        assert!(flight.sent().alone());
    }
}
