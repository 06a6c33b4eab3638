// The side pane: the timeline of every event, the calls waiting for approval, and the ledger of steering
// decisions and approvals.
import { $, el, short, errorText, callSummary, changeSummary } from "/dom.js";
import { approvalCard } from "/approval.js";

// ---- timeline ----

function line(event, cls, kind, detail, block) {
  const li = el("li", cls);
  li.dataset.type = event.type;
  li.appendChild(el("span", "seq", String(event.seq)));
  li.appendChild(el("span", "kind", kind));
  if (detail) li.appendChild(el("span", null, detail));
  if (block !== undefined && block !== null && block !== "") li.appendChild(el("pre", null, short(block, 4000)));
  const list = $("timeline");
  const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 20;
  list.appendChild(li);
  if (atEnd) list.scrollTop = list.scrollHeight;
}

function seconds(d) {
  return d ? `${d.secs}.${String(Math.floor(d.nanos / 1e6)).padStart(3, "0")} s` : "";
}

export function describe(e) {
  const call = (e.tool ? e.tool : "call") + (e.call_id ? ` (${e.call_id})` : "");
  switch (e.type) {
    case "turn_started": return line(e, "turn", "turn started", `#${e.turn}`);
    case "turn_completed": return line(e, "turn", "turn done", `#${e.turn} in ${seconds(e.duration)}`);
    case "turn_failed": return line(e, "error", "turn failed", `#${e.turn}`, errorText(e.error, e.error_text));
    case "model_call_started": return line(e, "model", "model call", `${e.model} · round ${e.round + 1} · ${e.messages} messages · ${e.tools} tools`);
    case "model_call_completed": return line(e, "model", "model answered", `${e.tool_calls} tool call(s) · ${e.usage && e.usage.output_tokens ? e.usage.output_tokens : 0} tokens out`);
    case "model_text_delta": case "step_started": case "step_completed": return undefined;
    case "tool_call_started": return line(e, "tool", "tool call", call, e.arguments);
    case "tool_call_completed": return line(e, e.is_error ? "error" : "tool", e.is_error ? "tool failed" : "tool result", `${call}${e.error_kind ? " · " + e.error_kind : ""}`, e.output);
    case "steering_denied": {
      const guide = e.action === "guide";
      const guidance = e.error && e.error.guidance ? e.error.guidance : errorText(e.error, e.error_text);
      return line(e, guide ? "guide" : "deny", guide ? "rule guided" : "rule denied", `${call} · ${(e.layers || []).join(", ")}`, guidance);
    }
    case "tool_call_rewritten": return line(e, "guide", "arguments rewritten", `${call} · ${e.layer}`, `${e.reason} → ${e.arguments}`);
    case "model_response_steered": return line(e, e.action === "deny" ? "deny" : "guide", "response " + e.action, "", e.guidance);
    case "steering_queued": return line(e, "queue", "steering queued", e.id);
    case "steering_rejected": return line(e, "deny", "steering refused", e.reason);
    case "steering_injected": return line(e, "queue", "steering injected", `${e.count} message(s) shown to the model`);
    case "tool_skipped": return line(e, "queue", "tool skipped", call, e.reason);
    case "context_compacted": {
      // Replayed from the log after a restart, a compaction's tokens are not known (they read 0).
      const tokens = e.tokens_before ? ` · ${e.tokens_before} → ${e.tokens_after} tokens` : "";
      const how = e.summarized ? "replaced by a summary" : "left out of requests";
      return line(e, "model", "context compacted", `${e.folded} earlier item(s) ${how}${tokens} · the conversation keeps them`);
    }
    case "budget_reached": return line(e, "deny", "budget reached", `${e.scope} ${e.limit}: ${JSON.stringify(e.used)} of ${JSON.stringify(e.allowed)}`);
    case "tool_progress": return line(e, "tool", "progress", call, e.data);
    case "approval_requested": return line(e, "guide", "approval needed", call, e.arguments);
    case "approval_decided": return line(e, e.approved ? "tool" : "deny", e.approved ? "approved" : "rejected", call, e.reason);
    case "step_failed": return line(e, "error", "step failed", `${e.kind} ${e.step_id}`, errorText(e.error, e.error_text));
    default: return line(e, "", String(e.type).replace(/_/g, " "), "", e.error_text);
  }
}

export function gapLine(gap) {
  // The numbers are log positions, meaningless to a reader: kept on the line, not in its text.
  const li = el("li", "gap", "Some earlier events (streamed text, progress) are no longer kept by the server: it restarted, or keeps only its newest. The lines here are what it kept; the conversation and the ledger hold everything that happened.");
  li.dataset.type = "gap";
  li.dataset.from = String(gap.from);
  li.dataset.to = String(gap.to);
  $("timeline").appendChild(li);
}

// ---- approvals ----

export function renderApprovals(list, decide) {
  const box = $("approvals");
  box.replaceChildren();
  $("approval-count").textContent = list.length ? `(${list.length})` : "";
  $("side-count").textContent = list.length ? String(list.length) : "";
  if (list.length === 0) { box.appendChild(el("p", "empty", "No call waits for approval.")); return; }
  for (const a of list) box.appendChild(approvalCard(a, decide, false));
}

// ---- ledger ----

let decisions = []; // approvals seen in the session's events: { at, tool, call_id, approved, reason }
let entries = [];

export function clearLedger() { decisions = []; entries = []; }

