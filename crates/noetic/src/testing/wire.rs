//! What the providers' wire tests share: the request shapes and tools they encode, the first tool round of their
//! conversations, a body's fingerprint, the check of every body against a committed fixture of fingerprints, the
//! histories of a log growing item by item, and the check that growing requests hand on the bytes earlier requests
//! encoded. Each provider adds the items and fields its own wire rules need.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::Context;
use crate::model::{History, Item, ModelParams, ModelRequest, ToolCall, ToolChoice, ToolResult, ToolSpec};

/// The variable that, when set, makes [`check_fixture`] write the fixture anew (only for a deliberate change of the
/// wire format) before comparing.
pub const BLESS_WIRE: &str = "NOETIC_BLESS_WIRE";

/// How many chunks a request body may hold, however long its history: about log2 of the requests that grew it.
pub const MAX_CHUNKS: usize = 14;

/// The request shapes a wire test encodes, for `model` and `history`:
/// - 0: bare;
/// - 1: instructions (with a line break and quotes), the three [`tools`], tool choice `Auto`;
/// - 2: shape 1 with context (a developer and a system item), a tail, the tool choice `search`, every sampling
///   parameter and an output schema;
/// - 3: shape 2 with edge values: empty instructions, no tools, a NaN temperature.
///
/// ```
/// use noetic::model::History;
/// let request = noetic::testing::wire::request_shape(2, "m", History::default());
/// assert_eq!(request.tools.len(), 3);
/// assert_eq!(request.params.max_tokens, Some(256));
/// ```
pub fn request_shape(shape: usize, model: &str, history: History) -> ModelRequest {
    let mut request = ModelRequest { model: model.into(), history, ..ModelRequest::default() };
    if shape >= 1 {
        request.instructions = Some("You are a careful agent.\nNever touch \"/etc\".".into());
        request.tools = tools();
        request.tool_choice = Some(ToolChoice::Auto);
    }
    if shape >= 2 {
        request.context = vec![Item::developer("memory: the user is Ada"), Item::system("context system")];
        request.tail = vec![Item::developer("correction: shorter")];
        request.tool_choice = Some(ToolChoice::Named("search".into()));
        request.params = ModelParams {
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_tokens: Some(256),
            stop_sequences: vec!["\n\nUser:".into(), "</answer>".into()],
        };
        request.output_schema = Some(json!({"type": "object", "properties": {"summary": {"type": "string"}}}));
    }
    if shape == 3 {
        request.instructions = Some("".into());
        request.params.temperature = Some(f32::NAN);
        request.tools = Arc::from(Vec::new());
    }
    request
}

/// The tools of [`request_shape`]: `search` (a description that needs escaping, a schema with nested properties
/// and numbers), `other` (no description, no parameters) and `plot`.
pub fn tools() -> Arc<[ToolSpec]> {
    Arc::from(vec![
        ToolSpec {
            name: "search".into(),
            description: "Searches the workspace for \"text\".".into(),
            parameters: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to find"},
                               "path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 1e3}},
                "required": ["query"], "additionalProperties": false
            })
            .into(),
        },
        ToolSpec { name: "other".into(), description: String::new(), parameters: serde_json::Value::Null.into() },
        ToolSpec { name: "plot".into(), description: "Plots.".into(), parameters: json!({"type": "object"}).into() },
    ])
}

/// The round a wire test's conversation starts with: a user message with text that needs escaping (quotes,
/// non-ASCII, an emoji, a backslash, a tab, control characters, `</script>`), a text answer, two `search` calls (the
/// second with empty arguments) and their results, the second an error.
pub fn first_tool_round() -> Vec<Item> {
    let call = |id: &str, arguments: &str| {
        Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: arguments.into() })
    };
    vec![
        Item::user("Find \"retry\" in src/ — naïve? \u{1F600} \\ back\tslash \u{1}\u{1f} </script>"),
        Item::assistant("Let me look."),
        call("c1", r#"{"query": "retry", "path":"src/lib.rs"}"#),
        call("c2", ""),
        Item::ToolResult(ToolResult::ok("c1", "src/config.rs:42: retry = RetryPolicy::new(3, ...)\n")),
        Item::ToolResult(ToolResult::error("c2", "arguments are not JSON")),
    ]
}

/// The round a wire test's conversation ends with: calls `c4` and `c5` to the two other [`tools`] (`other` with an
/// array as its arguments, `plot`), their results (`c5`'s is `plot`, the provider's own rich result for that id),
/// and a final answer with non-ASCII text.
pub fn last_tool_round(plot: ToolResult) -> Vec<Item> {
    let call = |id: &str, name: &str, arguments: &str| {
        Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() })
    };
    vec![
        call("c4", "other", "[1, 2]"),
        call("c5", "plot", "{}"),
        Item::ToolResult(ToolResult::ok("c4", "ok")),
        Item::ToolResult(plot),
        Item::assistant("done: ünïcödé"),
    ]
}

