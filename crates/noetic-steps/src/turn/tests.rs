//! The turn core's decisions as plain tests: no runtime, no async, no model — inputs in, actions out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;

/// One line per effect and one for the action, so a test reads like the turn it drives.
pub(super) fn describe(effects: Vec<Effect>, action: Action<'_>) -> Vec<String> {
    let mut lines: Vec<String> = effects
        .into_iter()
        .map(|effect| match effect {
            Effect::Append(items) => {
                format!("append {}", items.iter().map(ToString::to_string).collect::<Vec<_>>().join(" | "))
            }
            Effect::Push(item) => format!("append {item}"),
            Effect::Skipped { call_id, .. } => format!("skipped {call_id}"),
            Effect::Steered { action, guidance } => {
                format!("steered {action:?} {}", guidance.unwrap_or_default())
            }
        })
        .collect();
    lines.push(match action {
        Action::Poll { turn_start: true } => "poll at turn start".to_owned(),
        Action::Poll { turn_start: false } => "poll".to_owned(),
        Action::CallModel { round, tail } => {
            let tail: Vec<String> = tail.iter().map(ToString::to_string).collect();
            format!("call model round {round} tail [{}]", tail.join(" | "))
        }
        Action::Review(response) => format!("review {} item(s)", response.items.len()),
        Action::Store(response) => format!("store '{}'", response.text_output()),
        Action::RunTool(call) => format!("run {}", call.id),
        Action::ResumeTool(call) => format!("resume {}", call.id),
        Action::Classify(calls) => format!("classify {} call(s)", calls.len()),
        Action::RunGroup(group) => {
            let ids: Vec<&str> = group.to_run().map(|c| &*c.id).collect();
            let resumed = if group.resumed { "resume" } else { "run" };
            format!("{resumed} together {}", ids.join(" "))
        }
        Action::Finish { text, usage, .. } => format!("finish '{text}' ({} tokens)", usage.total_tokens()),
        Action::Fail(error) => format!("fail: {error}"),
    });
    lines
}

pub(super) fn step(core: &mut TurnCore, input: Input) -> Vec<String> {
    let effects = core.advance(input);
    describe(effects, core.action())
}

pub(super) fn calls(ids: &[&str]) -> ModelResponse {
    ModelResponse::tool_calls(ids.iter().map(|id| (*id, "search", json!({"q": id}))))
}

pub(super) fn none_pending() -> Input {
    Input::Polled(Polled { pending: false, capacity: 10, skip_rest: true })
}

pub(super) fn pending() -> Input {
    Input::Polled(Polled { pending: true, capacity: 10, skip_rest: true })
}

pub(super) fn result(id: &str, content: &str, is_error: bool) -> Input {
    Input::ToolDone(ToolResult::new(id.to_owned(), content.to_owned(), is_error))
}

pub(super) fn allow() -> Input {
    Input::Reviewed(SteeringDecision::allow())
}

/// A session turn that has passed its turn-start checkpoint and waits for the model's first response.
pub(super) fn started() -> TurnCore {
    let mut core = TurnCore::new("agent", 10, true);
    assert_eq!(step(&mut core, Input::Start), ["poll at turn start"]);
    assert_eq!(step(&mut core, none_pending()), ["call model round 0 tail []"]);
    core
}

/// A session turn whose model asked for `ids`, accepted, so the first call is about to run.
fn in_batch(ids: &[&str]) -> TurnCore {
    let mut core = started();
    assert_eq!(step(&mut core, Input::response(calls(ids))), ["review 1 item(s)".replace('1', &ids.len().to_string())]);
    let lines = step(&mut core, allow());
    assert_eq!(lines.last().unwrap(), &format!("run {}", ids[0]));
    core
}

#[test]
fn without_checkpoints_a_turn_asks_the_model_reviews_stores_and_finishes_with_the_answer() {
    let mut core = TurnCore::new("agent", 10, false);
    assert_eq!(step(&mut core, Input::Start), ["call model round 0 tail []"]);
    assert_eq!(step(&mut core, Input::response(ModelResponse::text("hi"))), ["review 1 item(s)"]);
    assert_eq!(step(&mut core, allow()), ["store 'hi'"]);
    assert_eq!(step(&mut core, Input::Stored), ["append Assistant: hi", "finish 'hi' (0 tokens)"]);
    assert!(core.is_done());
}

