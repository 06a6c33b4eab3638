//! `provide` steps: layers added for descendants, overridden by id, initialised and disposed, restored after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::layer::MemoryLayer;
use noetic::prelude::*;

type Log = Arc<Mutex<Vec<String>>>;

struct Recording {
    id: &'static str,
    slot: u32,
    tag: &'static str,
    log: Log,
    fail_init: bool,
}

impl MemoryLayer for Recording {
    fn id(&self) -> &str {
        self.id
    }

    fn slot(&self) -> Slot {
        Slot(self.slot)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

impl Lifecycle for Recording {
    fn init<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.log.lock().unwrap().push(format!("init {}", self.tag));
        let fail = self.fail_init;
        Box::pin(async move { if fail { Err(NoeticError::other("init failed")) } else { Ok(()) } })
    }

    fn on_complete<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.log.lock().unwrap().push(format!("complete {} {outcome:?}", self.tag));
        Box::pin(async { Ok(()) })
    }

    fn dispose<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.log.lock().unwrap().push(format!("dispose {}", self.tag));
        Box::pin(async { Ok(()) })
    }
}

fn rec(id: &'static str, slot: u32, tag: &'static str, log: &Log) -> Arc<dyn MemoryLayer> {
    Arc::new(Recording { id, slot, tag, log: log.clone(), fail_init: false })
}

/// A step that reports the layers in scope as `id:tag` strings, by asking each layer to log a probe.
fn scope_probe(log: &Log) -> Step<(), Vec<(String, u32)>> {
    let log = log.clone();
    Step::run("probe", move |_: (), ctx: StepContext| {
        log.lock().unwrap().push("child ran".into());
        async move { Ok(ctx.layers().iter().map(|l| (l.id().to_owned(), l.slot().0)).collect()) }
    })
    .build()
    .unwrap()
}

#[tokio::test]
async fn provided_layers_are_in_scope_for_the_child_and_an_inner_id_overrides_an_outer_one() {
    let log: Log = Arc::default();
    let ctx =
        StepContext::builder().layers([rec("memory", 100, "outer", &log), rec("steering", 90, "outer", &log)]).build();
    let step =
        Step::provide("p", scope_probe(&log), [rec("memory", 50, "inner", &log), rec("extra", 200, "inner", &log)])
            .build()
            .unwrap();
    let seen = step.execute((), &ctx).await.unwrap();
    assert_eq!(
        seen,
        vec![("memory".to_owned(), 50), ("steering".to_owned(), 90), ("extra".to_owned(), 200)],
        "inner 'memory' replaced the outer one; layers are in slot order"
    );
    let after: Vec<_> = ctx.layers().iter().map(|l| (l.id().to_owned(), l.slot().0)).collect();
    assert_eq!(after, vec![("steering".to_owned(), 90), ("memory".to_owned(), 100)], "outer layers restored");
}

#[tokio::test]
async fn provided_layers_are_initialised_before_and_completed_then_disposed_after_the_child() {
    let log: Log = Arc::default();
    let step =
        Step::provide("p", scope_probe(&log), [rec("a", 100, "a", &log), rec("b", 100, "b", &log)]).build().unwrap();
    step.execute((), &StepContext::new()).await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        vec!["init a", "init b", "child ran", "complete a Success", "complete b Success", "dispose b", "dispose a"]
    );
}

#[tokio::test]
async fn a_failing_child_completes_the_layers_with_failure() {
    let log: Log = Arc::default();
    let child = Step::run("fails", |_: (), _| async { Err::<(), _>(NoeticError::other("no")) }).build().unwrap();
    let step = Step::provide("p", child, [rec("a", 100, "a", &log)]).build().unwrap();
    step.execute((), &StepContext::new()).await.unwrap_err();
    assert_eq!(*log.lock().unwrap(), vec!["init a", "complete a Failure", "dispose a"]);
}

#[tokio::test]
async fn a_failing_init_stops_the_child_and_releases_the_layers_already_initialised() {
    let log: Log = Arc::default();
    let bad: Arc<dyn MemoryLayer> =
        Arc::new(Recording { id: "bad", slot: 100, tag: "bad", log: log.clone(), fail_init: true });
    let step = Step::provide("p", scope_probe(&log), [rec("a", 100, "a", &log), bad]).build().unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert!(err.to_string().contains("init failed"));
    assert_eq!(*log.lock().unwrap(), vec!["init a", "init bad", "complete a Failure", "dispose a"]);
}

#[test]
fn providing_no_layers_is_rejected() {
    let log: Log = Arc::default();
    let err = Step::provide("p", scope_probe(&log), Vec::new()).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::MissingContextLayers);
}
