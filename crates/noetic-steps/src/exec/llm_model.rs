//! The model calls of an `llm` step: one request (streamed or not) in its `chat` span, retried by the step's
//! policy, its deltas forwarded as events and its answer traced.

use std::sync::Arc;

use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::durable::logs_inputs;
use crate::context::EventKind;
use crate::error::NoeticError;
use crate::layer::lifecycle;
use crate::model::{Item, ModelRequest, ModelResponse, StreamDelta, ToolSpec};
use crate::scope::StepContext;
use crate::step::StepLlm;
use crate::window::{self, Fitted, StepWindow};

/// [`call_model`] in its span: the driver calls this one when the span is enabled, and the plain one otherwise,
/// so that traces cost nothing without a subscriber.
pub(super) async fn traced_model_call<I, O>(
    s: &StepLlm<I, O>,
    ctx: &StepContext,
    model: &Arc<dyn crate::model::Model>,
    specs: &Arc<[ToolSpec]>,
    round: u32,
    tail: Vec<Item>,
    span: &Span,
) -> Result<ModelResponse, NoeticError> {
    let result = call_model(s, ctx, model, specs, round, tail, span).instrument(span.clone()).await;
    match &result {
        Ok(response) => trace_response(span, response, ctx.hooks().captures_content()),
        Err(e) => crate::trace::fail_with(span, e),
    }
    result
}

