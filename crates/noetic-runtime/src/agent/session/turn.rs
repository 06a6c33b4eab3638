//! A running turn: its handle, and how a session starts one on a claimed conversation.

use super::*;
use crate::scope::StepContext;

/// A running turn, returned by [`Session::send`] (and [`Session::send_or_steer`], [`Session::continue_session`],
/// [`Session::resume`]).
///
/// The turn runs as a tokio task (`tokio::spawn`) from the moment it is started, whether or not anyone awaits it:
/// awaiting a `Turn` only waits for its answer, a `Result<String, `[`NoeticError`]`>`. Dropping it does not cancel
/// the turn — it runs to its end and the session stays busy until then; [`Turn::cancel`] or [`Session::stop`]
/// end it early. While it runs, [`Session::steer`] queues messages for it.
pub struct Turn {
    number: u64,
    execution_id: ExecutionId,
    cancel: CancellationToken,
    handle: JoinHandle<Result<String, NoeticError>>,
}

impl Turn {
    /// The turn's number within its session (1-based).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The id of the turn's execution ([`ExecutionId`]): the `execution_id` of the events the turn's own steps
    /// emit ([`Event::execution_id`](crate::context::Event::execution_id); spawned children and fork paths have ids of their own), and the key of its
    /// layer state — its steering ledger, for instance, through
    /// [`Runtime::get_layer_state`](crate::agent::Runtime::get_layer_state) or
    /// [`SteeringLayer::ledger`](crate::steering::SteeringLayer::ledger).
    pub fn execution_id(&self) -> ExecutionId {
        self.execution_id
    }

    /// Cancels the turn; running tools observe the cancellation and the turn ends with
    /// [`NoeticError::Cancelled`].
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl IntoFuture for Turn {
    type Output = Result<String, NoeticError>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.handle
                .await
                .unwrap_or_else(|e| Err(NoeticError::with_source(format!("the turn's task failed: {e}"), e)))
        })
    }
}

