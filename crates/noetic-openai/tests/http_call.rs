//! Calls and streams against a local wiremock server speaking chat completions: the exact request body sent, and
//! the parsed result of each committed response fixture.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{collect, config_for, done, fixture, fixture_json, model_for, received_bodies, user_request};
use noetic::model::{Capabilities, FinishReason, History, StreamDelta, ToolSpec};
use noetic::prelude::*;
use noetic_openai::{OpenAiConfig, OpenAiModel};
use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn full_request() -> ModelRequest {
    let weather_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "day": {"type": "string", "enum": ["today", "tomorrow"]}},
        "required": ["city"]
    });
    ModelRequest {
        model: "openai/gpt-4o-mini".into(),
        instructions: Some("You are a weather assistant. Use the tools.".into()),
        context: vec![Item::developer(
            "<steering_feedback>\n[ask-first] Confirm the city before calling tools.\n</steering_feedback>",
        )],
        history: History::new(vec![
            Item::user("What's the weather in Paris and Lyon?"),
            Item::assistant("Checking both cities."),
            Item::ToolCall(ToolCall {
                id: "call_paris".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            }),
            Item::ToolCall(ToolCall {
                id: "call_lyon".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Lyon"}"#.into(),
            }),
            Item::ToolResult(ToolResult::ok("call_paris", r#"{"temp_c":18,"sky":"sunny"}"#)),
            Item::ToolResult(ToolResult::error("call_lyon", "Steering denied: Lyon is out of scope.")),
            Item::assistant("Paris: 18 °C and sunny. I can't look up Lyon."),
            Item::user("And tomorrow in Paris?"),
        ]),
        tail: vec![Item::developer("Answer with the summary object.")],
        tools: Arc::from(vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "Current weather for a city.".into(),
                parameters: weather_schema.into(),
            },
            ToolSpec {
                name: "get_time".into(),
                description: "Local time in a time zone.".into(),
                parameters: json!({"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
                    .into(),
            },
        ]),
        params: ModelParams {
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_tokens: Some(256),
            stop_sequences: vec!["\n\nUser:".into(), "</answer>".into()],
        },
        tool_choice: Some(ToolChoice::Required),
        output_schema: Some(json!({
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"]
        })),
        grammar: None,
        step: None,
    }
}

async fn server_answering(body: &str, mime: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body.to_owned(), mime))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn the_exact_request_body_is_sent_for_a_full_request() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    model_for(&server).call(full_request()).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].headers.get("content-type").unwrap(), "application/json");
    assert_eq!(requests[0].body_json::<serde_json::Value>().unwrap(), fixture_json("request_full.json"));
}

#[tokio::test]
async fn a_streaming_request_sends_the_same_body_plus_stream_and_usage_options() {
    let server = server_answering(&fixture("stream_text.sse"), "text/event-stream").await;
    collect(&model_for(&server), full_request()).await;
    let mut expected = fixture_json("request_full.json");
    expected["stream"] = json!(true);
    expected["stream_options"] = json!({"include_usage": true});
    assert_eq!(received_bodies(&server).await, vec![expected]);
}

#[tokio::test]
async fn a_grammar_is_sent_only_to_servers_configured_to_take_one() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    let mut request = user_request("Verdict?");
    request.grammar = Some(noetic::steering::VERDICT_GRAMMAR.to_owned());
    let plain = model_for(&server);
    assert_eq!(plain.capabilities(), Capabilities::default());
    plain.call(request.clone()).await.unwrap();
    let llama = OpenAiModel::new(OpenAiConfig::llama_cpp(format!("{}/v1", server.uri()))).unwrap();
    assert_eq!(llama.capabilities(), Capabilities { grammar: true, json_schema: true });
    llama.call(request.clone()).await.unwrap();
    let _ = collect(&llama, request).await;
    let bodies = received_bodies(&server).await;
    assert_eq!(bodies.len(), 3);
    assert!(bodies[0].get("grammar").is_none(), "OpenAI's API rejects unknown fields: {}", bodies[0]);
    assert_eq!(bodies[1]["grammar"], json!(noetic::steering::VERDICT_GRAMMAR));
    assert_eq!(bodies[2]["grammar"], json!(noetic::steering::VERDICT_GRAMMAR));
    assert_eq!(bodies[2]["stream"], json!(true));
}

