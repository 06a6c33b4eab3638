//! Prints runtime events as readable lines, coloured when stdout is a terminal. Text a model wrote (tool names
//! and arguments, call ids, outputs, guidance) is escaped first: it must not be able to drive the terminal.

use std::io::IsTerminal;

use noetic::EventKind;
use noetic::steering::{Evaluator, LedgerEntry, LedgerKind, SteeringAction};
use serde_json::Value;

pub mod markdown;

/// How lines are styled.
#[derive(Clone, Copy)]
pub struct Style {
    colour: bool,
}

impl Style {
    /// Colours when stdout is a terminal and `NO_COLOR` is not set, unless `force_plain`.
    pub fn detect(force_plain: bool) -> Self {
        let colour = !force_plain && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Style { colour }
    }

    /// No colours.
    #[cfg(test)]
    pub const fn plain() -> Self {
        Style { colour: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }

    /// Dim text.
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Red text.
    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Green text.
    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Yellow text.
    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Cyan text.
    pub fn cyan(&self, text: &str) -> String {
        self.paint("36", text)
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }
}

/// How much of a model-written text is printed as it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing that could hide or reorder text: for approvals, where the person must see exactly what runs.
    Nothing,
    /// Line breaks, tabs, backslashes and invisible joiners (emoji, scripts need them): for transcripts.
    Layout,
}

/// Whether `c` can move the cursor, rewrite the screen, reorder the text around it or hide itself.
fn hides(c: char, keep: Keep) -> bool {
    match c {
        '\n' | '\t' => keep == Keep::Nothing,
        // C0 (with CR and ESC), DEL and C1 (8-bit CSI) controls; bidi marks, embeddings, overrides and isolates;
        // line and paragraph separators.
        _ if c.is_control() => true,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        '\u{2028}' | '\u{2029}' => true,
        // Zero-width and other invisible characters; tags (U+E0000–U+E007F) can carry a hidden text.
        '\u{00ad}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' => {
            keep == Keep::Nothing
        }
        '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e007f}' => keep == Keep::Nothing,
        _ => false,
    }
}

/// Escapes what `keep` does not keep, in JSON's notation (`\r`, `\u001b`, a surrogate pair above U+FFFF).
fn escape(text: &str, keep: Keep) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' if keep == Keep::Nothing => out.push_str("\\\\"),
            _ if !hides(c, keep) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out
}

/// Model-written text as it must appear in an approval question: every control, bidi and invisible character
/// (and each backslash, so an escape cannot be faked) shown as a JSON-style escape. What a person approves is
/// exactly what runs; a carriage return or an escape code cannot redraw the question.
pub fn visible(text: &str) -> String {
    escape(text, Keep::Nothing)
}

/// Whether [`visible`] shows `text` with escapes beyond backslashes, line breaks and tabs (worth a warning).
pub fn has_hidden(text: &str) -> bool {
    text.chars().any(|c| !matches!(c, '\\' | '\n' | '\t') && hides(c, Keep::Nothing))
}

/// Whether a string (or key) anywhere in `value` [`has_hidden`] characters.
pub fn json_has_hidden(value: &Value) -> bool {
    match value {
        Value::String(text) => has_hidden(text),
        Value::Array(items) => items.iter().any(json_has_hidden),
        Value::Object(map) => map.iter().any(|(key, item)| has_hidden(key) || json_has_hidden(item)),
        _ => false,
    }
}