/// A wire check that failed, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireFailure(pub String);

/// A body's length and 64-bit FNV-1a hash, as a fixture line holds it (`"<length> <hash as 16 hex digits>"`).
///
/// ```
/// assert_eq!(noetic::testing::wire::fingerprint(b"a"), "1 af63dc4c8601ec8c");
/// ```
pub fn fingerprint(body: &[u8]) -> String {
    let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    format!("{} {hash:016x}", body.len())
}

/// Compares the [`fingerprint`] of each of `bodies` with the line of the same number in the committed fixture at
/// `path`, and the count of both; with [`BLESS_WIRE`] set, writes the fixture from `bodies` first. The failure
/// names the first body that differs (by its number, from 1) and shows it.
pub fn check_fixture(path: &Path, bodies: &[impl AsRef<[u8]>]) -> Result<(), WireFailure> {
    let made: Vec<String> = bodies.iter().map(|b| fingerprint(b.as_ref())).collect();
    let shown = path.display();
    if std::env::var_os(BLESS_WIRE).is_some() {
        std::fs::write(path, made.join("\n") + "\n")
            .map_err(|e| WireFailure(format!("cannot write the fixture {shown}: {e}")))?;
    }
    let committed =
        std::fs::read_to_string(path).map_err(|e| WireFailure(format!("cannot read the fixture {shown}: {e}")))?;
    for (line, (made, expected)) in made.iter().zip(committed.lines()).enumerate() {
        if made != expected {
            return Err(WireFailure(format!(
                "body {} of the matrix differs from the committed one ({made}, not {expected}): {}",
                line + 1,
                String::from_utf8_lossy(bodies[line].as_ref())
            )));
        }
    }
    let (made, committed) = (made.len(), committed.lines().count());
    if made == committed {
        Ok(())
    } else {
        Err(WireFailure(format!("{made} bodies were made, the fixture {shown} holds {committed}")))
    }
}

/// The JSON value a body's chunks hold together (a provider's body is its chunks, in order).
///
/// ```
/// let value = noetic::testing::wire::json_of(&[&b"{\"a\":"[..], &b"1}"[..]])?;
/// assert_eq!(value, serde_json::json!({"a": 1}));
/// # Ok::<(), noetic::testing::wire::WireFailure>(())
/// ```
pub fn json_of<C: AsRef<[u8]>>(chunks: &[C]) -> Result<serde_json::Value, WireFailure> {
    let body: Vec<u8> = chunks.iter().flat_map(|c| c.as_ref().iter().copied()).collect();
    serde_json::from_slice(&body)
        .map_err(|e| WireFailure(format!("the body is not JSON ({e}): {}", String::from_utf8_lossy(&body))))
}

/// The histories a session's requests carry while its log grows by `items`, one at a time: after each item, a
/// snapshot of the same log (so a provider's cache of that log is reused from request to request).
///
/// Take each history, encode it and drop it before taking the next, as a session drops its requests: a snapshot
/// still alive when the next item is pushed makes the log copy itself, and the copy is another log.
pub fn growing_histories(items: Vec<Item>) -> impl Iterator<Item = History> {
    histories(items, false)
}

/// [`growing_histories`], then the whole log once more (a new turn starting from it), then a copy of it in a new
/// log: what a provider's request cache must encode alike whether it reuses its bytes or not.
pub fn growing_then_again_and_copied(items: Vec<Item>) -> impl Iterator<Item = History> {
    histories(items, true)
}

fn histories(items: Vec<Item>, again_and_copied: bool) -> impl Iterator<Item = History> {
    let ctx = Context::new();
    let mut next = 0;
    std::iter::from_fn(move || {
        let history = match items.get(next) {
            Some(item) => {
                ctx.push_item(item.clone());
                ctx.history()
            }
            None if again_and_copied && next == items.len() => ctx.history(),
            None if again_and_copied && next == items.len() + 1 => History::new(items.clone()),
            None => return None,
        };
        next += 1;
        Some(history)
    })
}

