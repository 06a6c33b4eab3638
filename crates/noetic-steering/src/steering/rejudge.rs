//! Asking the judges a replay could not answer from the record: new or changed LLM rules (`--rejudge`).

use std::sync::Arc;

use super::judge::{self, failure_decision};
use super::layer::SteeringLayer;
use super::ledger::FailureCause;
use super::replay::{Recorded, Replay, Unreplayable, Verdicts};
use super::rules::HookParams;
use crate::context::Context;
use crate::error::ConfigError;
use crate::layer::{ModelCallParams, ToolCallParams};
use crate::model::Model;

/// Asks `model` every judge call `replay` still needs (its [`ReplaySummary::judge_calls_needed`](super::replay::ReplaySummary::judge_calls_needed)
/// (super::replay::ReplaySummary::judge_calls_needed)): for each decision reported
/// [`Unreplayable::NotJudged`], each listed rule's judge, on the same recorded decision — `recorded` as given to
/// [`replay`](super::replay::replay). A judge without a verdict decides by its rule's failure policy, as it would
/// live. Replaying again with the returned verdicts decides those decisions. A configuration error (no provider,
/// no key) stops at once: nothing would be judged.
pub async fn rejudge(
    layer: &SteeringLayer,
    model: Arc<dyn Model>,
    recorded: &[Recorded<'_>],
    replay: &Replay<'_>,
) -> Result<Verdicts, ConfigError> {
    let decisions: Vec<&Recorded<'_>> = recorded.iter().filter(|r| Recorded::is_decision(r.entry)).collect();
    let ctx = Context::new();
    let mut verdicts = Verdicts::default();
    let null = serde_json::Value::Null;
    for replayed in &replay.decisions {
        let Err(Unreplayable::NotJudged { rules }) = &replayed.new else { continue };
        let Some(decision) = decisions.get(replayed.index) else { continue };
        let params = match (decision.response, decision.entry.tool_name.as_deref()) {
            (Some(response), _) => HookParams::AfterModelCall(ModelCallParams { step_id: "", model: "", response }),
            (None, Some(name)) => {
                let args = decision.entry.tool_args.as_ref().unwrap_or(&null);
                HookParams::BeforeToolCall(ToolCallParams { call_id: "", name, args })
            }
            (None, None) => continue,
        };
        let summary = judge::summary(&params);
        for rule_id in rules {
            let Some(rule) = layer.config().rules.iter().find(|r| &r.id == rule_id) else { continue };
            let Some(eval) = &rule.llm_eval else { continue };
            let prompt = judge::prompt(&eval.prompt, &summary);
            let verdict =
                judge::judge(model.clone(), ctx.clone(), None, eval, prompt, layer.config().max_retries).await;
            let decision = match verdict {
                Ok(decision) => decision,
                Err(FailureCause::Config { error }) => return Err(error),
                Err(cause) => failure_decision(&rule.id, eval.on_failure, &cause),
            };
            verdicts.insert(replayed.index, rule.id.clone(), decision);
        }
    }
    Ok(verdicts)
}
