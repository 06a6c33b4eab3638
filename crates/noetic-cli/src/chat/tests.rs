//! The chat's line handling while an approval question waits, on the scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::agent::{SKIPPED_RESULT, SteeringMode};
use noetic::model::{Item, ModelResponse, Role, ScriptedModel, ToolResult};
use serde_json::json;

use super::*;
use crate::agent::workspace::Workspace;
use crate::rules::RuleSet;

const TASK: &str = "Clean up the build folder.";
const CORRECTION: &str = "wait, don't run commands at all";

/// A chat whose model asks for `run_command` (which needs approval), then `list_dir`, in one batch, then answers.
struct Harness {
    chat: Chat,
    model: ScriptedModel,
    approvals: mpsc::UnboundedReceiver<Pending>,
    _workspace: tempfile::TempDir,
}

fn harness() -> Harness {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("hello.txt"), "hi").unwrap();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("c1", "run_command", json!({"command": "echo approved"})),
            ("c2", "list_dir", json!({"path": "."})),
        ]),
        ModelResponse::text("All right."),
    ]);
    let (tx, approvals) = mpsc::unbounded_channel();
    let agent = agent::build(AgentSpec {
        model: Arc::new(model.clone()),
        model_id: "scripted".to_owned(),
        instructions: None,
        tools: Some(vec!["run_command".to_owned(), "list_dir".to_owned()]),
        rules: RuleSet::default(),
        workspace: Workspace::open(workspace.path()).unwrap(),
        max_rounds: None,
        max_iterations: None,
        steering_mode: SteeringMode::OneAtATime,
        approver: Some(approve::via_channel(tx)),
        store: None,
        lease_term: noetic::agent::DEFAULT_LEASE_TERM,
        tool_sources: Vec::new(),
        first_round_tool_call: false,
        max_idle_sessions: None,
        budget: noetic::budget::Budget::default(),
        ledger_key: None,
        chain_ledger: false,
    })
    .unwrap();
    let chat = Chat::new(agent.runtime.session("chat"), agent.steering.clone(), Style::detect(true), None, true);
    Harness { chat, model, approvals, _workspace: workspace }
}

impl Harness {
    /// Starts the turn and waits until the `run_command` call asks; the question is then on the screen.
    async fn start_and_wait_for_the_question(&mut self) -> TurnFuture {
        let Action::Start(turn) = self.chat.on_line(TASK, false).await else { panic!("the task did not start a turn") };
        let pending = self.approvals.recv().await.unwrap();
        assert_eq!((pending.request.tool.as_str(), pending.request.call_id.as_str()), ("run_command", "c1"));
        self.chat.ask(pending);
        turn
    }

    /// The tool results and user messages of the model's second request, in order.
    fn second_request(&self) -> Vec<Item> {
        let requests = self.model.requests();
        assert_eq!(requests.len(), 2, "one request per round");
        let tail = requests[1].history.iter().skip_while(|item| item.text() != Some(TASK)).skip(1);
        tail.filter(|item| !matches!(item, Item::ToolCall(_) | Item::Message { role: Role::Assistant, .. }))
            .cloned()
            .collect()
    }
}

fn result(call_id: &str, content: &str, is_error: bool) -> Item {
    Item::ToolResult(ToolResult::new(call_id.to_owned(), content.to_owned(), is_error))
}

#[tokio::test]
async fn a_line_typed_at_an_approval_question_rejects_the_call_and_is_steered_into_the_turn() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line(CORRECTION, true).await, Action::Nothing));
    assert!(h.chat.approvals.is_empty(), "the question is answered");
    assert_eq!(h.chat.session.queued(), 1, "the line waits for the turn's next checkpoint");
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(
        h.second_request(),
        vec![
            result(
                "c1",
                &format!("Error: the call of 'run_command' was rejected: {}", approve::ANSWERED_WITH_A_MESSAGE),
                true
            ),
            result("c2", SKIPPED_RESULT, true),
            Item::user(CORRECTION),
        ]
    );
}

#[tokio::test]
async fn y_at_an_approval_question_runs_the_call() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line(" Y ", true).await, Action::Nothing));
    assert_eq!(h.chat.session.queued(), 0);
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(
        h.second_request(),
        vec![result("c1", "exit status: 0\n--- stdout ---\napproved\n", false), result("c2", "hello.txt", false)]
    );
}

#[tokio::test]
async fn no_at_an_approval_question_rejects_the_call_without_steering_and_the_batch_goes_on() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line("no", true).await, Action::Nothing));
    assert_eq!(h.chat.session.queued(), 0, "an answer is not a message");
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(
        h.second_request(),
        vec![
            result("c1", &format!("Error: the call of 'run_command' was rejected: {}", approve::DECLINED), true),
            result("c2", "hello.txt", false),
        ]
    );
}

