//! `spawn` steps: isolation, usage roll-up, timeout, layers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use tokio::time::Instant;

struct Named(&'static str);

impl MemoryLayer for Named {
    fn id(&self) -> &str {
        self.0
    }
}

fn layer(id: &'static str) -> Arc<dyn MemoryLayer> {
    Arc::new(Named(id))
}

fn usage(tokens: u64) -> Usage {
    Usage { input_tokens: tokens, output_tokens: tokens, cached_tokens: 0, cost: None }
}

#[tokio::test]
async fn the_child_runs_in_an_isolated_context() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    let child = Step::run("child", move |x: u32, ctx: StepContext| {
        *s.lock().unwrap() = Some((ctx.item_count(), ctx.execution_id(), ctx.parent_execution_id()));
        ctx.push_item(Item::assistant("child only"));
        async move { Ok(x + 1) }
    })
    .build()
    .unwrap();
    let spawn = Step::spawn("spawn", child).build().unwrap();
    let parent = StepContext::new();
    parent.push_item(Item::user("parent history"));
    assert_eq!(spawn.execute(1, &parent).await.unwrap(), 2);
    let (child_items, child_id, child_parent) = seen.lock().unwrap().unwrap();
    assert_eq!(child_items, 0, "the child starts with an empty item log");
    assert_ne!(child_id, parent.execution_id(), "the child has a fresh execution id");
    assert_eq!(child_parent, Some(parent.execution_id()));
    assert_eq!(parent.items(), vec![Item::user("parent history")], "the child's items stay in the child");
}

#[tokio::test]
async fn usage_rolls_up_into_the_parent_on_success_only() {
    let spend = |ok: bool| {
        Step::run("spend", move |_: (), ctx: StepContext| async move {
            ctx.add_usage(&usage(10), 0.5);
            if ok { Ok(()) } else { Err(NoeticError::other("failed after spending")) }
        })
        .build()
        .unwrap()
    };
    let parent = StepContext::new();
    Step::spawn("ok", spend(true)).build().unwrap().execute((), &parent).await.unwrap();
    assert_eq!(parent.usage(), usage(10));
    assert_eq!(parent.cost(), 0.5);
    Step::spawn("bad", spend(false)).build().unwrap().execute((), &parent).await.unwrap_err();
    assert_eq!(parent.usage(), usage(10), "a failed child's usage is not rolled up");
    assert_eq!(parent.cost(), 0.5);
}

#[tokio::test(start_paused = true)]
async fn a_child_outliving_its_timeout_is_cancelled_and_the_spawn_fails_with_timeout() {
    let dropped_while_cancelled = Arc::new(AtomicBool::new(false));
    let flag = dropped_while_cancelled.clone();
    struct Guard(Context, Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.1.store(self.0.is_cancelled(), Ordering::SeqCst);
        }
    }
    let child = Step::run("slow", move |_: (), ctx: StepContext| {
        let flag = flag.clone();
        async move {
            let _guard = Guard(ctx.context().clone(), flag);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }
    })
    .build()
    .unwrap();
    let spawn = Step::spawn("bounded", child).timeout(Duration::from_secs(5)).build().unwrap();
    let start = Instant::now();
    let err = spawn.execute((), &StepContext::new()).await.unwrap_err();
    assert!(
        matches!(err, NoeticError::Timeout { ref step_id, after } if step_id == "bounded" && after == Duration::from_secs(5)),
        "{err:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert!(dropped_while_cancelled.load(Ordering::SeqCst), "the child stopped, having seen the cancellation");
}

#[tokio::test(start_paused = true)]
async fn the_child_token_is_cancelled_on_timeout_so_detached_work_stops_too() {
    let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let child = Step::run("detaches", move |_: (), ctx: StepContext| {
        let tx = tx.lock().unwrap().take();
        async move {
            let token = ctx.cancellation_token().clone();
            tokio::spawn(async move {
                token.cancelled().await;
                if let Some(tx) = tx {
                    let _ = tx.send(true);
                }
            });
            std::future::pending::<()>().await;
            Ok(())
        }
    })
    .build()
    .unwrap();
    let spawn = Step::spawn("bounded", child).timeout(Duration::from_millis(10)).build().unwrap();
    assert!(matches!(spawn.execute((), &StepContext::new()).await, Err(NoeticError::Timeout { .. })));
    assert!(rx.await.unwrap(), "the detached task saw the child's cancellation");
}

#[tokio::test]
async fn a_fast_child_is_not_affected_by_its_timeout() {
    let child = Step::run("fast", |x: u8, _| async move { Ok(x) }).build().unwrap();
    let spawn = Step::spawn("bounded", child).timeout(Duration::from_secs(1)).build().unwrap();
    assert_eq!(spawn.execute(3, &StepContext::new()).await.unwrap(), 3);
}

fn layer_ids() -> Step<(), Vec<String>> {
    Step::run(
        "ids",
        |_: (), ctx: StepContext| async move { Ok(ctx.layers().iter().map(|l| l.id().to_owned()).collect()) },
    )
    .build()
    .unwrap()
}

#[tokio::test]
async fn spawn_memory_replaces_the_parent_layers_and_without_it_the_parent_layers_are_inherited() {
    let parent = StepContext::builder().layers([layer("outer")]).build();
    let inherit = Step::spawn("inherit", layer_ids()).build().unwrap();
    assert_eq!(inherit.execute((), &parent).await.unwrap(), vec!["outer"]);
    let local = Step::spawn("local", layer_ids()).memory([layer("local")]).build().unwrap();
    assert_eq!(local.execute((), &parent).await.unwrap(), vec!["local"]);
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let child = Step::run("waits", |_: (), ctx: StepContext| async move {
        ctx.cancelled().await;
        Err::<(), _>(ctx.cancelled_error())
    })
    .build()
    .unwrap();
    let spawn = Step::spawn("s", child).build().unwrap();
    let parent = StepContext::new();
    let p = parent.clone();
    let run = tokio::spawn(async move { spawn.execute((), &p).await });
    tokio::task::yield_now().await;
    parent.cancel("stop");
    let err = run.await.unwrap().unwrap_err();
    assert!(matches!(err, NoeticError::Cancelled { reason: Some(ref r) } if r == "stop"), "{err:?}");
}

#[test]
fn a_zero_timeout_is_rejected() {
    let child = Step::run("c", |x: u8, _| async move { Ok(x) }).build().unwrap();
    let err = Step::spawn("s", child).timeout(Duration::ZERO).build().unwrap_err();
    assert_eq!(err.code, ConfigCode::InvalidTimeout);
}