export function recordApproval(e) {
  if (decisions.some((d) => d.seq === e.seq)) return;
  decisions.push({ seq: e.seq, at: Date.parse(e.at), tool: e.tool, call_id: e.call_id, approved: e.approved, reason: e.reason });
}

function time(ms) {
  return Number.isNaN(ms) ? "" : new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
}

function entryTime(entry) {
  if (typeof entry.timestamp === "string") return Date.parse(entry.timestamp);
  if (entry.timestamp && entry.timestamp.secs_since_epoch !== undefined) return entry.timestamp.secs_since_epoch * 1000;
  return NaN;
}

const EVALUATORS = { predicate: "predicate", llm_sync: "LLM judge", llm_async: "LLM judge (async)" };

function cell(tr, cls, ...parts) {
  const td = el("td", cls);
  for (const part of parts.filter(Boolean)) td.appendChild(part);
  tr.appendChild(td);
  return td;
}

// A shadow rule's would-be decision differs from the live decision made beside it.
const disagrees = (entry) => Boolean(entry.shadow) && entry.shadow.live !== entry.action;

function ruleRow(entry) {
  // A gating layer's rewrite of a call's arguments is recorded as an allow that carries the new arguments.
  const action = entry.rewritten_args ? "rewrite" : entry.action || "";
  // An allow no rule objected to is routine: shown, but quietly. A shadow rule's would-be decision (never
  // enforced) is marked, and more so where it differs from the live decision.
  const classes = ["rule-row"];
  if (action === "allow" && !entry.rule_id) classes.push("quiet");
  if (entry.shadow) classes.push("shadow");
  if (disagrees(entry)) classes.push("disagrees");
  const tr = el("tr", classes.join(" "));
  cell(tr, "time", el("span", null, time(entryTime(entry))));
  cell(tr, `action ${action}`, el("span", "pill", action || "—"));
  const rule = entry.rule_id
    ? el("div", "rule-id", entry.rule_id)
    : el("div", "rule-id none", action === "allow" ? "no rule objected" : "no rule named");
  const evaluator = entry.evaluator ? el("div", "meta", EVALUATORS[entry.evaluator] || entry.evaluator) : null;
  const failures = (entry.failures || []).length
    ? el("div", "meta", `could not decide: ${entry.failures.map((f) => `${f.rule_id} (${f.cause && f.cause.cause ? f.cause.cause.replace(/_/g, " ") : "?"})`).join(", ")}`)
    : null;
  const shadow = entry.shadow
    ? el("div", "meta shadow-note", `shadow rule, not enforced · live: ${entry.shadow.live}${disagrees(entry) ? " · differs" : ""}`)
    : null;
  const escalated = entry.escalated ? el("div", "meta", "escalated: its advice was ignored too often this turn") : null;
  cell(tr, "rule", rule, evaluator, shadow, escalated, failures);
  const kind = (entry.kind || "").replace(/_/g, " ");
  const subject = entry.tool_name
    ? el("div", "subject", `${entry.tool_name} ${callSummary(entry.tool_args ?? "")}`)
    : el("div", "subject", kind === "model turn" ? "the model's answer" : entry.outcome ? `the turn ended: ${String(entry.outcome).toLowerCase()}` : kind);
  if (entry.tool_args) subject.title = short(entry.tool_args, 2000);
  const rewritten = entry.rewritten_args ? el("div", "subject wrap", `→ ${changeSummary(entry.tool_args, entry.rewritten_args)}`) : null;
  if (rewritten) rewritten.title = short(entry.rewritten_args, 2000);
  const guidance = entry.guidance ? el("div", "guidance", entry.guidance) : null;
  cell(tr, "detail", subject, rewritten, guidance);
  return tr;
}

function approvalRow(d) {
  const tr = el("tr", "approval-row");
  const action = d.approved ? "approved" : "rejected";
  cell(tr, "time", el("span", null, time(d.at)));
  cell(tr, `action ${action}`, el("span", "pill", action));
  const who = d.reason && /nobody approved/.test(d.reason) ? "the deadline passed" : "decided by a person";
  cell(tr, "rule", el("div", "rule-id", "approval"), el("div", "meta", who));
  cell(tr, "detail", el("div", "subject wrap", `${d.tool} (call ${d.call_id})`), d.reason ? el("div", "guidance", d.reason) : null);
  return tr;
}

export function setLedger(list) { entries = list.map((e) => (typeof e === "string" ? { kind: "custom", guidance: e } : e)); }

export function renderLedger(message) {
  const body = $("ledger-rows");
  body.replaceChildren();
  const rows = entries.map((entry) => ({ at: entryTime(entry), row: () => ruleRow(entry) }))
    .concat(decisions.map((d) => ({ at: d.at, row: () => approvalRow(d) })));
  rows.sort((a, b) => (a.at || 0) - (b.at || 0));
  for (const r of rows) body.appendChild(r.row());
  const shadows = entries.filter((e) => e.shadow);
  const summary = $("ledger-shadow");
  summary.hidden = shadows.length === 0;
  summary.textContent = shadows.length === 0 ? "" :
    `Shadow rules: ${shadows.length} decision(s), ${shadows.filter(disagrees).length} disagree(s) with the live decision.`;
  if (rows.length === 0 || message) {
    const tr = el("tr");
    const td = el("td", "empty", message || "No steering decision or approval yet.");
    td.colSpan = 4;
    tr.appendChild(td);
    body.appendChild(tr);
  }
}
