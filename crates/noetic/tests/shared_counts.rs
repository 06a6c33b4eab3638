//! A running turn writes no reference count that turns on other threads share: it holds no extra reference to the
//! runtime's model, tools or layers (each turn takes its thread's copy of them instead; see `sync::Spread`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex, OnceLock, Weak};

use noetic::prelude::*;
use serde_json::{Value, json};

struct Quiet;

impl MemoryLayer for Quiet {
    fn id(&self) -> &str {
        "quiet"
    }
}

/// Strong counts of the model, the tool and the layer.
type Counts = (usize, usize, usize);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_turn_holds_no_extra_reference_to_the_runtimes_model_tools_or_layers() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "probe", json!({}))]),
        ModelResponse::text("first"),
        ModelResponse::tool_calls([("c2", "probe", json!({}))]),
        ModelResponse::text("second"),
    ]));
    let layer = Arc::new(Quiet);
    let (model_ref, layer_ref): (Weak<ScriptedModel>, Weak<Quiet>) = (Arc::downgrade(&model), Arc::downgrade(&layer));
    let tool_ref: Arc<OnceLock<Weak<dyn Tool>>> = Arc::new(OnceLock::new());
    let seen: Arc<Mutex<Vec<Counts>>> = Arc::default();
    let counts = {
        let (model_ref, layer_ref, tool_ref) = (model_ref.clone(), layer_ref.clone(), tool_ref.clone());
        move || -> Counts {
            let tool = tool_ref.get().map_or(0, Weak::strong_count);
            (model_ref.strong_count(), tool, layer_ref.strong_count())
        }
    };
    let tool: Arc<dyn Tool> = {
        let (counts, seen) = (counts.clone(), seen.clone());
        Arc::new(
            FnTool::builder("probe", "Reports reference counts.")
                .handler(move |_, _| {
                    seen.lock().unwrap().push(counts());
                    async { Ok(Value::Null) }
                })
                .build()
                .unwrap(),
        )
    };
    tool_ref.set(Arc::downgrade(&tool)).ok().unwrap();
    let runtime = Runtime::builder().model(model.clone()).tool(tool.clone()).layer(layer.clone()).build().unwrap();
    let session = runtime.session("s");
    // The first turn on this thread makes the thread's copy of the services and layers (one more reference each,
    // for as long as the runtime lives); later turns add none.
    assert_eq!(session.send("one").await.unwrap().await.unwrap(), "first");
    let idle = counts();
    assert_eq!(session.send("two").await.unwrap().await.unwrap(), "second");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the tool ran once per turn");
    assert_eq!(seen[1], idle, "(model, tool, layer) counts during the second turn's tool call vs idle");
    assert_eq!(counts(), idle, "a finished turn leaves no reference behind");
}
