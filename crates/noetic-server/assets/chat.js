// The conversation pane: messages in the order the agent saw them, a block per tool call with its state, and the
// messages queued for the running turn, which wait at the bottom until the turn takes them.
import { $, el, elapsed, callSummary, pretty, serverNow, short } from "/dom.js";
import { renderMarkdown } from "/markdown.js";
import { approvalCard } from "/approval.js";

const list = () => $("chat");
let tools = new Map(); // call id → its block, for the calls of the current turn
let streaming = null; // the assistant message being streamed in
let lastAnswer = null; // the last streamed answer
let queue = []; // ids of the messages queued for the running turn, oldest first
const texts = new Map(); // message id → text, for queued messages
const anchors = new Map(); // turn number → the item before the turn's first one (null: the list's start)
let notes = []; // turn failures: { at: history items before it, li }

// Keeps the conversation at its end while the reader is there, also when the pane changes size.
export function followEnd() {
  let stick = true;
  list().addEventListener("scroll", () => { stick = nearBottom(); });
  new ResizeObserver(() => { if (stick) list().scrollTop = list().scrollHeight; }).observe(list());
}

export function clearChat() {
  list().replaceChildren();
  tools = new Map();
  streaming = null;
  lastAnswer = null;
  queue = [];
  anchors.clear();
  notes = [];
}

function nearBottom() {
  const l = list();
  return l.scrollHeight - l.scrollTop - l.clientHeight < 120;
}

// Adds an item after the conversation so far: before the queued messages, which stay at the bottom.
function place(li, before) {
  const follow = nearBottom();
  const hint = list().querySelector(":scope > li.hint");
  if (hint) hint.remove();
  list().insertBefore(li, before === undefined ? list().querySelector(":scope > li.queued") : before);
  if (follow) list().scrollTop = list().scrollHeight;
  return li;
}

function lastPlaced() {
  const queued = list().querySelector(":scope > li.queued");
  return queued ? queued.previousElementSibling : list().lastElementChild;
}

export function userMessage(text, cls) {
  return place(el("li", cls ? `user ${cls}` : "user", text));
}

export function assistantMessage(text) {
  const li = el("li", "assistant");
  const body = el("div", "md");
  body.appendChild(renderMarkdown(text));
  li.appendChild(body);
  return place(li);
}

export function note(text, kind) {
  const li = el("li", kind === "error" ? "turn-error" : kind === "paused" ? "turn-paused" : "note");
  if (kind === "error" || kind === "paused") {
    li.appendChild(el("strong", null, kind === "error" ? "The turn failed: " : "Paused over its budget: "));
    li.appendChild(el("span", null, text));
  } else {
    li.textContent = text;
  }
  return place(li);
}

// A turn's failure, kept across re-renders of the history.
export function failure(text, kind) {
  notes.push({ at: undefined, li: note(text, kind) });
}

export function pinFailures(historyLength) {
  for (const n of notes) if (n.at === undefined) n.at = historyLength;
}

// ---- the assistant's text, as it streams in ----

export function textDelta(text) {
  if (!streaming) {
    const li = el("li", "assistant streaming");
    li.setAttribute("aria-busy", "true");
    const body = el("div", "md");
    li.appendChild(body);
    place(li);
    streaming = { li, body, text: "", timer: 0 };
  }
  const s = streaming;
  s.text += text;
  if (!s.timer) s.timer = setTimeout(() => { s.timer = 0; draw(s); }, 40);
}

function draw(s) {
  const follow = nearBottom();
  s.body.replaceChildren(renderMarkdown(s.text));
  if (follow) list().scrollTop = list().scrollHeight;
}

export function endText(discarded) {
  if (!streaming) return;
  const s = streaming;
  streaming = null;
  clearTimeout(s.timer);
  draw(s);
  s.li.classList.remove("streaming");
  s.li.setAttribute("aria-busy", "false");
  lastAnswer = s.li;
  if (discarded) discardAnswer();
}

// A rule sent the last answer back: the model answers again, and this one is not part of the conversation.
export function discardAnswer() {
  if (!lastAnswer || lastAnswer.classList.contains("discarded")) return;
  lastAnswer.classList.add("discarded");
  lastAnswer.appendChild(el("div", "meta", "a rule sent this answer back; the model tries again"));
}

// ---- tool calls ----

function toolBlock(callId, tool, args) {
  const li = el("li", "tool");
  li.dataset.callId = callId;
  li.dataset.state = "pending";
  const head = el("div", "tool-head");
  const icon = el("span", "tool-icon");
  icon.setAttribute("aria-hidden", "true");
  const summary = callSummary(args) || `call ${callId}`;
  head.append(icon, el("span", "tool-name", tool), el("span", "tool-summary", summary), el("span", "tool-status", "not started"));
  li.appendChild(head);
  const full = args === undefined || args === null ? "" : pretty(args);
  if (full && full !== "{}" && full !== callSummary(args)) {
    const details = el("details", "tool-args");
    details.appendChild(el("summary", null, "arguments"));
    details.appendChild(el("pre", null, short(full, 20000)));
    li.appendChild(details);
  }
  return li;
}

