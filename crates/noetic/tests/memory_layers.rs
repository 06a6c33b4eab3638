//! The memory-layer lifecycle: slot order, aggregation, timeouts, error policies, recall placement and budget,
//! on_spawn / on_return, on_complete + dispose at the end of every execution, scopes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use noetic::layer::lifecycle;
use noetic::layer::{Budget, HookErrorPolicy, HookTimeouts, MemoryLayer, ModelCallParams, ToolCallParams};
use noetic::prelude::*;
use noetic::testing::EventCollector;
use serde_json::json;

type Log = Arc<Mutex<Vec<String>>>;

#[derive(Clone)]
enum Gate {
    Decide(SteeringDecision),
    Hang(Arc<AtomicBool>),
    Fail(NoeticError),
}

struct Probe {
    id: &'static str,
    slot: u32,
    log: Log,
    gate: Gate,
    recall: Vec<Item>,
    budget: u32,
    policy: HookErrorPolicy,
}

fn probe(id: &'static str, slot: u32, log: &Log) -> Probe {
    Probe {
        id,
        slot,
        log: log.clone(),
        gate: Gate::Decide(SteeringDecision::allow()),
        recall: Vec::new(),
        budget: u32::MAX,
        policy: HookErrorPolicy::Abstain,
    }
}

impl Probe {
    fn note(&self, what: &str) {
        self.log.lock().unwrap().push(format!("{} {what}", self.id));
    }

    fn decide(&self) -> BoxFuture<'static, Result<SteeringDecision, NoeticError>> {
        let gate = self.gate.clone();
        Box::pin(async move {
            match gate {
                Gate::Decide(d) => Ok(d),
                Gate::Fail(e) => Err(e),
                Gate::Hang(finished) => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    finished.store(true, Ordering::SeqCst);
                    Ok(SteeringDecision::allow())
                }
            }
        })
    }
}

impl MemoryLayer for Probe {
    fn id(&self) -> &str {
        self.id
    }

    fn slot(&self) -> Slot {
        Slot(self.slot)
    }

    fn budget(&self) -> Budget {
        Budget { min: 0, max: self.budget }
    }

    fn on_hook_error(&self) -> HookErrorPolicy {
        self.policy
    }

    fn timeouts(&self) -> HookTimeouts {
        HookTimeouts { before_tool_call: Some(Duration::from_millis(100)), ..HookTimeouts::default() }
    }

    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

impl Recall for Probe {
    fn recall<'a>(&'a self, _ctx: &'a HookContext<'a>, _budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        self.note("recall");
        let items = self.recall.clone();
        Box::pin(async move { Ok(items) })
    }

    fn store<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        response: &'a ModelResponse,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note(&format!("store {}", response.text_output()));
        Box::pin(async { Ok(()) })
    }
}

impl Gates for Probe {
    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        self.note(&format!("before {}", call.name));
        Box::pin(async { self.decide().await.map(Into::into) })
    }

    fn after_model_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        self.note("after");
        Box::pin(async { Ok(SteeringDecision::allow()) })
    }
}

impl Lifecycle for Probe {
    fn init<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note(&format!("init d{}", ctx.depth()));
        Box::pin(async { Ok(()) })
    }

    fn on_spawn<'a>(
        &'a self,
        _parent: &'a HookContext<'a>,
        _child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        self.note("spawn");
        let id = self.id;
        Box::pin(async move { Ok(vec![Item::developer(format!("opened by {id}"))]) })
    }

    fn on_return<'a>(
        &'a self,
        _parent: &'a HookContext<'a>,
        _child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note("return");
        Box::pin(async { Ok(()) })
    }

    fn on_complete<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note(&format!("complete {outcome:?}"));
        Box::pin(async { Ok(()) })
    }

    fn dispose<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note("dispose");
        Box::pin(async { Ok(()) })
    }
}

fn layers(ps: Vec<Probe>) -> Vec<Arc<dyn MemoryLayer>> {
    ps.into_iter().map(|p| Arc::new(p) as Arc<dyn MemoryLayer>).collect()
}

fn entries(log: &Log, prefix: &str) -> Vec<String> {
    log.lock().unwrap().iter().filter(|l| l.contains(prefix)).cloned().collect()
}

