//! `branch` steps: routing, pass-through, errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::prelude::*;

fn add(n: i64) -> Step<i64, i64> {
    Step::run(format!("add{n}"), move |x: i64, _| async move { Ok(x + n) }).build().unwrap()
}

#[tokio::test]
async fn none_returns_the_input_unchanged() {
    let step = Step::branch("skip", |_: &i64, _| None).build().unwrap();
    assert_eq!(step.execute(41, &StepContext::new()).await.unwrap(), 41);
}

#[tokio::test]
async fn the_chosen_step_runs_with_the_same_input_and_context() {
    let marker = Step::run("mark", |x: i64, ctx: StepContext| async move {
        ctx.push_item(Item::assistant(format!("saw {x}")));
        Ok(x)
    })
    .build()
    .unwrap();
    let (plus_one, plus_ten) = (add(1), add(10));
    let step = Step::branch("pick", move |x: &i64, _| match *x {
        0 => Some(marker.clone()),
        x if x < 0 => Some(plus_one.clone()),
        _ => Some(plus_ten.clone()),
    })
    .build()
    .unwrap();
    let ctx = StepContext::new();
    assert_eq!(step.execute(-5, &ctx).await.unwrap(), -4);
    assert_eq!(step.execute(5, &ctx).await.unwrap(), 15);
    assert_eq!(step.execute(0, &ctx).await.unwrap(), 0);
    assert_eq!(ctx.items(), vec![Item::assistant("saw 0")], "the routed step wrote to the caller's item log");
}

#[tokio::test]
async fn route_changes_types_when_it_always_chooses() {
    let to_text = Step::run("fmt", |x: u32, _| async move { Ok(format!("#{x}")) }).build().unwrap();
    let step: Step<u32, String> = Step::route("always", move |_, _| to_text.clone()).build().unwrap();
    assert_eq!(step.execute(7, &StepContext::new()).await.unwrap(), "#7");
}

#[tokio::test]
async fn a_panicking_route_is_a_step_failure() {
    let step = Step::branch("bad", |_: &u8, _| panic!("no route")).build().unwrap();
    let err = step.execute(1, &StepContext::new()).await.unwrap_err();
    match err {
        NoeticError::StepFailed { step_id, cause, .. } => {
            assert_eq!(step_id, "bad");
            assert!(cause.to_string().contains("no route"));
        }
        other => panic!("expected StepFailed, got {other:?}"),
    }
}
