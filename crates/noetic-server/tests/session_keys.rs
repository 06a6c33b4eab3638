//! Session keys: short and plain (safe in URLs, logs and the page), and never made only of dots, which a browser
//! or curl drops from a URL (`/api/sessions/../messages` becomes `/api/messages`), so such a session could not be
//! reached.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::ScriptedModel;
use noetic_server::ServerConfig;
use support::Running;

const LONG: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_keys_made_only_of_dots_are_refused_because_browsers_drop_them_from_urls() {
    let model = ScriptedModel::new([ModelResponse::text("ok")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())), ServerConfig::default(), LONG).await;
    let post = |key: &str| {
        format!(
            "POST /api/sessions/{key}/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: 13\r\nConnection: close\r\n\r\n{{\"text\":\"hi\"}}",
            s.addr
        )
    };
    for key in [".", "..", "...", "%2e", "%2E%2e", "%2e%2e%2e"] {
        for request in
            [post(key), format!("GET /api/sessions/{key} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", s.addr)]
        {
            let r = support::raw(s.addr, &request).await;
            assert_eq!((r.status, r.code()), (400, "invalid_session_key"), "key {key:?}: {r:?}");
            assert!(r.body["error"]["message"].as_str().unwrap().contains("not only dots"), "{r:?}");
        }
    }
    assert_eq!(model.calls(), 0, "nothing reached the model");
    // Dots among other characters are fine.
    for key in ["v1.2", ".hidden", "a..b"] {
        let r = support::raw(s.addr, &post(key)).await;
        assert_eq!(r.status, 202, "key {key:?}: {r:?}");
    }
}

#[test]
fn the_api_document_states_the_key_grammar() {
    let doc: serde_json::Value = serde_json::from_str(noetic_server::api_document()).unwrap();
    let mut keys = 0;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for operation in methods.as_object().unwrap().values() {
            for parameter in operation["parameters"].as_array().into_iter().flatten().filter(|p| p["name"] == "key") {
                assert_eq!(parameter["schema"]["pattern"], r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$", "{path}");
                assert!(parameter["description"].as_str().unwrap().contains("not only dots"), "{path}");
                keys += 1;
            }
        }
    }
    assert_eq!(keys, 13, "every route with a session key");
}
