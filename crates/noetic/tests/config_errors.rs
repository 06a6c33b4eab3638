//! Every builder validates its configuration and reports a stable `ConfigError` code with a hint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use noetic::layer::MemoryLayer;
use noetic::prelude::*;
use serde_json::json;

fn noop() -> Step<u8, u8> {
    Step::run("noop", |x: u8, _| async move { Ok(x) }).build().unwrap()
}

struct L;
impl MemoryLayer for L {
    fn id(&self) -> &str {
        "l"
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, ConfigError>) -> (ConfigCode, ConfigError) {
    let e = r.unwrap_err();
    assert!(!e.message.is_empty() && !e.hint.is_empty(), "every error says what and what to do: {e:?}");
    (e.code, e)
}

#[test]
fn every_builder_rejects_an_empty_or_blank_id() {
    let tool: Arc<dyn Tool> = Arc::new(FnTool::builder("t", "d").handler(|a, _| async move { Ok(a) }).build().unwrap());
    let results: Vec<Result<(), ConfigError>> = vec![
        Step::run("", |x: u8, _| async move { Ok(x) }).build().map(drop),
        Step::<String, String>::llm("  ", "m").build().map(drop),
        Step::<serde_json::Value, serde_json::Value>::tool("", tool).build().map(drop),
        Step::branch("", |_: &u8, _| None).build().map(drop),
        Step::fork("", ForkMode::Race).paths([noop()]).build().map(drop),
        Step::spawn("", noop()).build().map(drop),
        Step::provide("", noop(), [Arc::new(L) as Arc<dyn MemoryLayer>]).build().map(drop),
        Step::loop_("", [noop()]).until(until::never()).build().map(drop),
        Step::every("", noop(), 1.0).build::<()>().map(drop),
    ];
    for r in results {
        let (c, e) = code(r);
        assert_eq!(c, ConfigCode::EmptyStepId, "{e}");
        assert_eq!(c.as_str(), "EMPTY_STEP_ID");
    }
}

#[test]
fn each_misconfiguration_has_its_own_code() {
    let cases: Vec<(ConfigCode, &str, Result<(), ConfigError>)> = vec![
        (ConfigCode::MissingModel, "MISSING_MODEL", Step::<String, String>::llm("l", " ").build().map(drop)),
        (
            ConfigCode::MissingMergeFunction,
            "MISSING_MERGE_FUNCTION",
            Step::fork("f", ForkMode::All).paths([noop()]).build().map(drop),
        ),
        (
            ConfigCode::MissingMergeFunction,
            "MISSING_MERGE_FUNCTION",
            Step::fork("f", ForkMode::Settle).paths([noop()]).merge(|v, _| Ok(v[0])).build().map(drop),
        ),
        (ConfigCode::MissingPaths, "MISSING_PATHS", Step::<u8, u8>::fork("f", ForkMode::Race).build().map(drop)),
        (
            ConfigCode::InvalidConcurrency,
            "INVALID_CONCURRENCY",
            Step::fork("f", ForkMode::Race).paths([noop()]).concurrency(0).build().map(drop),
        ),
        (
            ConfigCode::MissingLoopBody,
            "MISSING_LOOP_BODY",
            Step::<u8, u8>::loop_("l", []).until(until::never()).build().map(drop),
        ),
        (ConfigCode::MissingUntilPredicate, "MISSING_UNTIL_PREDICATE", Step::loop_("l", [noop()]).build().map(drop)),
        (
            ConfigCode::InvalidMaxIterations,
            "INVALID_MAX_ITERATIONS",
            Step::loop_("l", [noop()]).until(until::never()).max_iterations(0).build().map(drop),
        ),
        (ConfigCode::InvalidIntervalMs, "INVALID_INTERVAL_MS", Step::every("e", noop(), -1.0).build::<()>().map(drop)),
        (
            ConfigCode::InvalidIntervalMs,
            "INVALID_INTERVAL_MS",
            Step::every("e", noop(), f64::NAN).build::<()>().map(drop),
        ),
        (
            ConfigCode::InvalidIntervalMs,
            "INVALID_INTERVAL_MS",
            Step::every("e", noop(), f64::INFINITY).build::<()>().map(drop),
        ),
        (
            ConfigCode::InvalidJitter,
            "INVALID_JITTER",
            Step::every("e", noop(), 1.0).jitter(-0.5).build::<()>().map(drop),
        ),
        (
            ConfigCode::MissingContextLayers,
            "MISSING_CONTEXT_LAYERS",
            Step::provide("p", noop(), Vec::<Arc<dyn MemoryLayer>>::new()).build().map(drop),
        ),
        (
            ConfigCode::InvalidTimeout,
            "INVALID_TIMEOUT",
            Step::spawn("s", noop()).timeout(Duration::ZERO).build().map(drop),
        ),
        (
            ConfigCode::InvalidRetryPolicy,
            "INVALID_RETRY_POLICY",
            Step::run("r", |x: u8, _| async move { Ok(x) })
                .retry(RetryPolicy::new(0, Backoff::Fixed, Duration::ZERO))
                .build()
                .map(drop),
        ),
        (ConfigCode::InvalidChannelCapacity, "INVALID_CHANNEL_CAPACITY", Channel::<String>::queue("q", 0).map(drop)),
        (
            ConfigCode::InvalidSchema,
            "INVALID_SCHEMA",
            Step::<String, String>::llm("l", "m").output::<String>(json!({"type": 5})).build().map(drop),
        ),
        (ConfigCode::EmptyToolName, "EMPTY_TOOL_NAME", FnTool::builder("", "d").build().map(drop)),
        (ConfigCode::MissingExecuteFunction, "MISSING_EXECUTE_FUNCTION", FnTool::builder("t", "d").build().map(drop)),
    ];
    for (expected, name, result) in cases {
        let (c, e) = code(result);
        assert_eq!(c, expected, "{e}");
        assert_eq!(c.as_str(), name);
        assert!(e.to_string().starts_with(name), "the display starts with the code: {e}");
    }
}

#[test]
fn config_errors_surface_as_noetic_errors_when_met_at_run_time() {
    let e: NoeticError = ConfigError::new(ConfigCode::MissingCallModel, "m", "h").into();
    assert_eq!(e.kind(), "config");
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["code"], "MISSING_CALL_MODEL");
}

fn named(name: &str) -> Arc<dyn Tool> {
    Arc::new(FnTool::builder(name, "A tool.").handler(|_, _| async { Ok(serde_json::Value::Null) }).build().unwrap())
}

#[test]
fn two_tools_with_one_name_are_a_config_error_in_a_runtime_and_in_an_llm_step() {
    let Err(err) = Runtime::builder()
        .model(Arc::new(ScriptedModel::new([])))
        .tools([named("read"), named("write"), named("read")])
        .build()
    else {
        panic!("a duplicate name must not build");
    };
    assert_eq!(err.code, ConfigCode::DuplicateToolName);
    assert!(err.message.contains("'read'"), "{err}");
    let err = Step::<String, String>::llm("assistant", "m")
        .tools([named("x"), named("x")])
        .build()
        .expect_err("a duplicate name must not build");
    assert_eq!(err.code, ConfigCode::DuplicateToolName);
    assert!(err.message.contains("llm step 'assistant'") && err.message.contains("'x'"), "{err}");
}
