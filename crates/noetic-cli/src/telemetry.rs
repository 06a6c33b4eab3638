//! Exporting traces over OTLP (HTTP/protobuf): the library's GenAI spans (see `noetic::trace`) go through
//! `tracing-opentelemetry` to a batch span processor and an OTLP exporter.
//!
//! Configured by the standard variables — `OTEL_EXPORTER_OTLP_ENDPOINT` (the collector's base URL; spans go to
//! `/v1/traces` under it) or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL), `OTEL_EXPORTER_OTLP_HEADERS`
//! (`key=value,…`), `OTEL_SERVICE_NAME` (default `noetic`) — and the global `--otlp-endpoint` flag, which wins
//! over the variables. With no endpoint at all nothing is installed and nothing is slowed. Content (prompts,
//! responses, tool arguments and results) is exported only with `--capture-content` or
//! `NOETIC_OTEL_CAPTURE_CONTENT=1`.
//!
//! The queue is bounded ([`MAX_QUEUE`] spans; beyond it spans are dropped, never blocking a turn) and exported in
//! batches from the processor's own thread. [`Guard`]'s drop flushes what is queued and shuts the exporter down,
//! so every exit path of the command — success or error — sends the turn's spans.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Spans waiting for export at most; more are dropped (a slow collector never slows the agent).
pub const MAX_QUEUE: usize = 4096;

/// The environment variable that turns content capture on (`1` or `true`).
pub const CAPTURE_CONTENT_VAR: &str = "NOETIC_OTEL_CAPTURE_CONTENT";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// True when traces may carry content (the flag or [`CAPTURE_CONTENT_VAR`]); the agents the command builds ask.
pub fn captures_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Flushes and shuts the exporter down when dropped; does nothing when no exporter was installed.
#[must_use = "dropping the guard flushes and stops the exporter"]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Shutting down exports what is still queued first.
            if let Err(e) = provider.shutdown() {
                crate::output::errln!("noetic: could not send the last traces: {e}");
            }
        }
    }
}

/// The OTLP endpoint to export to: the flag, else the standard variables; `None` when none is set.
fn endpoint(flag: Option<&str>) -> Option<String> {
    let set = |s: &str| !s.trim().is_empty();
    if let Some(base) = flag.filter(|s| set(s)) {
        return Some(traces_url(base));
    }
    if let Ok(url) = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        && set(&url)
    {
        return Some(url);
    }
    std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().filter(|s| set(s)).map(|base| traces_url(&base))
}

/// The traces URL under a collector's base URL (as the OTLP specification builds it for the generic variable).
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// Whether content capture is asked for: the flag or the variable.
fn content_asked(flag: bool) -> bool {
    flag || std::env::var(CAPTURE_CONTENT_VAR).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Installs the exporter when an endpoint is configured (see the module docs) and records whether content may be
/// captured. A configuration the exporter refuses is an error naming what to fix; without an endpoint this
/// installs nothing and returns an inert guard.
///
/// `log` also writes the runtime's own log lines (lease lost, takeovers, store errors …) of that level and above to
/// stderr: `NOETIC_LOG=error|warn|info|debug` chooses it (`off` for none); `log_default` is the command's default.
pub fn init(endpoint_flag: Option<&str>, capture_content: bool, log_default: Option<Level>) -> Result<Guard, String> {
    CAPTURE_CONTENT.store(content_asked(capture_content), Ordering::Relaxed);
    let log = log_level(log_default)?;
    let Some(url) = endpoint(endpoint_flag) else {
        if let Some(level) = log {
            let logger = StderrLog.with_filter(Targets::new().with_target("noetic", level));
            tracing_subscriber::registry()
                .with(logger)
                .try_init()
                .map_err(|e| format!("cannot install the log: {e}"))?;
        }
        return Ok(Guard { provider: None });
    };
    // Headers from OTEL_EXPORTER_OTLP_HEADERS are read by the exporter itself.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.as_str())
        .with_headers(Default::default())
        .build()
        .map_err(|e| format!("cannot export traces to {url}: {e}; check --otlp-endpoint / OTEL_EXPORTER_OTLP_*"))?;
    let batch = BatchConfigBuilder::default().with_max_queue_size(MAX_QUEUE).build();
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("noetic");
    }
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource.build()).build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("noetic"));
    let filter = Targets::new().with_target("noetic", Level::INFO);
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .with(log.map(|level| StderrLog.with_filter(Targets::new().with_target("noetic", level))))
        .try_init()
        .map_err(|e| format!("cannot install the trace exporter: {e}"))?;
    Ok(Guard { provider: Some(provider) })
}

/// The log level: `NOETIC_LOG`, else the command's default.
fn log_level(default: Option<Level>) -> Result<Option<Level>, String> {
    log_level_from(std::env::var("NOETIC_LOG").ok().as_deref(), default)
}

fn log_level_from(text: Option<&str>, default: Option<Level>) -> Result<Option<Level>, String> {
    let Some(text) = text else { return Ok(default) };
    match text.trim().to_ascii_lowercase().as_str() {
        "" => Ok(default),
        "off" | "none" => Ok(None),
        "error" => Ok(Some(Level::ERROR)),
        "warn" | "warning" => Ok(Some(Level::WARN)),
        "info" => Ok(Some(Level::INFO)),
        "debug" => Ok(Some(Level::DEBUG)),
        "trace" => Ok(Some(Level::TRACE)),
        other => Err(format!("NOETIC_LOG={other} is not a level: use off, error, warn, info, debug or trace")),
    }
}

/// Log lines on stderr: `2026-11-25T19:00:00.123Z WARN noetic_postgres: message key=value …`. What the fields
/// hold is escaped (a session key or an error may carry text from outside).
struct StderrLog;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StderrLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let text = format!("{value:?}");
                if field.name() == "message" {
                    self.0.insert_str(0, &crate::output::render::visible(&text));
                } else {
                    self.0.push_str(&format!(" {}={}", field.name(), crate::output::render::visible(&text)));
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0.insert_str(0, &crate::output::render::visible(value));
                } else {
                    self.0.push_str(&format!(" {}={}", field.name(), crate::output::render::visible(value)));
                }
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        let now = noetic::time::rfc3339(std::time::SystemTime::now());
        crate::output::errln!("{now} {} {}: {}", meta.level(), meta.target(), fields.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_goes_under_the_collector_base_url() {
        assert_eq!(traces_url("http://localhost:4318"), "http://localhost:4318/v1/traces");
        assert_eq!(traces_url("http://localhost:4318/ "), "http://localhost:4318/v1/traces");
    }

    #[test]
    fn the_log_level_is_the_commands_default_unless_noetic_log_names_one() {
        assert_eq!(log_level_from(None, Some(Level::WARN)), Ok(Some(Level::WARN)));
        assert_eq!(log_level_from(Some("debug"), Some(Level::WARN)), Ok(Some(Level::DEBUG)));
        assert_eq!(log_level_from(Some("off"), Some(Level::WARN)), Ok(None));
        let refused = log_level_from(Some("loud"), None);
        assert!(refused.as_ref().is_err_and(|e| e.contains("NOETIC_LOG=loud") && e.contains("warn")), "{refused:?}");
    }

    #[test]
    fn the_flag_wins_over_the_variables() {
        // The variables are not read for a non-blank flag, so this holds whatever the environment says.
        assert_eq!(endpoint(Some("http://c:4318")), Some("http://c:4318/v1/traces".to_owned()));
    }
}