#[tokio::test]
async fn a_named_tool_choice_is_narrowed_to_required_over_that_tool_only_where_configured() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    let mut request = full_request();
    request.tool_choice = Some(ToolChoice::Named("get_time".into()));
    model_for(&server).call(request.clone()).await.unwrap();
    let llama = OpenAiModel::new(OpenAiConfig::llama_cpp(format!("{}/v1", server.uri()))).unwrap();
    llama.call(request.clone()).await.unwrap();
    // A name that is not offered is passed through for the server to reject.
    request.tool_choice = Some(ToolChoice::Named("missing".into()));
    llama.call(request).await.unwrap();
    let bodies = received_bodies(&server).await;
    assert_eq!(bodies[0]["tool_choice"], json!({"type": "function", "function": {"name": "get_time"}}));
    assert_eq!(bodies[0]["tools"].as_array().unwrap().len(), 2);
    assert_eq!(bodies[1]["tool_choice"], json!("required"));
    let names: Vec<_> = bodies[1]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].clone()).collect();
    assert_eq!(names, [json!("get_time")]);
    assert_eq!(bodies[2]["tool_choice"], json!({"type": "function", "function": {"name": "missing"}}));
    assert_eq!(bodies[2]["tools"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn late_system_messages_become_user_messages_only_where_configured() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    model_for(&server).call(full_request()).await.unwrap();
    OpenAiModel::new(config_for(&server.uri()).late_system_as_user(true)).unwrap().call(full_request()).await.unwrap();
    let bodies = received_bodies(&server).await;
    let roles = |body: &serde_json::Value| -> Vec<String> {
        body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(roles(&bodies[0]).iter().filter(|r| *r == "system").count(), 3, "{}", bodies[0]);
    assert_eq!(roles(&bodies[1]).iter().filter(|r| *r == "system").count(), 1, "{}", bodies[1]);
    assert_eq!(roles(&bodies[1])[0], "system", "the leading system message stays");
    let demoted: Vec<_> = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["content"].as_str().is_some_and(|c| c.starts_with("[system] ")))
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        demoted,
        [
            "[system] <steering_feedback>\n[ask-first] Confirm the city before calling tools.\n</steering_feedback>",
            "[system] Answer with the summary object."
        ]
    );
}

/// Recorded from llama.cpp's server (xllamacpp 0.2.14, SmolLM2-135M, `tool_choice: required`): `content` is `""`
/// (not `null`) beside the calls, ids are random 32-character strings, and `timings` rides along.
#[tokio::test]
async fn a_recorded_llama_cpp_tool_call_is_parsed_without_an_empty_text_item() {
    let server = server_answering(&fixture("llama_cpp_tool_call.json"), "application/json").await;
    let response = model_for(&server).call(user_request("Weather in Paris?")).await.unwrap();
    assert_eq!(
        response.items,
        vec![Item::ToolCall(ToolCall {
            id: "KOhShtqToIbYDh2zWPwL9Yr6QuiyjAFF".into(),
            name: "get_weather".into(),
            arguments: r#"{"city": "Paris"}"#.into(),
        })]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (173, 32));
}

/// Recorded from the same server, streaming: a first chunk with `content: null`, the call's id and name with its
/// first argument piece, eight argument pieces, then usage in a chunk with no choices, then `[DONE]`.
#[tokio::test]
async fn a_recorded_llama_cpp_stream_assembles_the_same_call() {
    let server = server_answering(&fixture("llama_cpp_stream_tool_call.sse"), "text/event-stream").await;
    let deltas = collect(&model_for(&server), user_request("Weather in Paris?")).await;
    let pieces: Vec<_> = deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCall { .. })).collect();
    assert_eq!(pieces.len(), 8, "{deltas:?}");
    assert!(!deltas.iter().any(|d| matches!(d, StreamDelta::Text { .. })), "no empty text deltas: {deltas:?}");
    let response = done(&deltas);
    let calls: Vec<_> = response.tool_calls_iter().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(&*calls[0].name, "get_weather");
    assert_eq!(&*calls[0].arguments, r#"{"city": "Paris"}"#);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (173, 32));
}

#[tokio::test]
async fn a_text_response_is_parsed() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    let response = model_for(&server).call(user_request("Capital of France?")).await.unwrap();
    assert_eq!(
        response,
        ModelResponse {
            items: vec![Item::assistant("The capital of France is Paris.")],
            usage: Usage { input_tokens: 19, output_tokens: 8, cached_tokens: 0, cost: None },
            finish_reason: FinishReason::Stop,
            refusal: None,
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }
    );
}

