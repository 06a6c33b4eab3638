//! Streaming is configuration, and the retry and timeout wrappers treat `call` and `stream` alike: retries only
//! before the first delta, a timeout over the whole stream, an idle limit between deltas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use noetic::model::{Model, ModelExt, ModelRequest, ModelResponse, ScriptedModel, StreamDelta};
use noetic::prelude::*;
use tokio::time::Instant;

fn failed(retryable: bool) -> NoeticError {
    NoeticError::ModelFailed { message: "upstream 503".into(), status: Some(503), raw: None, retryable, source: None }
}

/// One scripted stream: each delta after a pause.
type Script = Vec<(Duration, Result<StreamDelta, NoeticError>)>;

/// A model with native streaming: each `stream` call plays the next script; `call` answers something else, so
/// a wrapper that replaces streaming with a call is caught.
#[derive(Clone, Default)]
struct Streamer {
    scripts: Arc<Mutex<VecDeque<Script>>>,
    opened: Arc<Mutex<usize>>,
}

impl Streamer {
    fn with(scripts: impl IntoIterator<Item = Script>) -> Self {
        let s = Streamer::default();
        s.scripts.lock().unwrap().extend(scripts);
        s
    }

    fn opened(&self) -> usize {
        *self.opened.lock().unwrap()
    }
}

impl Model for Streamer {
    fn call(&self, _request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        Box::pin(async { Ok(ModelResponse::text("from call, not from the stream")) })
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        *self.opened.lock().unwrap() += 1;
        let script = self.scripts.lock().unwrap().pop_front().unwrap_or_default();
        futures::stream::iter(script)
            .then(|(pause, delta)| async move {
                tokio::time::sleep(pause).await;
                delta
            })
            .boxed()
    }
}

fn text(t: &str) -> Result<StreamDelta, NoeticError> {
    Ok(StreamDelta::Text { text: t.to_owned() })
}

fn done(t: &str) -> Result<StreamDelta, NoeticError> {
    Ok(StreamDelta::Done { response: ModelResponse::text(t) })
}

async fn collect(stream: BoxStream<'static, Result<StreamDelta, NoeticError>>) -> Vec<String> {
    stream
        .map(|d| match d {
            Ok(StreamDelta::Text { text }) => format!("text {text}"),
            Ok(StreamDelta::Done { response }) => format!("done {}", response.text_output()),
            Ok(other) => format!("{other:?}"),
            Err(e) => format!("error {e}"),
        })
        .collect()
        .await
}

#[tokio::test(start_paused = true)]
async fn retry_retries_a_stream_that_fails_before_its_first_delta() {
    let model = Streamer::with([
        vec![(Duration::ZERO, Err(failed(true)))],
        vec![(Duration::ZERO, text("hel")), (Duration::ZERO, text("lo")), (Duration::ZERO, done("hello"))],
    ]);
    let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(100)));
    let start = Instant::now();
    let deltas = collect(retrying.stream(ModelRequest::default())).await;
    assert_eq!(deltas, ["text hel", "text lo", "done hello"]);
    assert_eq!(model.opened(), 2);
    assert_eq!(start.elapsed(), Duration::from_millis(100), "one backoff");
}