function setState(li, state, status) {
  li.dataset.state = state;
  for (const cls of ["running", "waiting", "done", "error", "skipped", "denied", "stopped"]) li.classList.toggle(cls, cls === state);
  li.querySelector(".tool-status").textContent = status;
}

function output(li, text, cls) {
  let pre = li.querySelector(":scope > pre.tool-output");
  if (!pre) { pre = el("pre", "tool-output"); li.appendChild(pre); }
  pre.className = cls ? `tool-output ${cls}` : "tool-output";
  pre.textContent = short(text ?? "", 20000);
}

function block(callId, tool, args) {
  const known = tools.get(callId);
  if (known) return known;
  const li = place(toolBlock(callId, tool, args));
  tools.set(callId, li);
  return li;
}

function running(li, at) {
  li.dataset.since = String(Number.isNaN(Date.parse(at)) ? serverNow() : Date.parse(at));
  setState(li, "running", "running");
  tick(li);
}

export function tick(li) {
  if (li.dataset.state === "running") {
    li.querySelector(".tool-status").textContent = `running ${elapsed(serverNow() - Number(li.dataset.since))}`;
  }
}

export function toolStarted(e) {
  let li = tools.get(e.call_id);
  // A block from the history without a result is this call; any other is an older call with the same id.
  if (!li || li.dataset.state !== "pending") {
    li = place(toolBlock(e.call_id, e.tool, e.arguments));
    tools.set(e.call_id, li);
  }
  running(li, e.at);
}

export function toolCompleted(e) {
  const li = block(e.call_id, e.tool, "");
  const took = li.dataset.since ? ` in ${elapsed(Date.parse(e.at) - Number(li.dataset.since))}` : "";
  if (li.dataset.state === "denied") { output(li, e.output, "error"); return; }
  if (e.is_error) setState(li, "error", (e.error_kind ? e.error_kind.replace(/_/g, " ") : "failed") + took);
  else setState(li, "done", "done" + took);
  output(li, e.output, e.is_error ? "error" : "");
}

// A gating layer (a rewrite rule) changed the call's arguments before it ran: the block keeps what the model wrote
// and says, below it, who rewrote them, why, and what runs.
export function toolRewritten(e) {
  const li = block(e.call_id, e.tool, "");
  const note = el("div", "tool-rewritten", `arguments rewritten by ${e.layer}${e.reason ? `: ${e.reason}` : ""}`);
  note.appendChild(el("pre", null, short(pretty(e.arguments), 20000)));
  const out = li.querySelector(":scope > pre.tool-output");
  if (out) li.insertBefore(note, out);
  else li.appendChild(note);
}

export function toolSkipped(e) {
  const li = block(e.call_id, e.tool, "");
  setState(li, "skipped", "skipped: a message arrived");
  output(li, e.reason, "muted");
}

export function toolSteered(e, guidance) {
  const li = block(e.call_id, e.tool, "");
  setState(li, "denied", e.action === "guide" ? "sent back by a rule" : "denied by a rule");
  output(li, `${e.layers && e.layers.length ? e.layers.join(", ") + ": " : ""}${guidance}`, "error");
}

export function approvalAsked(e) {
  setState(block(e.call_id, e.tool, e.arguments), "waiting", "waiting for your approval");
}

export function approvalDecided(e) {
  const li = block(e.call_id, e.tool, "");
  const card = li.querySelector(":scope > .approval");
  if (card) card.remove();
  const args = li.querySelector(":scope > details.tool-args");
  if (args) args.open = false;
  if (e.approved) running(li, e.at);
  else { setState(li, "denied", "rejected"); output(li, e.reason || "rejected", "error"); }
}

// Puts the card of each pending approval into its call's block (and takes decided ones out).
export function showApprovals(pending, decide) {
  const byCall = new Map(pending.map((a) => [a.call_id, a]));
  for (const li of list().querySelectorAll(":scope > li.tool")) {
    const card = li.querySelector(":scope > .approval");
    const a = byCall.get(li.dataset.callId);
    if (!a || tools.get(a.call_id) !== li) { if (card) card.remove(); continue; }
    if (li.dataset.state === "pending") setState(li, "waiting", "waiting for your approval");
    if (card) continue;
    const args = li.querySelector(":scope > details.tool-args");
    if (args) args.open = true;
    li.appendChild(approvalCard(a, decide, true));
    li.scrollIntoView({ block: "nearest" });
  }
}

// No turn runs: a call still shown as running or waiting will not finish (the turn was stopped or its process
// ended), and its approval card is gone.
export function settleCalls() {
  for (const li of list().querySelectorAll(":scope > li.tool")) {
    if (!["running", "waiting", "pending"].includes(li.dataset.state)) continue;
    const card = li.querySelector(":scope > .approval");
    if (card) card.remove();
    setState(li, "stopped", "not finished: the turn ended first");
    const args = li.querySelector(":scope > details.tool-args");
    if (args) args.open = false;
  }
}

// ---- the history ----