#[tokio::test]
async fn a_command_at_an_approval_question_runs_and_the_question_stays_open() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line("/status", true).await, Action::Nothing));
    h.chat.about = "model scripted (test); 0 rule(s)".into();
    let status = h.chat.status_text(true);
    for part in ["0 steering message(s) queued", "steering mode one-at-a-time", "session chat", "model scripted (test)"]
    {
        assert!(status.contains(part), "{part} in {status}");
    }
    let idle = h.chat.status_text(false);
    assert!(
        idle.starts_with("idle") && idle.contains("model scripted (test)") && idle.contains("steering mode"),
        "{idle}"
    );
    assert_eq!((h.chat.approvals.len(), h.chat.session.queued()), (1, 0), "/status neither answers nor steers");
    assert!(matches!(h.chat.on_line("yes", true).await, Action::Nothing));
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(h.model.requests().len(), 2);
}

#[tokio::test]
async fn stop_at_an_approval_question_declines_the_call_and_cancels_the_turn() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line("/stop", true).await, Action::Nothing));
    assert!(h.chat.approvals.is_empty());
    assert_eq!(h.chat.session.queued(), 0, "/stop is not steered as a message");
    assert!(matches!(turn.await, Err(NoeticError::Cancelled { .. })));
    assert_eq!(h.model.requests().len(), 1, "the model is not asked again");
}

#[tokio::test]
async fn a_question_whose_call_has_ended_no_longer_takes_the_next_line() {
    let mut h = harness();
    let (reply, asker) = tokio::sync::oneshot::channel();
    drop(asker);
    let request = noetic::tool::ApprovalRequest::new("run_command", "old", json!({}), None);
    h.chat.ask(Pending { request, reply });
    let Action::Start(turn) = h.chat.on_line(TASK, false).await else { panic!("the line was taken as an answer") };
    assert!(h.chat.approvals.is_empty());
    drop(turn);
}

#[tokio::test]
async fn a_bare_y_typed_while_a_turn_runs_and_no_question_waits_is_not_steered_and_the_question_then_takes_y() {
    let mut h = harness();
    let Action::Start(turn) = h.chat.on_line(TASK, false).await else { panic!("the task did not start a turn") };
    // Typed a moment before the question is shown: not a message for the agent.
    for early in ["y", " N ", "always"] {
        assert!(matches!(h.chat.on_line(early, true).await, Action::Nothing));
    }
    assert_eq!(h.chat.session.queued(), 0, "no bare answer is steered");
    let pending = h.approvals.recv().await.unwrap();
    h.chat.ask(pending);
    assert!(matches!(h.chat.on_line("y", true).await, Action::Nothing));
    assert!(h.chat.approvals.is_empty(), "the question took the y");
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(
        h.second_request(),
        vec![result("c1", "exit status: 0\n--- stdout ---\napproved\n", false), result("c2", "hello.txt", false)]
    );
}

#[tokio::test]
async fn steer_sends_a_bare_y_to_the_running_turn_as_a_message() {
    let mut h = harness();
    let turn = h.start_and_wait_for_the_question().await;
    assert!(matches!(h.chat.on_line("/steer y", true).await, Action::Nothing));
    assert_eq!((h.chat.approvals.len(), h.chat.session.queued()), (1, 1), "sent, and the question stays open");
    assert!(matches!(h.chat.on_line("no", true).await, Action::Nothing));
    assert_eq!(turn.await.unwrap(), "All right.");
    assert_eq!(
        h.second_request(),
        vec![
            result("c1", &format!("Error: the call of 'run_command' was rejected: {}", approve::DECLINED), true),
            result("c2", SKIPPED_RESULT, true),
            Item::user("y"),
        ]
    );
}

#[test]
fn only_the_answers_of_a_question_count_as_bare_answers() {
    for line in ["y", "Y", "yes", " no ", "n", "a", "ALWAYS"] {
        assert!(approve::is_answer(line), "{line:?}");
    }
    for line in ["", "  ", "yes please", "why", "/steer y", "nope"] {
        assert!(!approve::is_answer(line), "{line:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_s_time_leaves_out_the_time_its_approval_question_waited() {
    let mut h = harness();
    h.chat.turn_started = Some(tokio::time::Instant::now());
    h.chat.tools.insert("call_0123456789".into(), ("run_command".into(), tokio::time::Instant::now()));
    let (reply, _answer) = tokio::sync::oneshot::channel();
    let request =
        noetic::tool::ApprovalRequest::new("run_command", "call_0123456789", json!({"command": "cargo test"}), None);
    h.chat.ask(Pending { request, reply });
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    assert_eq!(
        h.chat.status_row(0).as_deref(),
        Some("⠋ run_command [call_0] 0.0 s · waiting for your answer"),
        "the question's wait is not the tool's time"
    );
    h.chat.answer_question("y").await;
    tokio::time::advance(std::time::Duration::from_secs(15)).await;
    assert_eq!(h.chat.status_row(1).as_deref(), Some("⠙ run_command [call_0] 15.0 s · Esc stops"));
    assert_eq!(h.chat.tool_ended("call_0123456789"), Some(std::time::Duration::from_secs(15)));
}