#[tokio::test(start_paused = true)]
async fn retry_never_retries_a_stream_after_its_first_delta() {
    let model = Streamer::with([
        vec![(Duration::ZERO, text("par")), (Duration::ZERO, Err(failed(true)))],
        vec![(Duration::ZERO, done("never reached"))],
    ]);
    let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(100)));
    let deltas = collect(retrying.stream(ModelRequest::default())).await;
    assert_eq!(deltas, ["text par", format!("error {}", failed(true)).as_str()]);
    assert_eq!(model.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_gives_up_on_a_stream_that_keeps_failing_before_its_first_delta() {
    let model = Streamer::with((0..3).map(|_| vec![(Duration::ZERO, Err(failed(true)))]));
    let retrying = model.clone().with_retry(RetryPolicy::new(2, Backoff::Fixed, Duration::from_millis(10)));
    let deltas = collect(retrying.stream(ModelRequest::default())).await;
    assert_eq!(deltas, [format!("error {}", failed(true))]);
    assert_eq!(model.opened(), 2);
}

#[tokio::test(start_paused = true)]
async fn timeout_keeps_the_inner_models_own_streaming() {
    let model = Streamer::with([vec![(Duration::ZERO, text("a")), (Duration::ZERO, done("a"))]]);
    let timed = model.clone().with_timeout(Duration::from_secs(5));
    assert_eq!(collect(timed.stream(ModelRequest::default())).await, ["text a", "done a"]);
}

#[tokio::test(start_paused = true)]
async fn timeout_bounds_a_whole_stream_even_while_deltas_keep_coming() {
    let trickle: Script = (0..10).map(|i| (Duration::from_millis(400), text(&i.to_string()))).collect();
    let model = Streamer::with([trickle]);
    let timed = model.clone().with_timeout(Duration::from_secs(1)).idle(Duration::from_millis(500));
    let start = Instant::now();
    let deltas = collect(timed.stream(ModelRequest::default())).await;
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(&deltas[..2], ["text 0", "text 1"]);
    assert_eq!(deltas.len(), 3, "{deltas:?}");
    assert!(deltas[2].contains("did not finish answering within 1000 ms"), "{deltas:?}");
}

#[tokio::test(start_paused = true)]
async fn timeout_ends_a_stream_that_goes_idle_between_deltas() {
    let model = Streamer::with([vec![(Duration::ZERO, text("a")), (Duration::from_secs(600), done("late"))]]);
    let timed = model.clone().with_timeout(Duration::from_secs(60)).idle(Duration::from_secs(2));
    let start = Instant::now();
    let deltas = collect(timed.stream(ModelRequest::default())).await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert!(deltas[1].contains("sent nothing for 2000 ms"), "{deltas:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_stalled_before_its_first_delta_is_timed_out_and_retried() {
    let model = Streamer::with([
        vec![(Duration::from_secs(600), done("late"))],
        vec![(Duration::ZERO, text("ok")), (Duration::ZERO, done("ok"))],
    ]);
    let robust = model
        .clone()
        .with_timeout(Duration::from_secs(60))
        .idle(Duration::from_secs(5))
        .with_retry(RetryPolicy::new(2, Backoff::Fixed, Duration::from_millis(10)));
    let deltas = collect(robust.stream(ModelRequest::default())).await;
    assert_eq!(deltas, ["text ok", "done ok"]);
    assert_eq!(model.opened(), 2);
}

/// The same flaky model behind `with_retry` answers whether or not anybody subscribes to the session's events,
/// streamed or not: watching never changes how the model is called.
#[tokio::test(start_paused = true)]
async fn the_same_flaky_model_succeeds_watched_and_unwatched_streamed_or_not() {
    for stream in [false, true] {
        for watched in [false, true] {
            let model = ScriptedModel::new([]);
            model.push_error(failed(true));
            model.push(ModelResponse::text("answer"));
            let retrying = model.clone().with_retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(10)));
            let runtime = Runtime::builder().model(Arc::new(retrying)).stream(stream).build().unwrap();
            let session = runtime.session("s");
            let _events = watched.then(|| session.subscribe());
            let answer = session.send("hi").await.unwrap().await;
            assert_eq!(answer.as_deref().ok(), Some("answer"), "stream={stream} watched={watched}: {answer:?}");
            assert_eq!(model.calls(), 2, "stream={stream} watched={watched}");
        }
    }
}

/// A `Streamer` that says it streams natively (real providers do).
#[derive(Clone, Default)]
struct NativeStreamer(Streamer);

impl Model for NativeStreamer {
    fn streams_natively(&self) -> bool {
        true
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        self.0.call(request)
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        self.0.stream(request)
    }
}

/// With no streaming setting, a step streams exactly when its model streams natively (through the wrappers
/// too); an explicit setting wins either way.
#[tokio::test(start_paused = true)]
async fn by_default_a_step_streams_when_its_model_streams_natively_and_an_explicit_setting_wins() {
    let script = || vec![(Duration::ZERO, text("str")), (Duration::ZERO, done("streamed"))];
    let cases: [(bool, Option<bool>, &str); 4] = [
        (true, None, "streamed"),
        (true, Some(false), "from call, not from the stream"),
        (false, None, "from call, not from the stream"),
        (false, Some(true), "streamed"),
    ];
    for (native, setting, expected) in cases {
        let streamer = Streamer::with([script()]);
        let model: Arc<dyn Model> = if native {
            Arc::new(NativeStreamer(streamer.clone()).with_timeout(Duration::from_secs(5)))
        } else {
            Arc::new(streamer.clone().with_retry(RetryPolicy::new(2, Backoff::Fixed, Duration::from_millis(1))))
        };
        let mut builder = Runtime::builder().model(model);
        if let Some(stream) = setting {
            builder = builder.stream(stream);
        }
        let answer = builder.build().unwrap().session("s").send("hi").await.unwrap().await;
        assert_eq!(answer.as_deref().ok(), Some(expected), "native={native} setting={setting:?}");
        assert_eq!(streamer.opened(), usize::from(expected == "streamed"), "native={native} setting={setting:?}");
    }
}
