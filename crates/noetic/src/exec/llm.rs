//! Executes `llm` steps: rounds of model call → tool calls (sequential, in call order) → results fed back, until
//! the model answers without tool calls.
//!
//! The step's [`StepMeta`] records the tool calls of the *accepted final* response, so `until::no_tool_calls`
//! around an `llm` step stops once the step has produced its answer.

use std::sync::Arc;

use crate::context::{Checkpoints, Context, EventKind, SKIPPED_RESULT};
use crate::decision::SteeringAction;
use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::layer::{ModelCallParams, lifecycle};
use crate::model::{Item, ModelRequest, ModelResponse, StepMeta, StreamDelta, ToolCall, ToolResult, ToolSpec, Usage};
use crate::step::StepLlm;
use crate::tool::Tool;
use crate::tool::call::{EmitFilter, run_tool_call};

/// How often an `after_model_call` guide decision makes the step ask the model again before it accepts the
/// response anyway.
pub const MAX_GUIDE_RETRIES: usize = 3;

fn spec(tool: &Arc<dyn Tool>) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: tool.description().to_owned(),
        parameters: tool.input_schema().json().clone(),
    }
}

/// Names the step in errors the model layer raised without knowing it.
fn with_step_id(error: NoeticError, id: &str) -> NoeticError {
    match error {
        NoeticError::ModelRateLimit { step_id, retry_after_ms, message } if step_id.is_empty() => {
            NoeticError::ModelRateLimit { step_id: id.to_owned(), retry_after_ms, message }
        }
        other => other,
    }
}

/// Parses the final answer into the step's output type, validating it against the output schema first.
fn parse_output<I, O>(s: &StepLlm<I, O>, text: &str) -> Result<O, NoeticError> {
    let parse_error =
        |message: String| NoeticError::ModelParseError { step_id: s.id.to_string(), raw: text.to_owned(), message };
    if let Some(schema) = &s.output_schema {
        let value: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| parse_error(format!("the answer is not JSON: {e}")))?;
        schema.validate(&value).map_err(parse_error)?;
    }
    s.parse(text.trim()).map_err(parse_error)
}

pub(super) async fn execute<I, O>(s: &StepLlm<I, O>, input: I, ctx: &Context) -> Result<O, NoeticError> {
    let model = ctx.model().cloned().ok_or_else(|| {
        ConfigError::new(
            ConfigCode::NoModelProvider,
            format!("llm step '{}' needs a model (\"{}\") and the context has none", s.id, s.model),
            "build the context with Context::builder().model(...) or run the step through a Runtime",
        )
    })?;
    if let Some(text) = s.prompt_of(input) {
        ctx.push_item(Item::user(text));
    }
    let tools: Vec<Arc<dyn Tool>> = match &s.tools {
        Some(tools) => tools.clone(),
        None => ctx.tools().to_vec(),
    };
    let specs: Arc<[ToolSpec]> = tools.iter().map(spec).collect();
    let emit = |kind: EventKind| {
        if s.emit.allows(&kind) {
            ctx.emit(|| kind);
        }
    };
    // Asked at each use: a subscriber may arrive mid-step.
    let watched = || ctx.events().is_active();
    let mut usage = Usage::default();
    let mut cost = 0.0;
    // Corrections asked for by `after_model_call` guide decisions, sent after the history until a response is
    // accepted.
    let mut corrections: Vec<Item> = Vec::new();
    let steering = ctx.turn_steering().cloned();
    let mut round = 0;
    loop {
        ctx.check_cancelled()?;
        if let Some(ts) = &steering {
            ts.poll_at_turn_start();
        }
        // Pending steering buys rounds beyond the limit, up to one queue's worth, so it cannot run forever.
        let limit = match &steering {
            Some(ts) if ts.has_pending() => {
                s.max_rounds.saturating_add(u32::try_from(ts.capacity()).unwrap_or(u32::MAX))
            }
            _ => s.max_rounds,
        };
        if round >= limit {
            return Err(NoeticError::RoundLimitExceeded { step_id: s.id.to_string(), max_rounds: s.max_rounds });
        }
        if let Some(ts) = &steering {
            ts.inject(ctx);
        }
        // Recall before every model request, not once per step: feedback that async rules queued during this
        // step's tool rounds reaches the model in the next request of the same turn (SPEC 3.8).
        let recalled = lifecycle::recall(ctx).await?;
        let request = ModelRequest {
            model: s.model.clone(),
            instructions: s.instructions.clone(),
            context: recalled,
            history: ctx.history(),
            tail: corrections.clone(),
            tools: specs.clone(),
            params: s.params.clone(),
            tool_choice: s.tool_choice.clone(),
            output_schema: s.output_schema.as_ref().map(|schema| schema.json().clone()),
            grammar: None,
        };
        if watched() {
            emit(EventKind::ModelCallStarted {
                step_id: s.id.clone(),
                model: s.model.clone(),
                round,
                messages: request.messages().count(),
                tools: specs.len(),
            });
        }
        // Streaming is the step's configuration, never inferred from who watches (SPEC 7.2).
        let answer = if s.stream {
            let on_text = |text: String| {
                if watched() {
                    emit(EventKind::ModelTextDelta { step_id: s.id.clone(), text });
                }
            };
            ctx.run_cancellable(collect_stream(model.stream(request), on_text)).await
        } else {
            ctx.run_cancellable(model.call(request)).await
        };
        let response: ModelResponse = answer.map_err(|e| with_step_id(e, &s.id))?;
        usage.add(&response.usage);
        cost += response.cost.unwrap_or(0.0);
        ctx.add_usage(&response.usage, response.cost.unwrap_or(0.0));
        // Cancelled while the model answered: the tokens were spent (counted above), but the answer is not used.
        ctx.check_cancelled()?;
        let calls: Vec<ToolCall> = response.tool_calls_iter().cloned().collect();
        if watched() {
            emit(EventKind::ModelCallCompleted {
                step_id: s.id.clone(),
                round,
                tool_calls: calls.len(),
                usage: response.usage,
            });
        }
        if let Some(refusal) = response.refusal {
            return Err(NoeticError::ModelRefused { step_id: s.id.to_string(), refusal });
        }
        let review = ModelCallParams { step_id: &s.id, model: &s.model, response: &response };
        let gate = ctx.run_cancellable(lifecycle::after_model_call(ctx, review)).await?;
        match gate.decision.action {
            SteeringAction::Allow => {}
            SteeringAction::Deny => {
                emit(EventKind::ModelResponseSteered {
                    step_id: s.id.clone(),
                    action: SteeringAction::Deny,
                    guidance: gate.decision.guidance.clone(),
                });
                return Err(NoeticError::SteeringDenied { guidance: gate.decision.guidance });
            }
            SteeringAction::Guide if corrections.len() < MAX_GUIDE_RETRIES => {
                emit(EventKind::ModelResponseSteered {
                    step_id: s.id.clone(),
                    action: SteeringAction::Guide,
                    guidance: gate.decision.guidance.clone(),
                });
                let text = gate.decision.guidance.unwrap_or_else(|| "Please adjust your response.".to_owned());
                corrections.push(Item::developer(text));
                continue;
            }
            SteeringAction::Guide => {
                tracing::warn!(step_id = %s.id, "steering kept guiding after {MAX_GUIDE_RETRIES} retries; accepting the response");
            }
        }
        corrections.clear();
        round += 1;
        if calls.is_empty() {
            let text = response.text_output().to_owned();
            lifecycle::store(ctx, &response).await;
            ctx.extend_items(response.items);
            // Steering that arrived while the model answered: keep the answer, add the messages, ask again.
            if steering.as_ref().is_some_and(|ts| ts.poll()) {
                continue;
            }
            ctx.set_last_step_meta(StepMeta { tool_calls: Arc::from(Vec::new()), usage, cost });
            return parse_output(s, &text);
        }
        ctx.extend_items(response.items);
        run_calls(ctx, &tools, &calls, &|kind: &EventKind| s.emit.allows(kind), steering.as_deref()).await?;
    }
}