/// JSON arguments as [`visible`] shows text: valid JSON meaning the same value, with every string escaped.
pub fn visible_json(value: &Value) -> String {
    fn string(text: &str, out: &mut String) {
        out.push('"');
        out.push_str(&visible(text).replace('"', "\\\""));
        out.push('"');
    }
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::String(text) => string(text, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    string(key, out);
                    out.push(':');
                    write(item, out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Model-written text for a transcript: lines, tabs and backslashes stay; controls (a carriage return, terminal
/// escape codes) and bidi characters are escaped, so printing it cannot rewrite the screen or reorder text.
pub fn printable(text: &str) -> String {
    escape(text, Keep::Layout)
}

/// `text` on one line, at most `max` characters, made [`printable`]: a longer text keeps its beginning and its
/// end (where paths, errors and conclusions tend to be) and loses its middle, cut between words when there are
/// spaces in the part kept (a word is never cut in two unless the part has no space at all).
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    let chars: Vec<char> = one_line.chars().collect();
    if chars.len() <= max {
        return printable(&one_line);
    }
    let keep = max.saturating_sub(1);
    let (head_len, tail_len) = (keep - keep / 3, keep / 3);
    let mut head: String = chars[..head_len].iter().collect();
    let mut tail: String = chars[chars.len() - tail_len..].iter().collect();
    // Cut where a word ends (the head) or starts (the tail), unless the text there already is a word boundary.
    if chars[head_len] != ' '
        && let Some(cut) = head.rfind(' ')
    {
        head.truncate(cut);
    }
    if chars[chars.len() - tail_len - 1] != ' '
        && let Some(cut) = tail.find(' ')
    {
        tail = tail[cut + 1..].to_owned();
    }
    format!("{}…{}", printable(head.trim_end()), printable(tail.trim_start()))
}

/// A call id as the transcript shows it: its first 6 characters, enough to tell the calls of a turn apart (the
/// provider's ids are often 30 characters or more); `--json` keeps the whole id.
pub fn short_id(call_id: &str) -> String {
    printable(&call_id.chars().take(6).collect::<String>())
}

/// How much of a tool's output a transcript line shows; an error gets more room, it says what to do.
const OUTPUT_SHOWN: usize = 90;
const ERROR_SHOWN: usize = 240;

/// The line for an event, or `None` for events not worth a line.
pub fn event_line(style: &Style, kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::TurnStarted { session, turn } => style.bold(&format!("▶ turn {turn} of session '{session}'")),
        EventKind::TurnCompleted { duration, .. } => style.bold(&format!("■ turn done in {} ms", duration.as_millis())),
        // A stop is the user's doing (Esc, /stop, Ctrl-C): said as such, not as a failure.
        EventKind::TurnFailed { error: noetic::NoeticError::Cancelled { reason }, .. } => {
            let why = reason.as_deref().map(|r| format!(" ({})", printable(r))).unwrap_or_default();
            style.yellow(&format!("■ turn stopped{why}"))
        }
        EventKind::TurnFailed { error, .. } => style.red(&format!("■ turn failed: {}", printable(&error.to_string()))),
        EventKind::StepStarted { step_id, kind } if kind.as_str() == "fork" => {
            style.cyan(&format!("  fork  {step_id}: paths start"))
        }
        EventKind::StepCompleted { step_id, kind } if matches!(kind.as_str(), "fork" | "run") => {
            style.dim(&format!("  step  {kind} {step_id} done"))
        }
        EventKind::ModelCallStarted { round, messages, tools, .. } => {
            style.dim(&format!("  model call (round {}, {messages} messages, {tools} tools)", round + 1))
        }
        EventKind::ModelCallCompleted { tool_calls, .. } => {
            style.dim(&format!("  model answered with {tool_calls} tool call(s)"))
        }
        EventKind::ContextCompacted { folded, tokens_before, tokens_after, summarized, .. } => {
            let how = if *summarized { "summarised" } else { "left out" };
            style.cyan(&format!(
                "  context compacted: {folded} older message(s) {how} ({} → {} tokens)",
                tokens_short(*tokens_before),
                tokens_short(*tokens_after)
            ))
        }
        EventKind::ToolCallStarted { call_id, tool, .. } => {
            format!("  tool  {} [{}] …", printable(tool), short_id(call_id))
        }
        EventKind::ToolCallCompleted { call_id, tool, is_error, output, .. } => {
            let room = if *is_error { ERROR_SHOWN } else { OUTPUT_SHOWN };
            let line = format!("  tool  {} [{}] → {}", printable(tool), short_id(call_id), shorten(output, room));
            if *is_error { style.yellow(&line) } else { style.green(&line) }
        }
        EventKind::SteeringDenied { call_id, tool, layers, action, error } => {
            let (tool, call_id) = (printable(tool), short_id(call_id));
            let guidance = match error {
                noetic::NoeticError::SteeringDenied { guidance: Some(g) } => format!(": {}", shorten(g, 200)),
                _ => String::new(),
            };
            let layers = layers.join(",");
            if *action == SteeringAction::Guide {
                style.yellow(&format!("  rule  guided {tool} [{call_id}] (layer {layers}){guidance}"))
            } else {
                style.red(&format!("  rule  denied {tool} [{call_id}] (layer {layers}){guidance}"))
            }
        }
        EventKind::ToolCallRewritten { call_id, tool, layer, arguments, reason } => {
            let (tool, call_id, layer) = (printable(tool), short_id(call_id), printable(layer));
            let arguments = shorten(arguments, 120);
            style.yellow(&format!(
                "  rule  rewrote {tool} [{call_id}] (layer {layer}) to {arguments}: {}",
                shorten(reason, 200)
            ))
        }
        EventKind::ModelResponseSteered { action, guidance, .. } => {
            let guidance = printable(guidance.as_deref().unwrap_or(""));
            style.yellow(&format!("  rule  {action:?} on the model's response: {guidance}"))
        }
        EventKind::SteeringQueued { .. } => style.cyan("  steer message queued"),
        EventKind::SteeringRejected { reason, .. } => style.red(&format!("  steer refused: {}", printable(reason))),
        EventKind::ToolSkipped { call_id, .. } => {
            style.yellow(&format!("  skip  [{}] (a user message is waiting)", short_id(call_id)))
        }
        EventKind::SteeringInjected { count, .. } => {
            style.cyan(&format!("  steer {count} message(s) handed to the model"))
        }
        _ => return None,
    })
}

/// A token count as the context meter shows it: `850`, `12.3k`, `128k`.
pub fn tokens_short(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=99_999 if !n.is_multiple_of(1_000) => format!("{:.1}k", n as f64 / 1_000.0),
        _ => format!("{}k", (n + 500) / 1_000),
    }
}