/// Checks that requests over a log growing by a tool call and its result per round (300 rounds, each round about
/// 700 bytes) hand on the bytes earlier requests encoded instead of copying them. `encode` makes the provider's
/// request body for a history and returns its chunks. Each body must start and end with the very chunks (the same
/// memory) of the one before (the head and the suffix are encoded once), hold at most [`MAX_CHUNKS`] chunks, and all
/// the bodies together must newly write less than 12 times the last body's bytes (copying the history into every
/// body would write about 150 times), while holding more than 100 times them.
pub fn check_chunk_sharing<C: AsRef<[u8]>>(mut encode: impl FnMut(History) -> Vec<C>) -> Result<(), WireFailure> {
    let rounds = 300;
    let ctx = Context::new();
    ctx.push_item(Item::user("find the retry policy"));
    let (mut earlier, mut written, mut sizes) = (None::<Vec<C>>, 0, 0);
    for round in 0..rounds {
        let args = format!(r#"{{"query":"retry","context":"{}"}}"#, "x".repeat(300));
        let id: Arc<str> = format!("c{round}").into();
        ctx.push_item(Item::ToolCall(ToolCall::new(id.clone(), "search", args)));
        ctx.push_item(Item::ToolResult(ToolResult::ok(id, "y".repeat(350))));
        let body = encode(ctx.history());
        if let Some(earlier) = &earlier {
            if !same_memory(body.first(), earlier.first()) {
                return Err(WireFailure(format!("round {round}: the head was encoded again")));
            }
            if !same_memory(body.last(), earlier.last()) {
                return Err(WireFailure(format!("round {round}: the suffix was encoded again")));
            }
            written += new_bytes(&body, earlier);
        }
        if body.len() > MAX_CHUNKS {
            return Err(WireFailure(format!("round {round}: {} chunks", body.len())));
        }
        sizes += length(&body);
        earlier = Some(body);
    }
    let last = earlier.as_deref().map_or(0, length);
    if written >= 12 * last {
        return Err(WireFailure(format!(
            "{written} bytes written over {rounds} requests, the last body is {last} bytes"
        )));
    }
    if sizes <= 100 * last {
        return Err(WireFailure(format!("the bodies themselves hold {sizes} bytes, the last one {last}")));
    }
    Ok(())
}

/// True when both chunks start at the same address.
fn same_memory<C: AsRef<[u8]>>(a: Option<&C>, b: Option<&C>) -> bool {
    a.map(|a| a.as_ref().as_ptr()) == b.map(|b| b.as_ref().as_ptr())
}

/// The bytes `body` holds that `earlier` does not hold in the same memory: what this request newly wrote.
fn new_bytes<C: AsRef<[u8]>>(body: &[C], earlier: &[C]) -> usize {
    let shared = |c: &[u8]| earlier.iter().any(|e| e.as_ref().as_ptr() == c.as_ptr() && e.as_ref().len() == c.len());
    body.iter().map(AsRef::as_ref).filter(|c| !shared(c)).map(<[u8]>::len).sum()
}

/// The bytes of a body's chunks.
fn length<C: AsRef<[u8]>>(body: &[C]) -> usize {
    body.iter().map(|c| c.as_ref().len()).sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn the_growing_histories_share_one_log_and_the_copy_is_another() {
        let items = vec![Item::user("a"), Item::assistant("b")];
        let histories: Vec<(u64, usize)> =
            growing_then_again_and_copied(items).map(|h| (h.log_id(), h.len())).collect();
        let lengths: Vec<usize> = histories.iter().map(|(_, len)| *len).collect();
        assert_eq!(lengths, [1, 2, 2, 2]);
        assert!(histories[..3].iter().all(|(id, _)| *id == histories[0].0), "{histories:?}");
        assert_ne!(histories[3].0, histories[0].0, "the copy is a new log");
    }

    #[test]
    fn a_body_that_copies_its_history_every_time_fails_the_sharing_check() {
        let copied = check_chunk_sharing(|history| vec![vec![b'x'; 1000 * history.len()]]).unwrap_err();
        assert!(copied.0.contains("the head was encoded again"), "{copied}");
    }

    #[test]
    fn a_fixture_that_differs_names_the_body_and_a_missing_one_says_so() {
        let path = std::env::temp_dir().join(format!("noetic-wire-{}.txt", std::process::id()));
        std::fs::write(&path, format!("{}\n{}\n", fingerprint(b"one"), fingerprint(b"two"))).unwrap();
        assert_eq!(check_fixture(&path, &[b"one", b"two"]), Ok(()));
        let differs = check_fixture(&path, &[b"one", b"TWO"]).unwrap_err();
        assert!(differs.0.starts_with("body 2 of the matrix differs") && differs.0.ends_with(": TWO"), "{differs}");
        let short = check_fixture(&path, &[b"one"]).unwrap_err();
        assert!(short.0.contains("1 bodies were made"), "{short}");
        std::fs::remove_file(&path).unwrap();
        assert!(check_fixture(&path, &[b"one"]).unwrap_err().0.contains("cannot read the fixture"));
    }
}