async fn gate(ctx: &StepContext) -> lifecycle::Gate {
    lifecycle::before_tool_call(
        &ctx.hooks(),
        ctx.layers(),
        ToolCallParams { call_id: "c", name: "t", args: &json!({}) },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn gating_hooks_run_in_slot_order_and_a_deny_stops_the_rest() {
    let log: Log = Arc::default();
    let mut deny = probe("denier", 150, &log);
    deny.gate = Gate::Decide(SteeringDecision::deny("stop"));
    let mut guide = probe("guider", 50, &log);
    guide.gate = Gate::Decide(SteeringDecision::guide("careful"));
    let ctx = StepContext::builder()
        .layers(layers(vec![probe("late", 300, &log), deny, guide, probe("mid", 100, &log)]))
        .build();
    let g = gate(&ctx).await;
    assert_eq!(g.decision, SteeringDecision::deny("stop"));
    assert_eq!(g.layers, vec!["denier"]);
    assert_eq!(entries(&log, "before"), vec!["guider before t", "mid before t", "denier before t"], "'late' never ran");
}

#[tokio::test]
async fn guides_from_several_layers_are_joined_with_newlines() {
    let log: Log = Arc::default();
    let mut a = probe("a", 10, &log);
    a.gate = Gate::Decide(SteeringDecision::guide("one"));
    let mut b = probe("b", 20, &log);
    b.gate = Gate::Decide(SteeringDecision::guide("two"));
    let ctx = StepContext::builder().layers(layers(vec![b, a])).build();
    let g = gate(&ctx).await;
    assert_eq!(g.decision, SteeringDecision::guide("one\ntwo"));
    assert_eq!(g.layers, vec!["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_hook_is_cancelled_and_follows_the_layer_policy() {
    for (policy, expected) in
        [(HookErrorPolicy::Abstain, SteeringAction::Allow), (HookErrorPolicy::Deny, SteeringAction::Deny)]
    {
        let log: Log = Arc::default();
        let finished = Arc::new(AtomicBool::new(false));
        let mut slow = probe("slow", 10, &log);
        slow.gate = Gate::Hang(finished.clone());
        slow.policy = policy;
        let ctx = StepContext::builder().layers(layers(vec![slow])).build();
        let start = tokio::time::Instant::now();
        let g = gate(&ctx).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(g.decision.action, expected);
        tokio::time::sleep(Duration::from_secs(7200)).await;
        assert!(!finished.load(Ordering::SeqCst), "the timed-out hook was dropped, not left running");
    }
}

#[tokio::test]
async fn a_failing_hook_abstains_or_denies_by_policy_but_a_config_error_fails_closed() {
    let log: Log = Arc::default();
    let mut failing = probe("failing", 10, &log);
    failing.gate = Gate::Fail(NoeticError::other("db down"));
    let ctx = StepContext::builder().layers(layers(vec![failing])).build();
    assert_eq!(gate(&ctx).await.decision.action, SteeringAction::Allow);

    let mut strict = probe("strict", 10, &log);
    strict.gate = Gate::Fail(NoeticError::other("db down"));
    strict.policy = HookErrorPolicy::Deny;
    let ctx = StepContext::builder().layers(layers(vec![strict])).build();
    let g = gate(&ctx).await;
    assert_eq!(g.decision.action, SteeringAction::Deny);
    assert!(g.decision.guidance.unwrap().contains("db down"));

    let mut misconfigured = probe("misconfigured", 10, &log);
    misconfigured.gate = Gate::Fail(ConfigError::new(ConfigCode::MissingCallModel, "m", "h").into());
    let ctx = StepContext::builder().layers(layers(vec![misconfigured])).build();
    let err = lifecycle::before_tool_call(
        &HookContext::from(&ctx),
        ctx.layers(),
        ToolCallParams { call_id: "c", name: "t", args: &json!({}) },
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), "config");
}

#[tokio::test]
async fn recall_output_goes_before_the_history_in_slot_order_trimmed_to_each_budget() {
    let log: Log = Arc::default();
    let mut second = probe("second", 200, &log);
    second.recall = vec![Item::developer("from second")];
    let mut first = probe("first", 100, &log);
    first.recall = vec![Item::developer("from first"), Item::developer("x".repeat(100))];
    first.budget = 10;
    let model = ScriptedModel::new([ModelResponse::text("ok")]);
    let ctx = StepContext::builder()
        .model(Arc::new(model.clone()))
        .items(vec![Item::user("earlier")])
        .layers(layers(vec![second, first]))
        .build();
    Step::<String, String>::llm("l", "m").build().unwrap().execute("now".into(), &ctx).await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(
        request.context,
        vec![Item::developer("from first"), Item::developer("from second")],
        "slot order; the 100-char item did not fit first's 10-token budget"
    );
    let all: Vec<_> = request.messages().cloned().collect();
    assert_eq!(all[2], Item::user("earlier"), "history follows the recalled context");
    assert_eq!(entries(&log, "store"), vec!["first store ok", "second store ok"], "store saw the accepted answer");
}

#[tokio::test]
async fn on_complete_and_dispose_run_at_the_end_of_every_session_turn_whatever_the_outcome() {
    let log: Log = Arc::default();
    let model = ScriptedModel::new([ModelResponse::text("fine")]);
    model.push_error(NoeticError::ModelFailed {
        message: "down".into(),
        status: Some(500),
        raw: None,
        retryable: false,
        source: None,
    });
    let held = model.push_held(ModelResponse::text("never"));
    let rt = Runtime::builder().model(Arc::new(model)).layer(Arc::new(probe("p", 100, &log))).build().unwrap();
    let session = rt.session("s");
    session.send("a").await.unwrap().await.unwrap();
    session.send("b").await.unwrap().await.unwrap_err();
    let turn = session.send("c").await.unwrap();
    held.entered().await;
    session.cancel("stop");
    turn.await.unwrap_err();
    let lifecycle: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("init") || l.contains("complete") || l.contains("dispose"))
        .cloned()
        .collect();
    assert_eq!(
        lifecycle,
        vec![
            "p init d0",
            "p complete Success",
            "p dispose",
            "p init d0",
            "p complete Failure",
            "p dispose",
            "p init d0",
            "p complete Aborted",
            "p dispose",
        ]
    );
}

#[tokio::test]
async fn spawn_children_open_with_on_spawn_items_return_on_success_and_complete_either_way() {
    let log: Log = Arc::default();
    let ctx = StepContext::builder().layers(layers(vec![probe("p", 100, &log)])).build();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let ok = Step::run("ok", move |_: (), c: StepContext| {
        *s.lock().unwrap() = c.items();
        async { Ok(()) }
    })
    .build()
    .unwrap();
    Step::spawn("spawn-ok", ok).build().unwrap().execute((), &ctx).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![Item::developer("opened by p")]);
    let bad = Step::run("bad", |_: (), _| async { Err::<(), _>(NoeticError::other("x")) }).build().unwrap();
    Step::spawn("spawn-bad", bad).build().unwrap().execute((), &ctx).await.unwrap_err();
    assert_eq!(
        *log.lock().unwrap(),
        vec!["p spawn", "p return", "p complete Success", "p dispose", "p spawn", "p complete Failure", "p dispose"]
    );
}

#[tokio::test]
async fn fork_paths_get_on_spawn_and_on_return_and_complete_each() {
    let log: Log = Arc::default();
    let ctx = StepContext::builder().layers(layers(vec![probe("p", 100, &log)])).build();
    let ok = Step::run("ok", |x: u8, _| async move { Ok(x) }).build().unwrap();
    let bad = Step::run("bad", |_: u8, _| async { Err::<u8, _>(NoeticError::other("x")) }).build().unwrap();
    let fork = Step::fork("f", ForkMode::Settle)
        .paths([ok.clone(), bad, ok])
        .merge_settled(|r, _| Ok(r.len() as u8))
        .build()
        .unwrap();
    assert_eq!(fork.execute(1, &ctx).await.unwrap(), 3);
    let count = |what: &str| entries(&log, what).len();
    assert_eq!(
        (count("spawn"), count("return"), count("complete Success"), count("complete Failure"), count("dispose")),
        (3, 2, 2, 1, 3)
    );
}

#[tokio::test]
async fn thread_scoped_steering_keeps_its_ledger_across_turns_and_execution_scope_starts_fresh() {
    for (scope, expected_last_turn_entries) in [(Scope::Thread, 4), (Scope::Execution, 2)] {
        let layer = steering(SteeringConfig::new([]).with_scope(scope)).unwrap();
        let model = ScriptedModel::responder(|_| Ok(ModelResponse::text("ok")));
        let rt =
            Runtime::builder().model(Arc::new(model)).layer(layer.clone() as Arc<dyn MemoryLayer>).build().unwrap();
        let session = rt.session("thread-1");
        let mut events = EventCollector::of(&session);
        session.send("one").await.unwrap().await.unwrap();
        session.send("two").await.unwrap().await.unwrap();
        let last_turn = events
            .events()
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
            .map(|e| e.execution_id);
        let ctx = StepContext::builder().thread_id("thread-1").build();
        let ledger_len = match scope {
            Scope::Thread => layer.state_for(&ctx).unwrap().ledger.len(),
            _ => layer.ledger(last_turn.unwrap()).len(),
        };
        assert_eq!(ledger_len, expected_last_turn_entries, "{scope:?}: model turn + outcome per turn");
    }
}