/// An entry that says only that a model answer passed every rule: the bulk of any ledger, shown on request.
pub fn is_routine(entry: &LedgerEntry) -> bool {
    entry.kind == LedgerKind::ModelTurn && entry.action == SteeringAction::Allow && !entry.disagrees()
}

/// The line that stands for the routine entries left out of a ledger view.
pub fn routine_left_out(count: usize, how: &str) -> Option<String> {
    (count > 0).then(|| format!("  ({count} model answer(s) passed every rule; {how} shows them)"))
}

/// How a deciding rule evaluated, in words.
fn evaluator_name(evaluator: Evaluator) -> &'static str {
    match evaluator {
        Evaluator::Predicate => "predicate",
        Evaluator::LlmSync => "LLM judge",
        Evaluator::LlmAsync => "async LLM judge",
    }
}

/// An action as the ledger shows it, coloured.
fn action_word(style: &Style, action: SteeringAction) -> String {
    let word = format!("{action:?}").to_uppercase();
    match action {
        SteeringAction::Allow => style.green(&word),
        SteeringAction::Guide => style.yellow(&word),
        SteeringAction::Deny => style.red(&word),
    }
}

/// A ledger entry on one line. A shadow rule's would-be decision names no call (it follows the live entry of
/// the same call) and says whether it differs from the live decision.
pub fn ledger_line(style: &Style, entry: &LedgerEntry) -> String {
    let what = match entry.kind {
        LedgerKind::ToolCall => {
            let tool = printable(entry.tool_name.as_deref().unwrap_or("?"));
            match &entry.tool_args {
                Some(args) => format!("tool {tool} {}", shorten(&visible_json(args), 50)),
                None => format!("tool {tool}"),
            }
        }
        LedgerKind::ModelTurn => {
            format!("model turn ({} tokens out)", entry.usage.map(|u| u.output_tokens).unwrap_or_default())
        }
        LedgerKind::Custom => match entry.outcome {
            Some(outcome) => format!("execution ended: {outcome:?}"),
            None => format!("async verdict of {}", printable(entry.rule_id.as_deref().unwrap_or("?"))),
        },
    };
    let (what, action) = match &entry.rewritten_args {
        Some(after) => (format!("{what} to {}", shorten(&visible_json(after), 50)), style.yellow("REWRITE")),
        None => (what, action_word(style, entry.action)),
    };
    let by = match (entry.rule_id.as_deref(), entry.evaluator) {
        (Some(rule), Some(evaluator)) => format!(" by {} ({})", printable(rule), evaluator_name(evaluator)),
        (Some(rule), None) => format!(" by {}", printable(rule)),
        // Every rule that looked allowed it (or none applies); an execution's end is no decision.
        (None, _) if entry.outcome.is_none() && entry.action == SteeringAction::Allow => {
            " (no rule objected)".to_owned()
        }
        (None, _) => String::new(),
    };
    let by = if entry.escalated { format!("{by} (escalated)") } else { by };
    let why = entry.guidance.as_deref().map(|g| format!(": {}", shorten(g, 60))).unwrap_or_default();
    if let Some(shadow) = entry.shadow {
        let live = action_word(style, shadow.live);
        let side = if entry.disagrees() { style.bold(&format!(" ≠ live {live}")) } else { format!(" = live {live}") };
        return format!("    {} {action:<7}{by}{why} {}", style.dim("shadow"), side.trim_start());
    }
    format!("  {action:<7} {what}{by}{why}")
}

#[cfg(test)]
mod tests;