#[tokio::test]
async fn a_tool_call_response_is_parsed_with_usage_and_cached_tokens() {
    let server = server_answering(&fixture("chat_tool_calls.json"), "application/json").await;
    let response = model_for(&server).call(user_request("Weather in Paris and Tokyo?")).await.unwrap();
    let call = |id: &str, city: &str| {
        Item::ToolCall(ToolCall {
            id: id.into(),
            name: "get_weather".into(),
            arguments: format!(r#"{{"city":"{city}","unit":"celsius"}}"#).into(),
        })
    };
    assert_eq!(
        response,
        ModelResponse {
            items: vec![call("call_9sCfCbBQtDvZxRpD6fD8kcbO", "Paris"), call("call_Zq2TXbyMBLBVBJ0HSYjZ5Qsk", "Tokyo")],
            usage: Usage { input_tokens: 1312, output_tokens: 52, cached_tokens: 1024, cost: None },
            finish_reason: FinishReason::ToolCalls,
            refusal: None,
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }
    );
}

#[tokio::test]
async fn an_openrouter_response_carries_its_cost_and_the_model_id_is_sent_as_is() {
    let server = server_answering(&fixture("openrouter_cost.json"), "application/json").await;
    let response = model_for(&server).call(user_request("Say hello in French.")).await.unwrap();
    assert_eq!(response.text_output(), "Bonjour ! Comment puis-je vous aider aujourd'hui ?");
    assert_eq!(response.usage, Usage { input_tokens: 14, output_tokens: 12, cached_tokens: 0, cost: Some(0.0000093) });
    assert_eq!(received_bodies(&server).await[0]["model"], "openai/gpt-4o-mini");
}

#[tokio::test]
async fn a_streamed_text_response_yields_text_deltas_then_the_assembled_response() {
    let server = server_answering(&fixture("stream_text.sse"), "text/event-stream").await;
    let deltas = collect(&model_for(&server), user_request("Capital of France?")).await;
    let texts: Vec<_> = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec!["Paris", " — the café", " capital ☀️."]);
    assert_eq!(
        done(&deltas),
        ModelResponse {
            items: vec![Item::assistant("Paris — the café capital ☀️.")],
            usage: Usage { input_tokens: 19, output_tokens: 9, cached_tokens: 0, cost: None },
            finish_reason: FinishReason::Stop,
            refusal: None,
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }
    );
}

#[tokio::test]
async fn streamed_tool_calls_are_assembled_from_pieces_with_usage_from_the_last_chunk() {
    let server = server_answering(&fixture("stream_tool_calls.sse"), "text/event-stream").await;
    let deltas = collect(&model_for(&server), user_request("Weather and time in Paris?")).await;
    let first_pieces: Vec<_> = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolCall { index, id: Some(id), name, .. } => Some((*index, id.clone(), name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        first_pieces,
        vec![
            (0, "call_DdmO9pD3xa9XTPNJ32zg2hcA".to_owned(), Some("get_weather".to_owned())),
            (1, "call_5SGbaxE5ZeyZMM0XjR1G7Q2v".to_owned(), Some("get_time".to_owned())),
        ],
        "id and name come once, on the first piece of each call"
    );
    assert_eq!(
        done(&deltas),
        ModelResponse {
            items: vec![
                Item::ToolCall(ToolCall {
                    id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                }),
                Item::ToolCall(ToolCall {
                    id: "call_5SGbaxE5ZeyZMM0XjR1G7Q2v".into(),
                    name: "get_time".into(),
                    arguments: r#"{"zone":"Europe/Paris"}"#.into(),
                }),
            ],
            usage: Usage { input_tokens: 1340, output_tokens: 48, cached_tokens: 1152, cost: None },
            finish_reason: FinishReason::ToolCalls,
            refusal: None,
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }
    );
}

#[tokio::test]
async fn a_streamed_openrouter_response_skips_comments_and_carries_its_cost() {
    let server = server_answering(&fixture("stream_openrouter_cost.sse"), "text/event-stream").await;
    let response = done(&collect(&model_for(&server), user_request("Say hello in French.")).await);
    assert_eq!(response.text_output(), "Bonjour !");
    assert_eq!(response.usage, Usage { input_tokens: 14, output_tokens: 3, cached_tokens: 0, cost: Some(0.0000039) });
    assert_eq!(response.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_still_streams_its_json_response() {
    let server = server_answering(&fixture("chat_tool_calls.json"), "application/json").await;
    let deltas = collect(&model_for(&server), user_request("Weather?")).await;
    assert_eq!(deltas.len(), 3, "two tool-call deltas, then Done");
    assert_eq!(done(&deltas).tool_calls_iter().count(), 2);
}

#[tokio::test]
async fn the_authorization_header_is_sent_only_when_a_key_is_set() {
    let server = server_answering(&fixture("chat_text.json"), "application/json").await;
    let with_key = OpenAiModel::new(config_for(&server.uri()).api_key("sk-abc")).unwrap();
    let without_key = OpenAiModel::new(config_for(&server.uri()).no_api_key()).unwrap();
    with_key.call(user_request("hi")).await.unwrap();
    without_key.call(user_request("hi")).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests[0].headers.get("authorization").unwrap(), "Bearer sk-abc");
    assert!(requests[1].headers.get("authorization").is_none());
}

#[tokio::test]
async fn extra_headers_such_as_openrouter_attribution_are_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("HTTP-Referer", "https://example.com/app"))
        .and(header("X-Title", "noetic tests"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(fixture("chat_text.json"), "application/json"))
        .expect(1)
        .mount(&server)
        .await;
    let config =
        config_for(&server.uri()).header("HTTP-Referer", "https://example.com/app").header("X-Title", "noetic tests");
    let response = OpenAiModel::new(config).unwrap().call(user_request("hi")).await.unwrap();
    assert_eq!(response.text_output(), "The capital of France is Paris.");
}
