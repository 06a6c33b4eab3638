//! Property tests of gating-decision aggregation (SPEC 2.2, 3 and seed 1): within the steering layer across its
//! rules, and in the layer lifecycle across several layers. The aggregate is always the most restrictive decision
//! (deny > guide > allow); the first deny short-circuits everything after it; guide texts are joined with a newline
//! in order; the steering ledger records what was decided and by which rule(s).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::layer::lifecycle::{self, Gate};
use noetic::layer::{Gates, Hook, MemoryLayer, Slot, ToolCallAction, ToolCallParams};
use noetic::steering::{
    Evaluator, LedgerKind, SteeringAction, SteeringConfig, SteeringDecision, SteeringRule, SteeringState, steering,
};
use noetic::{HookContext, NoeticError, StepContext};
use proptest::prelude::*;
use serde_json::json;

/// A random decision: allow, guide or deny, with random (possibly absent or empty) guidance for the latter two.
fn decision() -> impl Strategy<Value = SteeringDecision> {
    let guidance = prop::option::of("[a-z ]{0,6}");
    prop_oneof![
        3 => Just(SteeringDecision::allow()),
        3 => guidance.clone().prop_map(|guidance| SteeringDecision { action: SteeringAction::Guide, guidance }),
        1 => guidance.prop_map(|guidance| SteeringDecision { action: SteeringAction::Deny, guidance }),
    ]
}

/// What an aggregation of `decided` (in evaluation order) must produce.
struct Expected {
    decision: SteeringDecision,
    /// The ids that decided: the first deny, else every guide in order, else none.
    deciders: Vec<String>,
    /// How many of the deciders, from the front, are evaluated (everything up to and including the first deny).
    evaluated: usize,
}