impl Session {
    /// Starts a turn on a claimed conversation (the caller holds its lock and took its history).
    pub(super) fn start_turn(
        &self,
        state: &Arc<SessionState>,
        conversation: &mut Conversation,
        history: History,
        message: String,
        pending: Vec<SteerMessage>,
        kind: TurnKind,
    ) -> Turn {
        let cancel = CancellationToken::new();
        let execution_id = ExecutionId::new();
        let number = match kind {
            // The turn a stopped process left keeps its number: it was the session's last one started.
            TurnKind::Resumed => state.turns.load(Ordering::SeqCst).max(1),
            TurnKind::Fresh | TurnKind::Continuation => state.turns.fetch_add(1, Ordering::SeqCst) + 1,
        };
        let skip_initial_poll = kind == TurnKind::Continuation;
        let span = turn_span(&state.key, number);
        let steering = Arc::new(TurnSteering::new(
            state.clone(),
            state.key.clone(),
            execution_id,
            skip_initial_poll,
            span.clone(),
        ));
        // The lease taken for this turn (a shared log) goes with it: renewed while it runs, given up at its end.
        let lease = state.logged().and_then(|logged| {
            logged.running.store(true, Ordering::SeqCst);
            lock(&logged.held).take()
        });
        let log_journal = state.logged().map(|logged| {
            let replay = match kind {
                TurnKind::Resumed => lock(&logged.unfinished).take().map(|r| ReplayIndex::of(&r)).unwrap_or_default(),
                TurnKind::Fresh | TurnKind::Continuation => ReplayIndex::default(),
            };
            Arc::new(LogJournal::new(state.clone(), number, replay))
        });
        let journal = log_journal.as_ref().map(|journal| journal.clone() as Arc<dyn TurnJournal>);
        let records = log_journal.as_ref().map(|journal| {
            Arc::new(LogRecords { journal: journal.clone(), runtime: Arc::downgrade(&self.runtime) })
                as Arc<dyn RecordSink>
        });
        // In a session log, the turn's start (or its resumption by this process) and the messages a continuation
        // starts with are one append. A resumption is waited for before the turn does anything; a start goes with
        // the turn's first durable write, and nothing the turn does is durable (no tool runs) unless it landed.
        let mut opening = log_journal.as_ref().map(|_| {
            vec![match kind {
                TurnKind::Resumed => Entry::TurnResumed { turn: number, by: process_name() },
                TurnKind::Fresh | TurnKind::Continuation => {
                    Entry::TurnStarted { turn: number, execution_id, input: message.clone() }
                }
            }]
        });
        let meter = state.meter(&self.runtime.default_budget, kind == TurnKind::Resumed);
        let shared = self.runtime.shared.local();
        let ctx = Context::builder()
            .execution_id(execution_id)
            .thread_id(state.key.clone())
            .history(history)
            .events(sink(state).clone())
            .cancel_with(&cancel)
            .build();
        // What the agent step runs in: the turn's context, with the runtime's services, layers and tools in scope,
        // and the turn's own services.
        let step_ctx = StepContext::of(ctx.clone(), shared.clone()).in_turn(TurnServices {
            steering: Some(steering.clone()),
            journal,
            records,
            meter: Some(meter.clone()),
        });
        *conversation = Conversation::Running { ctx: ctx.clone(), steering: steering.clone() };
        state.touch(crate::agent::tick(&self.runtime));
        let durable_before = state.logged().map_or(0, |logged| logged.persisted());
        // Messages a continuation starts with enter the conversation now, whatever the agent does next, so they
        // are shown (and persisted) exactly once.
        if !pending.is_empty() {
            let count = pending.len();
            if let Some(entries) = &mut opening {
                entries.push(Entry::Injected { turn: number, ids: pending.iter().map(|m| m.id).collect() });
            }
            ctx.extend_items(pending.into_iter().map(|m| Item::user(m.text)));
            if let Some(logged) = state.logged() {
                logged.set_persisted(ctx.with_items(<[Item]>::len));
            }
            ctx.emit(|| EventKind::SteeringInjected { session: state.key.clone(), count });
            tracing::info!(parent: &span, noetic.steering.count = count, "steering.injected");
        }
        // A fresh turn's opening goes with its first durable write (see `LogJournal::open`); a resumed one's is
        // waited for first (it takes the turn over from another process).
        let opening = match (opening, &log_journal) {
            (Some(entries), Some(journal)) if kind != TurnKind::Resumed => {
                journal.open(entries, durable_before);
                None
            }
            (opening, _) => opening.and_then(|entries| state.submit(entries)),
        };
        let renewing = CancellationToken::new();
        if let Some(lease) = &lease {
            lease.keep(cancel.clone(), renewing.clone());
        }
        // Whatever happens in the task — an error, a panic, the task being aborted or never run — the session is
        // released. The task reaches the runtime (and the agent) through it: every other clone of the runtime or
        // the step would make each turn write one more reference count that all threads share.
        let mut release = Release {
            state: state.clone(),
            ctx: ctx.clone(),
            steering,
            runtime: self.handles.local().clone(),
            ended: None,
        };
        let handle = tokio::spawn(
            async move {
                let (state, runtime) = (&release.state, &release.runtime);
                let session = state.key.clone();
                let started = tokio::time::Instant::now();
                ctx.events().set_turn(Some(number));
                ctx.emit(|| EventKind::TurnStarted { session: session.clone(), turn: number });
                // A resumption the log does not hold does not run (a start: see `LogJournal::open`).
                let opened = match opening {
                    Some(receipt) => settled(receipt).await.map(|_| ()).map_err(|e| {
                        NoeticError::other(format!("turn {number} of session '{session}' could not be logged: {e}"))
                    }),
                    None => Ok(()),
                };
                let mut logged = opened.is_ok();
                let opened = match opened {
                    Ok(()) => crate::agent::persist::load_global(runtime).await,
                    failed => failed,
                };
                // Layers whose state could not be restored do not run: the turn fails, nothing else happens.
                let result = match opened.and_then(|()| state.load_layer_states(runtime)) {
                    Err(e) => Err(e),
                    Ok(()) => AssertUnwindSafe(crate::run(&runtime.agent, message, &step_ctx))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|p| {
                            Err(NoeticError::other(format!(
                                "turn {number} of session '{session}' panicked: {}",
                                crate::error::panic_message(&*p)
                            )))
                        }),
                };
                // A turn whose opening did not land is not in the log: it failed, whatever it answered.
                let result = match (&log_journal, logged) {
                    (Some(journal), true) => match journal.opened().await {
                        Ok(()) => result,
                        Err(e) => {
                            logged = false;
                            Err(NoeticError::other(format!(
                                "turn {number} of session '{session}' could not be logged: {e}"
                            )))
                        }
                    },
                    _ => result,
                };
                // Said once the session is idle (see `Release`): whoever hears it finds the turn over.
                release.ended = Some(match &result {
                    Ok(_) => {
                        EventKind::TurnCompleted { session: session.clone(), turn: number, duration: started.elapsed() }
                    }
                    Err(e) => {
                        crate::trace::fail_with(&tracing::Span::current(), e);
                        EventKind::TurnFailed { session: session.clone(), turn: number, error: e.clone() }
                    }
                });
                let budget = state.settle_budget(&ctx, &meter, number);
                // The lease goes with the turn's end (one write); it is given up on its own only if that failed.
                let mut lease = lease;
                if let Some(journal) = log_journal.filter(|_| logged) {
                    let outcome = match &result {
                        Ok(answer) => TurnOutcome::Completed { answer: answer.clone() },
                        Err(error) => TurnOutcome::Failed { error: error.clone() },
                    };
                    let mut ending = budget;
                    if let Some(l) = state.logged() {
                        ending.extend(crate::agent::persist::thread_changes(&runtime.layers, &session, &l.layers));
                    }
                    // Not renewed any more: a renewal landing after the end would take the lease again.
                    renewing.cancel();
                    let holder = lease.as_ref().map(|l| l.holder().clone());
                    match journal.end(&ctx, ending, outcome, holder).await {
                        Ok(()) => lease = None,
                        Err(e) => {
                            tracing::error!(session = %session, error = %e, "could not write the end of a turn to the log");
                        }
                    }
                    crate::agent::persist::save_global(runtime).await;
                    // The log holds no open turn once this one ended: nothing is left to resume, whatever a
                    // concurrent resume attempt read meanwhile.
                    if let Some(logged) = state.logged()
                        && lock(&logged.projection).open_turn.is_none()
                    {
                        *lock(&logged.unfinished) = None;
                    }
                }
                if let Some(logged) = state.logged() {
                    logged.running.store(false, Ordering::SeqCst);
                }
                renewing.cancel();
                if let Some(lease) = lease {
                    lease.release().await;
                }
                drop(release);
                result
            }
            .instrument(span),
        );
        Turn { number, execution_id, cancel, handle }
    }
}

/// How a turn starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TurnKind {
    /// With a message: the session's next number.
    Fresh,
    /// With queued messages, skipping the turn-start poll: the session's next number.
    Continuation,
    /// The turn a stopped process left: its own number.
    Resumed,
}

/// A turn's span (see [`crate::trace`]), disabled when no subscriber wants it.
pub(super) fn turn_span(session: &str, number: u64) -> tracing::Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = session,
        noetic.turn = number,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// How this process names itself in the log when it resumes a turn another left.
pub(super) fn process_name() -> String {
    format!("pid {}", std::process::id())
}
