//! A tour of the step algebra on made-up research work: retries, a fork of research paths, a spawn with a
//! timeout, a branch, a loop fed by an inbox channel, and a heartbeat `every` step — with each framework event
//! printed as it happens.
//!
//! Run it with `cargo run --example step_algebra`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use noetic::prelude::*;

fn research_path(source: &'static str, delay_ms: u64) -> Result<Step<String, String>, ConfigError> {
    Step::run(source, move |topic: String, _ctx| async move {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok(format!("{source} on {topic}"))
    })
    .build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A flaky fetch that succeeds on its third attempt.
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let fetch = Step::run("fetch", move |topic: String, _ctx| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        async move {
            if n % 3 < 2 { Err(NoeticError::other("connection reset")) } else { Ok(format!("draft about {topic}")) }
        }
    })
    .retry(RetryPolicy::new(3, Backoff::Exponential, Duration::from_millis(5)))
    .build()?;

    // Three research paths, two at a time, merged in path order whatever order they finish in.
    let research = Step::fork("research", ForkMode::All)
        .paths([research_path("web", 30)?, research_path("papers", 10)?, research_path("code", 5)?])
        .concurrency(2)
        .merge(|parts, _ctx| Ok(parts.join("; ")))
        .build()?;
    // Research in an isolated context that may take at most one second.
    let bounded = Step::spawn("bounded-research", research).timeout(Duration::from_secs(1)).build()?;
    // Only research drafts; anything else passes through unchanged.
    let maybe =
        Step::branch("maybe-research", move |text: &String, _ctx| text.starts_with("draft").then(|| bounded.clone()))
            .build()?;

    // Repeat until the output mentions papers; a message on the inbox keeps the loop going one more round.
    let inbox = Channel::<String>::queue("inbox", 10)?;
    inbox.try_send("also cover benchmarks".to_owned()).map_err(|e| e.to_string())?;
    let agent = Step::loop_("agent", [fetch, maybe])
        .until(until::any([until::output_contains("papers"), until::max_steps(5)]))
        .inbox(inbox)
        .prepare_next(|_out, _verdict, ctx: &Context| {
            ctx.with_items(|items| items.last().and_then(Item::text).unwrap_or("rust").to_owned())
        })
        .build()?;

    let sink = EventSink::new(256);
    let mut events = sink.subscribe().ok_or("event sink disabled")?;
    let ctx = StepContext::builder().events(sink).build();
    let printer = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            match &event.kind {
                EventKind::StepStarted { step_id, kind } => println!("  start  {kind:<7} {step_id}"),
                EventKind::StepCompleted { step_id, kind } => println!("  done   {kind:<7} {step_id}"),
                EventKind::StepFailed { step_id, kind, error } => println!("  failed {kind:<7} {step_id}: {error}"),
                EventKind::RetryScheduled { step_id, attempt, delay, error } => {
                    println!("  retry  {step_id} after attempt {attempt} ({error}); waiting {delay:?}")
                }
                EventKind::LoopInboxMessage { step_id } => {
                    println!("  inbox  {step_id}: a message kept the loop going")
                }
                other => println!("  event  {other:?}"),
            }
        }
    });

    let answer = agent.execute("rust async".to_owned(), &ctx).await;
    drop(ctx); // the last sender of the event sink: the printer sees the end of the stream
    printer.await?;
    println!("\nanswer: {}", answer?);

    // A heartbeat every 20 ms, stopped after five beats by cancelling its context.
    let beats = Arc::new(AtomicU32::new(0));
    let b = beats.clone();
    let heartbeat = Step::run("beat", move |(): (), ctx: StepContext| {
        let n = b.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if n == 5 {
                ctx.cancel("five beats are enough");
            }
            Ok(())
        }
    })
    .build()?;
    let every = Step::every("heartbeat", heartbeat, 20.0).jitter(5.0).build::<()>()?;
    let hb_ctx = StepContext::new();
    let ended = every.execute((), &hb_ctx).await;
    println!(
        "heartbeat: {} beats, then {}",
        beats.load(Ordering::SeqCst),
        ended.err().map(|e| e.to_string()).unwrap_or_default()
    );
    Ok(())
}