/// The reference model of the aggregation, written independently of the library.
fn expected(decided: &[(String, SteeringDecision)]) -> Expected {
    if let Some(k) = decided.iter().position(|(_, d)| d.action == SteeringAction::Deny) {
        return Expected { decision: decided[k].1.clone(), deciders: vec![decided[k].0.clone()], evaluated: k + 1 };
    }
    let guides: Vec<&(String, SteeringDecision)> =
        decided.iter().filter(|(_, d)| d.action == SteeringAction::Guide).collect();
    if guides.is_empty() {
        return Expected { decision: SteeringDecision::allow(), deciders: Vec::new(), evaluated: decided.len() };
    }
    let mut texts = Vec::new();
    for (_, d) in &guides {
        if let Some(g) = d.guidance.as_deref()
            && !g.is_empty()
        {
            texts.push(g);
        }
    }
    let guidance = if texts.is_empty() { None } else { Some(texts.join("\n")) };
    Expected {
        decision: SteeringDecision { action: SteeringAction::Guide, guidance },
        deciders: guides.iter().map(|(id, _)| id.clone()).collect(),
        evaluated: decided.len(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// A layer that returns a fixed decision before every tool call, counting its calls and logging the order.
struct FixedLayer {
    id: String,
    slot: Slot,
    decision: SteeringDecision,
    calls: Arc<AtomicUsize>,
    /// `(layer id, tool name seen)` per call, shared by all layers of a case.
    log: Arc<Mutex<Vec<(String, String)>>>,
}

impl MemoryLayer for FixedLayer {
    fn id(&self) -> &str {
        &self.id
    }

    fn slot(&self) -> Slot {
        self.slot
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for FixedLayer {
    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.log.lock().unwrap().push((self.id.clone(), call.name.to_owned()));
            Ok(self.decision.clone().into())
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The steering layer aggregates its rules to the most restrictive decision, short-circuits at the first deny,
    /// never consults rules of the other hook, and records the decision and its deciding rule(s) in the ledger.
    #[test]
    fn steering_rules_aggregate_to_most_restrictive(
        decisions in prop::collection::vec(decision(), 0..8),
        decoy_at in prop::option::of(0usize..8),
    ) {
        let ids: Vec<String> = (0..decisions.len()).map(|i| format!("r{i}")).collect();
        let counters: Vec<Arc<AtomicUsize>> = decisions.iter().map(|_| Arc::new(AtomicUsize::new(0))).collect();
        let mut rules: Vec<SteeringRule> = decisions
            .iter()
            .zip(&ids)
            .zip(&counters)
            .map(|((d, id), count)| {
                let (d, count) = (d.clone(), count.clone());
                SteeringRule::predicate(id.clone(), [Hook::BeforeToolCall], move |p| {
                    count.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(p.hook(), Hook::BeforeToolCall);
                    assert_eq!(p.tool_call().map(|c| c.name), Some("t"));
                    d.clone()
                })
            })
            .collect();
        // A rule for the other hook that would deny: it must be neither called nor change anything.
        let decoy_calls = Arc::new(AtomicUsize::new(0));
        if let Some(at) = decoy_at {
            let count = decoy_calls.clone();
            let decoy = SteeringRule::predicate("decoy", [Hook::AfterModelCall], move |_| {
                count.fetch_add(1, Ordering::SeqCst);
                SteeringDecision::deny("decoy")
            });
            rules.insert(at.min(rules.len()), decoy);
        }
        let layer = steering(SteeringConfig::new(rules)).unwrap();
        let ctx = StepContext::new();
        let args = json!({});

        let (got, state) = runtime().block_on(async {
            let got = layer.before_tool_call(&HookContext::from(&ctx), ToolCallParams { call_id: "c", name: "t", args: &args }).await;
            (got, layer.state_for(&ctx))
        });
        let got = got.unwrap().decision().unwrap();

        let decided: Vec<(String, SteeringDecision)> = ids.iter().cloned().zip(decisions.iter().cloned()).collect();
        let want = expected(&decided);
        prop_assert_eq!(&got, &want.decision);
        for (i, count) in counters.iter().enumerate() {
            let calls = count.load(Ordering::SeqCst);
            prop_assert_eq!(calls, usize::from(i < want.evaluated), "rule r{} called {} times", i, calls);
        }
        prop_assert_eq!(decoy_calls.load(Ordering::SeqCst), 0);

        let SteeringState { ledger, pending_feedback } = state.unwrap();
        prop_assert!(pending_feedback.is_empty());
        prop_assert_eq!(ledger.len(), 1);
        let entry = ledger.last().unwrap();
        prop_assert_eq!(entry.kind, LedgerKind::ToolCall);
        prop_assert_eq!(entry.action, want.decision.action);
        prop_assert_eq!(&entry.guidance, &want.decision.guidance);
        prop_assert_eq!(entry.tool_name.as_deref(), Some("t"));
        prop_assert_eq!(&entry.tool_args, &Some(json!({})));
        prop_assert!(entry.failures.is_empty());
        prop_assert!(entry.outcome.is_none());
        if want.deciders.is_empty() {
            prop_assert_eq!(&entry.rule_id, &None);
            prop_assert_eq!(entry.evaluator, None);
        } else {
            prop_assert_eq!(&entry.rule_id, &Some(want.deciders.join(",")));
            prop_assert_eq!(entry.evaluator, Some(Evaluator::Predicate));
        }
    }

    /// The lifecycle asks layers in slot order (ties in insertion order), aggregates to the most restrictive
    /// decision, names the deciding layers, and asks no layer after the first deny.
    #[test]
    fn lifecycle_gates_layers_in_slot_order(
        layers in prop::collection::vec((decision(), 0u32..4), 0..8),
    ) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let built: Vec<(String, u32, SteeringDecision, Arc<AtomicUsize>)> = layers
            .iter()
            .enumerate()
            .map(|(i, (d, slot))| (format!("layer-{i}"), slot * 10, d.clone(), Arc::new(AtomicUsize::new(0))))
            .collect();
        let stack: Vec<Arc<dyn MemoryLayer>> = built
            .iter()
            .map(|(id, slot, d, calls)| {
                Arc::new(FixedLayer {
                    id: id.clone(),
                    slot: Slot(*slot),
                    decision: d.clone(),
                    calls: calls.clone(),
                    log: log.clone(),
                }) as Arc<dyn MemoryLayer>
            })
            .collect();
        let ctx = StepContext::builder().layers(stack).build();
        let args = json!({});

        let gate: Gate = runtime()
            .block_on(lifecycle::before_tool_call(&HookContext::from(&ctx), ctx.layers(), ToolCallParams { call_id: "c", name: "t", args: &args }))
            .unwrap();

        // Slot order, stable for ties: sort the insertion indices by slot.
        let mut order: Vec<usize> = (0..built.len()).collect();
        order.sort_by_key(|&i| built[i].1);
        let decided: Vec<(String, SteeringDecision)> =
            order.iter().map(|&i| (built[i].0.clone(), built[i].2.clone())).collect();
        let want = expected(&decided);

        prop_assert_eq!(&gate.decision, &want.decision);
        prop_assert_eq!(&gate.layers, &want.deciders);
        let called: Vec<(String, String)> =
            decided[..want.evaluated].iter().map(|(id, _)| (id.clone(), "t".to_owned())).collect();
        prop_assert_eq!(&*log.lock().unwrap(), &called);
        for (position, &i) in order.iter().enumerate() {
            let calls = built[i].3.load(Ordering::SeqCst);
            prop_assert_eq!(calls, usize::from(position < want.evaluated), "{} called {} times", built[i].0, calls);
        }
    }
}