#[test]
fn a_session_turn_polls_at_its_start_before_the_first_request() {
    let mut core = TurnCore::new("agent", 10, true);
    assert_eq!(step(&mut core, Input::Start), ["poll at turn start"]);
    assert_eq!(step(&mut core, pending()), ["call model round 0 tail []"]);
}

#[test]
fn tool_calls_run_one_at_a_time_in_call_order_with_a_checkpoint_after_each_then_the_next_round() {
    let mut core = started();
    assert_eq!(step(&mut core, Input::response(calls(&["c1", "c2"]))), ["review 2 item(s)"]);
    assert_eq!(step(&mut core, allow()), [r#"append -> c1 search({"q":"c1"}) | -> c2 search({"q":"c2"})"#, "run c1"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["append <- c1 one", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["run c2"]);
    assert_eq!(step(&mut core, result("c2", "two", false)), ["append <- c2 two", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["call model round 1 tail []"]);
    assert_eq!(core.round(), 1);
}

#[test]
fn every_kind_of_tool_outcome_is_followed_by_a_checkpoint() {
    // Executed, failed, denied by steering, unknown tool, invalid arguments: each is a result, each is polled after.
    let outcomes = [
        ("ok", false),
        ("Error: the tool failed", true),
        ("Steering denied: no", true),
        ("Error: unknown tool 'x'; available tools: search", true),
        ("Error: invalid arguments for tool 'search': q is required", true),
    ];
    for (content, is_error) in outcomes {
        let mut core = in_batch(&["c1", "c2"]);
        let lines = step(&mut core, result("c1", content, is_error));
        assert_eq!(lines.last().unwrap(), "poll", "no checkpoint after '{content}'");
    }
}

#[test]
fn steering_found_after_a_tool_skips_the_rest_of_the_batch_with_one_skipped_result_per_call_in_call_order() {
    let mut core = in_batch(&["c1", "c2", "c3"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["append <- c1 one", "poll"]);
    assert_eq!(
        step(&mut core, pending()),
        [
            format!("append <- c2 ERROR {SKIPPED_RESULT}"),
            "skipped c2".to_owned(),
            format!("append <- c3 ERROR {SKIPPED_RESULT}"),
            "skipped c3".to_owned(),
            "call model round 1 tail []".to_owned(),
        ]
    );
}

#[test]
fn steering_found_after_the_last_call_skips_nothing_and_the_next_request_follows() {
    let mut core = in_batch(&["c1"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["append <- c1 one", "poll"]);
    assert_eq!(step(&mut core, pending()), ["call model round 1 tail []"]);
}

#[test]
fn with_the_finish_batch_policy_pending_steering_lets_the_batch_run_to_its_end() {
    let finish_batch = || Input::Polled(Polled { pending: true, capacity: 10, skip_rest: false });
    let mut core = in_batch(&["c1", "c2"]);
    assert_eq!(step(&mut core, result("c1", "one", false)), ["append <- c1 one", "poll"]);
    assert_eq!(step(&mut core, finish_batch()), ["run c2"]);
    assert_eq!(step(&mut core, result("c2", "two", false)), ["append <- c2 two", "poll"]);
    assert_eq!(step(&mut core, finish_batch()), ["call model round 1 tail []"]);
}

#[test]
fn an_answer_without_tool_calls_while_steering_is_pending_is_kept_and_the_model_is_asked_again() {
    let mut core = started();
    step(&mut core, Input::response(ModelResponse::text("done")));
    assert_eq!(step(&mut core, allow()), ["store 'done'"]);
    assert_eq!(step(&mut core, Input::Stored), ["append Assistant: done", "poll"]);
    assert_eq!(step(&mut core, pending()), ["call model round 1 tail []"]);
    step(&mut core, Input::response(ModelResponse::text("redone")));
    step(&mut core, allow());
    assert_eq!(step(&mut core, Input::Stored), ["append Assistant: redone", "poll"]);
    assert_eq!(step(&mut core, none_pending()), ["finish 'redone' (0 tokens)"]);
}

#[test]
fn the_round_limit_fails_the_turn_when_no_steering_is_pending() {
    let mut core = TurnCore::new("agent", 1, true);
    step(&mut core, Input::Start);
    step(&mut core, none_pending());
    step(&mut core, Input::response(calls(&["c1"])));
    step(&mut core, allow());
    step(&mut core, result("c1", "one", false));
    assert_eq!(
        step(&mut core, none_pending()),
        [
            "fail: llm step 'agent' reached its limit of 1 model rounds while the model still asked for tools; raise max_rounds or tell the model when to stop"
        ]
    );
}

#[test]
fn pending_steering_buys_rounds_beyond_the_limit_up_to_one_queue_capacity() {
    // max_rounds 1, capacity 2: steering pending at every checkpoint allows rounds 1 and 2, never round 3.
    let steer = || Input::Polled(Polled { pending: true, capacity: 2, skip_rest: true });
    let mut core = TurnCore::new("agent", 1, true);
    step(&mut core, Input::Start);
    assert_eq!(step(&mut core, steer()), ["call model round 0 tail []"]);
    for round in 1..=2 {
        step(&mut core, Input::response(calls(&["c"])));
        step(&mut core, allow());
        step(&mut core, result("c", "r", false));
        assert_eq!(step(&mut core, steer()), [format!("call model round {round} tail []")]);
    }
    step(&mut core, Input::response(calls(&["c"])));
    step(&mut core, allow());
    step(&mut core, result("c", "r", false));
    let lines = step(&mut core, steer());
    assert!(lines[0].starts_with("fail: llm step 'agent' reached its limit of 1 model rounds"), "{lines:?}");
}

#[test]
fn an_after_model_deny_fails_the_step_with_its_guidance_and_appends_nothing() {
    let mut core = started();
    step(&mut core, Input::response(calls(&["c1"])));
    assert_eq!(
        step(&mut core, Input::Reviewed(SteeringDecision::deny("not that"))),
        ["steered Deny not that", "fail: steering denied: not that"]
    );
}

#[test]
fn an_after_model_guide_discards_the_response_and_asks_again_with_the_guidance_as_a_developer_message() {
    let mut core = started();
    step(&mut core, Input::response(calls(&["c1"])));
    assert_eq!(
        step(&mut core, Input::Reviewed(SteeringDecision::guide("use the cache"))),
        ["steered Guide use the cache", "call model round 0 tail [Developer: use the cache]"]
    );
    // Accepted next time: the corrections are gone from later requests.
    step(&mut core, Input::response(calls(&["c2"])));
    assert_eq!(step(&mut core, allow()).last().unwrap(), "run c2");
    step(&mut core, result("c2", "ok", false));
    assert_eq!(step(&mut core, none_pending()), ["call model round 1 tail []"]);
}

#[test]
fn a_guide_without_guidance_asks_again_with_a_default_correction() {
    let mut core = started();
    step(&mut core, Input::response(ModelResponse::text("x")));
    let guide = SteeringDecision { action: SteeringAction::Guide, guidance: None };
    assert_eq!(
        step(&mut core, Input::Reviewed(guide)),
        ["steered Guide ", "call model round 0 tail [Developer: Please adjust your response.]"]
    );
}

#[test]
fn guide_is_obeyed_at_most_three_times_then_the_response_is_accepted() {
    let mut core = started();
    for n in 1..=MAX_GUIDE_RETRIES {
        step(&mut core, Input::response(ModelResponse::text(format!("try {n}"))));
        let lines = step(&mut core, Input::Reviewed(SteeringDecision::guide(format!("fix {n}"))));
        assert_eq!(lines[1].matches("Developer:").count(), n, "{lines:?}");
    }
    step(&mut core, Input::response(ModelResponse::text("try 4")));
    assert_eq!(step(&mut core, Input::Reviewed(SteeringDecision::guide("fix 4"))), ["store 'try 4'"]);
}

#[test]
fn a_refusal_fails_the_step_before_any_review() {
    let mut core = started();
    let refused = ModelResponse { refusal: Some("I can't".to_owned()), ..Default::default() };
    assert_eq!(step(&mut core, Input::response(refused)), ["fail: model refused at step 'agent': I can't"]);
}

#[test]
fn a_failure_in_the_middle_of_a_batch_gives_every_call_without_a_result_one_and_fails_the_turn() {
    let mut core = in_batch(&["c1", "c2", "c3"]);
    step(&mut core, result("c1", "one", false));
    step(&mut core, none_pending());
    let cancelled = NoeticError::Cancelled { reason: Some("stop".to_owned()) };
    assert_eq!(
        step(&mut core, Input::Failed(cancelled)),
        [
            "append <- c2 ERROR Tool call not completed: cancelled: stop | <- c3 ERROR Tool call not completed: cancelled: stop",
            "fail: cancelled: stop",
        ]
    );
    assert!(core.is_done());
}

#[test]
fn a_failure_while_the_model_answers_appends_nothing() {
    let mut core = started();
    let cancelled = NoeticError::Cancelled { reason: Some("stop".to_owned()) };
    assert_eq!(step(&mut core, Input::Failed(cancelled)), ["fail: cancelled: stop"]);
}

#[test]
fn usage_of_every_model_call_counts_also_of_responses_a_guide_discarded() {
    let mut core = TurnCore::new("agent", 10, false);
    step(&mut core, Input::Start);
    let used = |text: &str, n: u64| {
        Input::response(ModelResponse::text(text).with_usage(Usage {
            input_tokens: n,
            output_tokens: 1,
            cached_tokens: 0,
            cost: None,
        }))
    };
    step(&mut core, used("a", 10));
    step(&mut core, Input::Reviewed(SteeringDecision::guide("shorter")));
    step(&mut core, used("b", 20));
    step(&mut core, allow());
    assert_eq!(step(&mut core, Input::Stored).last().unwrap(), "finish 'b' (32 tokens)");
}

#[test]
fn steering_decisions_on_tool_calls_become_the_results_the_model_sees() {
    let deny = steered_result("c1", &SteeringDecision::deny("no rm"));
    assert_eq!(deny, ToolResult::error("c1", "Steering denied: no rm"));
    let guide = steered_result("c2", &SteeringDecision::guide("use ls"));
    assert_eq!(&*guide.content, "Steering guidance: use ls");
    assert!(guide.is_error);
    let bare = steered_result("c3", &SteeringDecision { action: SteeringAction::Deny, guidance: None });
    assert_eq!(&*bare.content, "Steering denied: steering rule violation");
}

#[test]
fn a_turn_saved_in_the_middle_of_a_batch_and_restored_continues_exactly_where_it_stopped() {
    let mut core = in_batch(&["c1", "c2", "c3"]);
    step(&mut core, result("c1", "one", false));
    let saved = serde_json::to_string(&core).unwrap();
    let mut restored: TurnCore = serde_json::from_str(&saved).unwrap();
    assert_eq!(restored, core);
    assert_eq!(step(&mut restored, none_pending()), ["run c2"]);
    assert_eq!(step(&mut core, none_pending()), ["run c2"]);
}

#[test]
fn a_turn_saved_while_reviewing_keeps_the_response_so_the_model_is_not_asked_again() {
    let mut core = started();
    step(&mut core, Input::response(calls(&["c1"])));
    let mut restored: TurnCore = serde_json::from_value(serde_json::to_value(&core).unwrap()).unwrap();
    assert_eq!(step(&mut restored, allow()), [r#"append -> c1 search({"q":"c1"})"#, "run c1"]);
}

#[test]
fn an_input_that_does_not_fit_the_turn_fails_it_with_a_message_instead_of_panicking() {
    let mut core = started();
    let lines = step(&mut core, Input::Stored);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("got a stored answer while waiting for the model"), "{lines:?}");
    assert!(core.is_done());
}

/// Saves the core as a journal would and restores it, as another process would.
fn reloaded(core: &TurnCore) -> TurnCore {
    serde_json::from_str(&serde_json::to_string(core).unwrap()).unwrap()
}

#[test]
fn a_resumed_turn_reviews_its_journaled_response_instead_of_asking_the_model_again() {
    let mut core = started();
    step(&mut core, Input::response(calls(&["c1"])));
    let mut resumed = reloaded(&core);
    assert_eq!(step(&mut resumed, Input::Resume), ["review 1 item(s)"]);
}

#[test]
fn a_resumed_turn_that_waited_for_the_model_asks_it_again_with_the_same_corrections() {
    let mut core = started();
    step(&mut core, Input::response(ModelResponse::text("x")));
    step(&mut core, Input::Reviewed(SteeringDecision::guide("shorter")));
    let mut resumed = reloaded(&core);
    assert_eq!(step(&mut resumed, Input::Resume), ["poll at turn start"], "what was queued meanwhile goes along");
    assert_eq!(step(&mut resumed, pending()), ["call model round 0 tail [Developer: shorter]"]);
}

#[test]
fn a_resumed_turn_offers_the_call_that_was_running_and_then_goes_on_with_the_batch() {
    let mut core = in_batch(&["c1", "c2"]);
    let mut resumed = reloaded(&core);
    assert_eq!(step(&mut resumed, Input::Resume), ["resume c1"]);
    assert_eq!(
        step(&mut resumed, Input::ToolDone(interrupted_result("c1"))),
        [format!("append <- c1 ERROR {INTERRUPTED_RESULT}"), "poll".to_owned()]
    );
    assert_eq!(step(&mut resumed, none_pending()), ["run c2"]);
    // The original, had it gone on, would have run c1 normally.
    assert_eq!(step(&mut core, result("c1", "one", false)), ["append <- c1 one", "poll"]);
}

#[test]
fn a_resumed_turn_repeats_the_checkpoint_it_was_at_and_a_finished_one_has_nothing_to_resume() {
    let mut core = in_batch(&["c1", "c2"]);
    step(&mut core, result("c1", "one", false));
    assert_eq!(step(&mut reloaded(&core), Input::Resume), ["poll"]);
    let mut fresh = TurnCore::new("agent", 10, true);
    assert_eq!(step(&mut reloaded(&fresh), Input::Resume), ["poll at turn start"]);
    step(&mut fresh, Input::Start);
    assert_eq!(step(&mut reloaded(&fresh), Input::Resume), ["poll at turn start"]);
    let mut done = TurnCore::new("agent", 10, false);
    step(&mut done, Input::Start);
    step(&mut done, Input::response(ModelResponse::text("bye")));
    step(&mut done, allow());
    step(&mut done, Input::Stored);
    let lines = step(&mut reloaded(&done), Input::Resume);
    assert!(lines[0].contains("already ended; there is nothing to resume"), "{lines:?}");
}

#[test]
fn a_turn_saved_while_its_one_call_runs_keeps_the_call_as_a_list_and_continues_after_restoring() {
    let mut core = started();
    step(&mut core, Input::response(calls(&["c1"])));
    assert_eq!(step(&mut core, allow()), [r#"append -> c1 search({"q":"c1"})"#, "run c1"]);
    let saved = serde_json::to_value(&core).unwrap();
    // The stored form is the one a list of calls always had: journals written before read back, and after.
    let phase = saved.as_object().and_then(|o| o.values().find(|v| v.get("calls").is_some())).unwrap();
    assert_eq!(phase["calls"].as_array().map(Vec::len), Some(1), "{saved}");
    assert_eq!(phase["calls"][0]["id"], json!("c1"));
    let mut restored: TurnCore = serde_json::from_value(saved).unwrap();
    assert_eq!(restored, core);
    assert_eq!(step(&mut restored, result("c1", "one", false)), step(&mut core, result("c1", "one", false)));
}