/// Drains a model stream, handing each text piece to `on_text`; the final `Done` delta is the response.
async fn collect_stream(
    mut stream: futures::stream::BoxStream<'static, Result<StreamDelta, NoeticError>>,
    on_text: impl Fn(String),
) -> Result<ModelResponse, NoeticError> {
    use futures::StreamExt;
    while let Some(delta) = stream.next().await {
        match delta? {
            StreamDelta::Text { text } => on_text(text),
            StreamDelta::ToolCall { .. } => {}
            StreamDelta::Done { response } => return Ok(response),
        }
    }
    Err(NoeticError::ModelFailed {
        message: "the model's stream ended without a final response; the connection may have dropped — try again"
            .to_owned(),
        status: None,
        raw: None,
        retryable: true,
    })
}

/// Runs the calls one after another, appending each result. After every call the steering queue is polled; with
/// the `SkipRemaining` policy, messages found there stop the batch and each later call gets a skipped result. On
/// cancellation every call without a result gets a cancelled result, so the conversation stays well-formed.
async fn run_calls(
    ctx: &Context,
    tools: &[Arc<dyn Tool>],
    calls: &[ToolCall],
    allow: EmitFilter<'_>,
    steering: Option<&dyn Checkpoints>,
) -> Result<(), NoeticError> {
    for (i, call) in calls.iter().enumerate() {
        let outcome = match ctx.check_cancelled() {
            Ok(()) => run_tool_call(ctx, tools, call, allow).await,
            Err(cancelled) => Err(cancelled),
        };
        match outcome {
            Ok(result) => {
                ctx.push_item(Item::ToolResult(result));
                if let Some(ts) = steering
                    && ts.poll()
                    && ts.skips_rest_of_batch()
                {
                    skip_rest(ctx, &calls[i + 1..]);
                    return Ok(());
                }
            }
            Err(error) => {
                let reason = error.to_string();
                ctx.extend_items(calls[i..].iter().map(|c| {
                    Item::ToolResult(ToolResult {
                        call_id: c.id.clone(),
                        content: format!("Tool call not completed: {reason}"),
                        is_error: true,
                    })
                }));
                return Err(error);
            }
        }
    }
    Ok(())
}

/// Gives each call that will not start the skipped result, in call order.
fn skip_rest(ctx: &Context, rest: &[ToolCall]) {
    for call in rest {
        ctx.push_item(Item::ToolResult(ToolResult {
            call_id: call.id.clone(),
            content: SKIPPED_RESULT.to_owned(),
            is_error: true,
        }));
        ctx.emit(|| EventKind::ToolSkipped {
            call_id: call.id.clone(),
            reason: "queued user steering message".to_owned(),
        });
    }
}