export function renderHistory(history) {
  const kept = notes;
  clearChat();
  let count = 0;
  const pinned = () => {
    for (const n of kept) if (n.at === count) { list().appendChild(n.li); notes.push(n); }
  };
  pinned();
  for (const item of history) {
    if (item.type === "message") {
      if (item.role === "user") userMessage(item.content);
      else if (item.role === "assistant") assistantMessage(item.content);
    } else if (item.type === "tool_call") {
      tools.set(item.id, place(toolBlock(item.id, item.name, item.arguments)));
    } else if (item.type === "tool_result") {
      const li = tools.get(item.call_id) || block(item.call_id, "tool", "");
      const text = typeof item.content === "string" ? item.content : JSON.stringify(item.content);
      if (/^skipped due to/i.test(text)) setState(li, "skipped", "skipped: a message arrived");
      else if (item.is_error) setState(li, "error", "failed");
      else setState(li, "done", "done");
      output(li, text, item.is_error ? "error" : "");
    }
    count += 1;
    pinned();
  }
  for (const n of kept) if (n.at === undefined || n.at > count) { list().appendChild(n.li); notes.push(n); }
  list().scrollTop = list().scrollHeight;
}

// ---- the turn and the queue ----

export function turnStarted(turn) {
  tools = new Map();
  anchors.set(turn, lastPlaced());
}

function findMessage(id) {
  for (const li of list().querySelectorAll(":scope > li.user")) if (li.dataset.messageId === id) return li;
  return null;
}

// A message this page is sending: in the conversation when idle, at the bottom of the queue when a turn runs.
export function sending(text, busy) {
  const li = el("li", busy ? "user queued sending" : "user sending", text);
  if (busy) { list().appendChild(li); list().scrollTop = list().scrollHeight; return li; }
  return place(li);
}

// The message started turn `turn`: it goes before what the turn did so far.
export function started(li, turn) {
  const wasQueued = li.classList.contains("queued");
  li.classList.remove("sending", "queued");
  if (!wasQueued) return;
  const anchor = anchors.get(turn);
  if (anchor === undefined) place(li);
  else list().insertBefore(li, anchor ? anchor.nextSibling : list().firstElementChild);
}

// The message was queued for the running turn as `id`.
export function steered(li, id) {
  const text = li.textContent;
  texts.set(id, text);
  const placeholder = findMessage(id);
  if (placeholder && placeholder !== li) { placeholder.textContent = text; placeholder.classList.remove("placeholder"); li.remove(); return; }
  li.classList.remove("sending");
  li.dataset.messageId = id;
  if (!li.classList.contains("queued")) { li.classList.add("queued"); list().appendChild(li); }
}

export function notSent(li, why) {
  li.classList.remove("sending", "queued");
  li.classList.add("failed");
  if (li.parentNode) li.remove();
  place(li);
  note(`not sent: ${why}`);
}

export function steeringQueued(id) {
  if (!queue.includes(id)) queue.push(id);
}

// The running turn took `count` queued messages: they join the conversation here, before the model's next answer.
export function steeringInjected(count) {
  for (let k = 0; k < count; k++) {
    const id = queue.shift();
    let li = id === undefined ? list().querySelector(":scope > li.queued") : findMessage(id);
    if (!li) {
      li = el("li", "user injected placeholder", texts.get(id) || "…");
      if (texts.has(id)) li.classList.remove("placeholder");
      li.dataset.messageId = id;
    }
    li.classList.remove("queued");
    li.classList.add("injected");
    place(li);
  }
}

// The queue as the server has it: texts for ids this page did not send, and messages it did not know of. Only
// `reset` (a session just read while no turn runs) takes the server's order; otherwise the events keep it.
export function setQueue(queued, reset) {
  if (reset) queue = queued.map((q) => q.id);
  for (const q of queued) {
    if (!reset && !queue.includes(q.id)) continue;
    texts.set(q.id, q.text);
    const known = findMessage(q.id);
    if (known) {
      if (known.classList.contains("placeholder")) { known.textContent = q.text; known.classList.remove("placeholder"); }
      continue;
    }
    const mine = [...list().querySelectorAll(":scope > li.sending")].find((li) => li.textContent === q.text && !li.dataset.messageId);
    if (mine) { mine.dataset.messageId = q.id; continue; }
    const li = el("li", "user queued", q.text);
    li.dataset.messageId = q.id;
    list().appendChild(li);
  }
}

// True when the conversation shows something the server's history should replace: a message whose text never
// arrived, or a queued message the server no longer has.
export function needsHistory(queued) {
  const ids = new Set(queued.map((q) => q.id));
  if (list().querySelector(":scope > li.placeholder")) return true;
  return [...list().querySelectorAll(":scope > li.queued")].some((li) => li.dataset.messageId && !ids.has(li.dataset.messageId));
}

export function emptyHint(text) {
  if (list().childElementCount === 0) list().appendChild(el("li", "hint", text));
}

export function runningTools() {
  return list().querySelectorAll(":scope > li.tool[data-state=running]");
}