/// The model call's span (see [`crate::trace`]): named and given its request attributes now, its response
/// attributes when the answer came. It stays open through the answer's review, so the review's steering decision
/// lands on it.
pub(super) fn chat_span<I, O>(s: &StepLlm<I, O>, model: &dyn crate::model::Model, round: u32) -> Span {
    let span = tracing::info_span!(
        "chat",
        otel.name = format_args!("chat {}", s.model),
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = Empty,
        gen_ai.request.model = &*s.model,
        gen_ai.request.temperature = Empty,
        gen_ai.request.top_p = Empty,
        gen_ai.request.max_tokens = Empty,
        gen_ai.request.stop_sequences = Empty,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        noetic.step.id = &*s.id,
        noetic.round = round,
        noetic.request.messages = Empty,
        noetic.response.tool_calls = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
        error.type = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(provider) = model.provider_name() {
        span.record("gen_ai.provider.name", provider);
    }
    let p = &s.params;
    if let Some(t) = p.temperature {
        span.record("gen_ai.request.temperature", f64::from(t));
    }
    if let Some(t) = p.top_p {
        span.record("gen_ai.request.top_p", f64::from(t));
    }
    if let Some(m) = p.max_tokens {
        span.record("gen_ai.request.max_tokens", m);
    }
    if !p.stop_sequences.is_empty() {
        span.record("gen_ai.request.stop_sequences", tracing::field::debug(&p.stop_sequences));
    }
    span
}

/// Records what the model answered on its span: finish reason, usage, and (when content capture is on) the
/// output messages.
pub(super) fn trace_response(span: &Span, response: &ModelResponse, content: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.response.finish_reasons", crate::trace::finish_reason(&response.finish_reason));
    span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
    span.record("noetic.response.tool_calls", response.tool_calls_iter().count());
    if let Some(model) = &response.model {
        span.record("gen_ai.response.model", &**model);
    }
    if content && let Ok(json) = serde_json::to_string(&response.items) {
        span.record("gen_ai.output.messages", json);
    }
}

/// Recalls the layers, builds the request (fitted into the model's window when it is known) and calls (or
/// streams) the model; the usage is counted even when the turn was cancelled while the model answered (the answer
/// is then not used). A provider's "context length exceeded" answer compacts the history and retries once.
pub(super) async fn call_model<I, O>(
    s: &StepLlm<I, O>,
    ctx: &StepContext,
    model: &Arc<dyn crate::model::Model>,
    specs: &Arc<[ToolSpec]>,
    round: u32,
    tail: Vec<Item>,
    span: &Span,
) -> Result<ModelResponse, NoeticError> {
    match call_model_once(s, ctx, model, specs, round, tail.clone(), span, None).await {
        Err(NoeticError::ContextLengthExceeded { message, limit, .. }) => {
            tracing::warn!(step_id = %s.id, %message, "the model said the request was too long; compacting and retrying once");
            call_model_once(s, ctx, model, specs, round, tail, span, Some(limit)).await
        }
        other => other,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn call_model_once<I, O>(
    s: &StepLlm<I, O>,
    ctx: &StepContext,
    model: &Arc<dyn crate::model::Model>,
    specs: &Arc<[ToolSpec]>,
    round: u32,
    tail: Vec<Item>,
    span: &Span,
    refused: Option<Option<u64>>,
) -> Result<ModelResponse, NoeticError> {
    let emit = |kind: EventKind| {
        if s.emit.allows(&kind) {
            ctx.emit(|| kind);
        }
    };
    // Asked at each use: a subscriber may arrive mid-step.
    let watched = || ctx.events().is_active();
    // Recall before every model request, not once per step: feedback that async rules queued during this
    // step's tool rounds reaches the model in the next request of the same turn (SPEC 3.8).
    let step = StepWindow {
        id: &s.id,
        model: &s.model,
        instructions: s.instructions.as_deref(),
        instructions_tokens: Some(&s.instructions_tokens),
        max_tokens: s.params.max_tokens,
        compaction: s.compaction,
    };
    let fitted = window::fit(ctx, model.as_ref(), &step, specs, &tail, refused).await?;
    let (recalled, history, counted) = match fitted {
        Some(Fitted { context, history, counted, tokens, window }) => {
            (context, history, Some((counted, tokens, window)))
        }
        None => (lifecycle::recall(&ctx.hooks(), ctx.layers()).await?, ctx.history(), None),
    };
    let request = ModelRequest {
        model: s.model.clone(),
        instructions: s.instructions.clone(),
        context: recalled,
        history,
        tail,
        tools: specs.clone(),
        params: s.params.clone(),
        tool_choice: s.tool_choice_for(round),
        output_schema: s.output_schema.as_ref().map(|schema| schema.json().clone()),
        grammar: None,
        step: Some(s.id.clone()),
    };
    if !span.is_disabled() {
        span.record("noetic.request.messages", request.messages().count());
        if ctx.hooks().captures_content() {
            let messages: Vec<&Item> = request.messages().collect();
            if let Ok(json) = serde_json::to_string(&messages) {
                span.record("gen_ai.input.messages", json);
            }
        }
    }
    if watched() {
        emit(EventKind::ModelCallStarted {
            step_id: s.id.clone(),
            model: s.model.clone(),
            round,
            messages: request.messages().count(),
            tools: specs.len(),
            context_tokens: counted.map(|(_, tokens, _)| u64::from(tokens)),
            context_window: counted.and_then(|(_, _, window)| window).map(|w| u64::from(w.tokens)),
        });
    }
    // Streaming is the step's configuration, never inferred from who watches (SPEC 7.2).
    let answer = if s.stream.unwrap_or_else(|| model.streams_natively()) {
        let on_text = |text: String| {
            if watched() {
                emit(EventKind::ModelTextDelta { step_id: s.id.clone(), text });
            }
        };
        ctx.run_cancellable(collect_stream(model.stream(request), on_text)).await
    } else {
        ctx.run_cancellable(model.call(request)).await
    };
    let response = answer?;
    ctx.add_usage(&response.usage, response.usage.cost.unwrap_or(0.0));
    if let Some(meter) = ctx.hooks().meter() {
        meter.model_call(&response.usage, logs_inputs(&ctx.hooks()));
    }
    if let Some((counted, _, _)) = counted {
        ctx.history().calibration().observe(counted, response.usage.input_tokens);
    }
    ctx.check_cancelled()?;
    if watched() {
        emit(EventKind::ModelCallCompleted {
            step_id: s.id.clone(),
            round,
            tool_calls: response.tool_calls_iter().count(),
            usage: response.usage,
        });
    }
    Ok(response)
}

/// Drains a model stream, handing each text piece to `on_text`; the final `Done` delta is the response.
pub(super) async fn collect_stream(
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
        source: None,
    })
}
