//! A turn with a journal commits what a resume needs before acting on it, and a turn a stopped process left
//! behind continues from the journal: journaled responses are not requested again, journaled outcomes not re-run,
//! and a call that was running is not run twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::context::Services;
use noetic::model::{ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use noetic::turn::{Action, INTERRUPTED_RESULT, Replay, TurnCommit, TurnCore, TurnJournal};
use serde_json::json;

/// What a durable store would hold for one session: the committed items and the saved core.
#[derive(Default)]
struct MemoryJournal {
    state: Mutex<Saved>,
    fail: Mutex<Option<String>>,
}

#[derive(Default, Clone)]
struct Saved {
    items: Vec<Item>,
    core: Option<String>,
    commits: usize,
}

impl MemoryJournal {
    fn saved_core(&self) -> Option<TurnCore> {
        self.state.lock().unwrap().core.as_deref().map(|json| serde_json::from_str(json).unwrap())
    }

    fn items(&self) -> Vec<Item> {
        self.state.lock().unwrap().items.clone()
    }
}

impl TurnJournal for MemoryJournal {
    fn persisted(&self) -> usize {
        self.state.lock().unwrap().items.len()
    }

    fn commit<'a>(&'a self, commit: TurnCommit<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            if let Some(message) = self.fail.lock().unwrap().clone() {
                return Err(NoeticError::other(message));
            }
            let mut state = self.state.lock().unwrap();
            assert_eq!(commit.first, state.items.len(), "commits continue where the last one ended");
            state.items.extend(commit.items);
            // Stored as JSON, as a database would: the core must survive serialisation.
            state.core = commit.core.map(|core| serde_json::to_string(core).unwrap());
            state.commits += 1;
            Ok(())
        })
    }

    fn enter(&self, step_id: &str) -> String {
        format!("{step_id}#0")
    }

    fn replay(&self, _path: &str) -> Option<Replay> {
        self.saved_core().map(Replay::Running)
    }
}

fn calls(ids: &[&str]) -> ModelResponse {
    ModelResponse::tool_calls(ids.iter().map(|id| (*id, if *id == "c1" { "slow" } else { "quick" }, json!({}))))
}

fn context(
    model: &ScriptedModel,
    tools: Vec<Arc<dyn Tool>>,
    journal: &Arc<MemoryJournal>,
    items: Vec<Item>,
) -> StepContext {
    let services = Services {
        model: Some(Arc::new(model.clone())),
        journal: Some(journal.clone() as Arc<dyn TurnJournal>),
        ..Services::default()
    };
    StepContext::builder().items(items).services(services).tools(tools).build()
}

fn agent() -> Step<String, String> {
    Step::llm("agent", "m").build().unwrap()
}

#[tokio::test]
async fn a_journaled_turn_commits_every_call_before_it_runs_and_ends_with_everything_committed() {
    let journal = Arc::new(MemoryJournal::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let probe = {
        let (journal, seen) = (journal.clone(), seen.clone());
        FnTool::builder("quick", "Records what the journal says while it runs.")
            .handler(move |_, tcx| {
                let core = journal.saved_core().unwrap();
                let running = match core.action() {
                    Action::RunTool(call) => call.id.clone(),
                    other => format!("{other:?}").into(),
                };
                seen.lock().unwrap().push(format!("{} runs; journal: running {running}", tcx.call_id));
                async { Ok(json!("ok")) }
            })
            .build()
            .unwrap()
    };
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c2", "quick", json!({})), ("c3", "quick", json!({}))]),
        ModelResponse::text("done"),
    ]);
    let ctx = context(&model, vec![Arc::new(probe)], &journal, Vec::new());
    assert_eq!(agent().execute("go".to_owned(), &ctx).await.unwrap(), "done");
    assert_eq!(*seen.lock().unwrap(), ["c2 runs; journal: running c2", "c3 runs; journal: running c3"]);
    assert_eq!(journal.items(), ctx.items(), "the whole conversation is committed");
    assert!(journal.saved_core().is_none(), "the finished step leaves nothing to resume");
}

#[tokio::test]
async fn a_turn_stopped_while_a_tool_ran_resumes_without_asking_the_model_again_or_running_the_call_twice() {
    let journal = Arc::new(MemoryJournal::default());
    let gate = Gate::new();
    let counter = Counter::new();
    let tools = || vec![gate.tool("slow").unwrap(), counter.tool("quick", json!("quick done")).unwrap()];

    // The first process: the model asks for c1 (slow) and c2; the process dies while c1 runs.
    let first_model = ScriptedModel::new([calls(&["c1", "c2"])]);
    let ctx = context(&first_model, tools(), &journal, Vec::new());
    let run = tokio::spawn(async move { agent().execute("go".to_owned(), &ctx).await });
    gate.started().await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert_eq!(first_model.calls(), 1);

    // The next process opens the session from what was committed and runs the turn again.
    let second_model = ScriptedModel::new([ModelResponse::text("finished")]);
    let ctx = context(&second_model, tools(), &journal, journal.items());
    assert_eq!(agent().execute(String::new(), &ctx).await.unwrap(), "finished");

    assert_eq!(second_model.calls(), 1, "the journaled response was not requested again");
    assert_eq!(gate.runs(), 1, "the call that was running is not run again (its tool is not idempotent)");
    assert_eq!(counter.count(), 1, "the rest of the batch runs");
    let results: Vec<ToolResult> = ctx
        .items()
        .into_iter()
        .filter_map(|item| match item {
            Item::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [ToolResult::error("c1", INTERRUPTED_RESULT), ToolResult::ok("c2", "quick done"),],
        "every call id has exactly one result"
    );
    assert_eq!(ctx.items().iter().filter(|i| **i == Item::user("go")).count(), 1, "the prompt is not repeated");
    assert_eq!(journal.items(), ctx.items());
}

#[tokio::test]
async fn a_journal_that_cannot_write_fails_the_turn_before_any_tool_runs() {
    let journal = Arc::new(MemoryJournal::default());
    *journal.fail.lock().unwrap() = Some("disk full".to_owned());
    let counter = Counter::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c2", "quick", json!({}))])]);
    let ctx = context(&model, vec![counter.tool("quick", json!("x")).unwrap()], &journal, Vec::new());
    let err = agent().execute("go".to_owned(), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    assert_eq!(model.calls(), 0, "nothing is asked of the model before the prompt is durable");
    assert_eq!(counter.count(), 0);
}
