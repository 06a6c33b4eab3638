//! Prints runtime events as readable lines, coloured when stdout is a terminal.

use std::io::IsTerminal;

use noetic::EventKind;
use noetic::steering::{LedgerEntry, LedgerKind, SteeringAction};

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

fn shorten(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// The line for an event, or `None` for events not worth a line.
pub fn event_line(style: &Style, kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::TurnStarted { session, turn } => style.bold(&format!("▶ turn {turn} of session '{session}'")),
        EventKind::TurnCompleted { duration, .. } => style.bold(&format!("■ turn done in {} ms", duration.as_millis())),
        EventKind::TurnFailed { error, .. } => style.red(&format!("■ turn failed: {error}")),
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
        EventKind::ToolCallStarted { call_id, tool } => format!("  tool  {tool} [{call_id}] …"),
        EventKind::ToolCallCompleted { call_id, tool, is_error, output } => {
            let line = format!("  tool  {tool} [{call_id}] → {}", shorten(output, 90));
            if *is_error { style.yellow(&line) } else { style.green(&line) }
        }
        EventKind::SteeringDenied { call_id, tool, layers, .. } => {
            style.red(&format!("  rule  stopped {tool} [{call_id}] (layer {})", layers.join(",")))
        }
        EventKind::ModelResponseSteered { action, guidance, .. } => {
            style.yellow(&format!("  rule  {action:?} on the model's response: {}", guidance.as_deref().unwrap_or("")))
        }
        EventKind::SteeringQueued { .. } => style.cyan("  steer message queued"),
        EventKind::SteeringRejected { reason, .. } => style.red(&format!("  steer refused: {reason}")),
        EventKind::ToolSkipped { call_id, .. } => {
            style.yellow(&format!("  skip  [{call_id}] (a user message is waiting)"))
        }
        EventKind::SteeringInjected { count, .. } => {
            style.cyan(&format!("  steer {count} message(s) handed to the model"))
        }
        _ => return None,
    })
}

/// A ledger entry on one line.
pub fn ledger_line(style: &Style, entry: &LedgerEntry) -> String {
    let what = match entry.kind {
        LedgerKind::ToolCall => format!(
            "tool {} {}",
            entry.tool_name.as_deref().unwrap_or("?"),
            entry.tool_args.as_ref().map(|a| shorten(&a.to_string(), 50)).unwrap_or_default()
        ),
        LedgerKind::ModelTurn => {
            format!("model turn ({} tokens out)", entry.usage.map(|u| u.output_tokens).unwrap_or_default())
        }
        LedgerKind::Custom => match entry.outcome {
            Some(outcome) => format!("execution ended: {outcome:?}"),
            None => format!("async verdict of {}", entry.rule_id.as_deref().unwrap_or("?")),
        },
    };
    let action = format!("{:?}", entry.action).to_uppercase();
    let action = match entry.action {
        SteeringAction::Allow => style.green(&action),
        SteeringAction::Guide => style.yellow(&action),
        SteeringAction::Deny => style.red(&action),
    };
    let by = entry.rule_id.as_deref().map(|r| format!(" by {r}")).unwrap_or_default();
    let why = entry.guidance.as_deref().map(|g| format!(": {}", shorten(g, 60))).unwrap_or_default();
    format!("  {action:<7} {what}{by}{why}")
}
