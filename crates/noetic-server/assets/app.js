// The noetic page: talk to, watch and steer one session at a time. Everything the agent or the model wrote is
// shown with textContent, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  token: null,
  key: null,
  source: null,
  lastSeq: 0,
  loadedSeq: 0,
  liveAssistant: null,
  toolItems: new Map(),
  queued: [],
  busy: false,
};

function readToken() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const fromHash = hash.get("token");
  if (fromHash) sessionStorage.setItem("noetic-token", fromHash);
  state.token = sessionStorage.getItem("noetic-token");
}

async function api(method, path, body) {
  // Marks the call as this page's own: the server refuses a state change without it (or a JSON body), which a
  // page on another site cannot make a browser send.
  const headers = { "X-Noetic-Request": "1" };
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (response.status === 401) {
    const token = prompt("This server needs its access token:");
    if (token) { sessionStorage.setItem("noetic-token", token); state.token = token; return api(method, path, body); }
  }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : "HTTP " + response.status;
    const error = new Error(message);
    error.code = data && data.error ? data.error.code : String(response.status);
    error.status = response.status;
    throw error;
  }
  return data;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function status(text) { $("status-line").textContent = text; }

function scrollDown(list) { list.scrollTop = list.scrollHeight; }

function addChat(cls, text) {
  const li = el("li", cls, text);
  $("chat").appendChild(li);
  scrollDown($("chat"));
  return li;
}

function short(text, max) {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  return s.length > max ? s.slice(0, max) + "…" : s;
}

// ---- sessions ----

async function refreshSessions() {
  const list = $("sessions");
  try {
    const data = await api("GET", "/api/sessions");
    list.replaceChildren();
    for (const s of data.sessions) {
      const li = el("li");
      li.dataset.key = s.key;
      li.appendChild(el("div", null, s.key));
      li.appendChild(el("div", "meta", `${s.turns} turn(s)${s.unfinished ? " · unfinished" : ""}`));
      if (s.key === state.key) li.setAttribute("aria-current", "true");
      li.addEventListener("click", () => openSession(s.key));
      list.appendChild(li);
    }
  } catch (e) {
    if (e.code === "no_store") { list.replaceChildren(el("li", "meta", "sessions are kept in memory only")); }
  }
}

function renderHistory(history) {
  const chat = $("chat");
  chat.replaceChildren();
  state.toolItems.clear();
  state.liveAssistant = null;
  for (const item of history) {
    if (item.type === "message") {
      if (item.role === "user" || item.role === "assistant") addChat(item.role, item.content);
    } else if (item.type === "tool_call") {
      const li = addChat("tool", `→ ${item.name}(${short(item.arguments, 400)})`);
      li.dataset.callId = item.id;
      state.toolItems.set(item.id, li);
    } else if (item.type === "tool_result") {
      const li = state.toolItems.get(item.call_id);
      const text = typeof item.content === "string" ? item.content : JSON.stringify(item.content);
      if (li) {
        li.textContent += `\n← ${short(text, 600)}`;
        if (/^skipped due to/i.test(text)) li.classList.add("skipped");
        else if (item.is_error) li.classList.add("error");
      }
    }
  }
}

async function loadSession() {
  const data = await api("GET", `/api/sessions/${encodeURIComponent(state.key)}`);
  renderHistory(data.history);
  state.queued = [];
  for (const q of data.queued) {
    const li = addChat("user queued", q.text);
    li.dataset.messageId = q.id;
    state.queued.push(li);
  }
  $("mode").value = data.steering_mode;
  $("unfinished").hidden = !data.unfinished_turn;
  setBusy(data.busy);
  renderApprovals(data.pending_approvals);
  return data;
}

async function openSession(key) {
  if (state.source) { state.source.close(); state.source = null; }
  state.key = key;
  history.replaceState(null, "", "#session=" + encodeURIComponent(key));
  $("session-title").textContent = "session " + key;
  $("timeline").replaceChildren();
  $("message").disabled = false;
  $("send").disabled = false;
  $("mode").disabled = false;
  state.lastSeq = 0;
  try {
    const data = await loadSession();
    state.loadedSeq = data.last_event_seq;
  } catch (e) {
    status("could not open the session: " + e.message);
    return;
  }
  connect();
  refreshSessions();
  refreshLedger();
  $("message").focus();
}

function setBusy(busy) {
  state.busy = busy;
  $("stop").disabled = !busy;
  status(busy ? "the agent is working — what you send now steers it" : "idle");
}

// ---- events ----

function connect() {
  const params = new URLSearchParams({ after: String(state.lastSeq) });
  if (state.token) params.set("access_token", state.token);
  const source = new EventSource(`/api/sessions/${encodeURIComponent(state.key)}/events?${params}`);
  state.source = source;
  const badge = $("connection");
  source.onopen = () => { badge.textContent = "live"; badge.dataset.state = "live"; };
  source.onerror = () => {
    // The browser reconnects by itself, sending Last-Event-ID: nothing is lost or shown twice.
    badge.textContent = "reconnecting…"; badge.dataset.state = "reconnecting";
  };
  source.onmessage = (message) => onEvent(JSON.parse(message.data));
  source.addEventListener("gap", (message) => {
    const gap = JSON.parse(message.data);
    const li = el("li", "gap", `events ${gap.from}–${gap.to} were dropped from the server's log before this page read them`);
    $("timeline").appendChild(li);
    state.lastSeq = Math.max(state.lastSeq, gap.to);
    loadSession().catch(() => {});
  });
}

function timeline(event, cls, kind, detail, block) {
  const li = el("li", cls);
  li.dataset.type = event.type;
  li.appendChild(el("span", "seq", String(event.seq)));
  li.appendChild(el("span", "kind", kind));
  if (detail) li.appendChild(el("span", null, detail));
  if (block !== undefined && block !== null && block !== "") li.appendChild(el("pre", null, short(block, 4000)));
  const list = $("timeline");
  const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 20;
  list.appendChild(li);
  if (atEnd) scrollDown(list);
}

function onEvent(event) {
  if (event.seq <= state.lastSeq) return; // already shown (a resumed stream never repeats, but be sure)
  state.lastSeq = event.seq;
  describe(event);
  if (event.seq > state.loadedSeq) live(event);
}

function describe(e) {
  switch (e.type) {
    case "turn_started": return timeline(e, "turn", "turn started", `#${e.turn}`);
    case "turn_completed": return timeline(e, "turn", "turn done", `#${e.turn} in ${e.duration.secs}.${String(Math.floor(e.duration.nanos / 1e6)).padStart(3, "0")} s`);
    case "turn_failed": return timeline(e, "error", "turn failed", `#${e.turn}`, errorText(e.error));
    case "model_call_started": return timeline(e, "model", "model call", `${e.model} · round ${e.round + 1} · ${e.messages} messages · ${e.tools} tools`);
    case "model_call_completed": return timeline(e, "model", "model answered", `${e.tool_calls} tool call(s) · ${e.usage.output_tokens ?? 0} tokens out`);
    case "model_text_delta": return;
    case "tool_call_started": return timeline(e, "tool", "tool call", `${e.tool} (${e.call_id})`, e.arguments);
    case "tool_call_completed": return timeline(e, e.is_error ? "error" : "tool", e.is_error ? "tool failed" : "tool result", `${e.tool} (${e.call_id})${e.error_kind ? " · " + e.error_kind : ""}`, e.output);
    case "steering_denied": {
      const guidance = e.error && e.error.guidance ? e.error.guidance : errorText(e.error);
      const guide = e.action === "guide" ? "guide" : "deny";
      return timeline(e, guide, guide === "guide" ? "rule guided" : "rule denied", `${e.tool} (${e.call_id}) · ${e.layers.join(", ")}`, guidance);
    }
    case "model_response_steered": return timeline(e, e.action === "deny" ? "deny" : "guide", "response " + e.action, "", e.guidance);
    case "steering_queued": return timeline(e, "queue", "steering queued", e.id);
    case "steering_rejected": return timeline(e, "deny", "steering refused", e.reason);
    case "steering_injected": return timeline(e, "queue", "steering injected", `${e.count} message(s) shown to the model`);
    case "tool_skipped": return timeline(e, "queue", "tool skipped", e.call_id, e.reason);
    case "tool_progress": return timeline(e, "tool", "progress", e.tool, e.data);
    case "approval_requested": return timeline(e, "guide", "approval needed", `${e.tool} (${e.call_id})`, e.arguments);
    case "approval_decided": return timeline(e, e.approved ? "tool" : "deny", e.approved ? "approved" : "rejected", `${e.tool} (${e.call_id})`, e.reason);
    case "step_failed": return timeline(e, "error", "step failed", `${e.kind} ${e.step_id}`, errorText(e.error));
    case "step_started": case "step_completed": return;
    default: return timeline(e, "", e.type.replace(/_/g, " "));
  }
}

function errorText(error) {
  if (!error) return "";
  if (typeof error === "string") return error;
  return error.message || JSON.stringify(error);
}

function live(e) {
  switch (e.type) {
    case "turn_started": setBusy(true); break;
    case "model_text_delta":
      if (!state.liveAssistant) state.liveAssistant = addChat("assistant", "");
      state.liveAssistant.textContent += e.text;
      scrollDown($("chat"));
      break;
    case "model_call_completed": state.liveAssistant = null; break;
    case "tool_call_started": {
      const li = addChat("tool", `→ ${e.tool}(${short(e.arguments || "", 400)})`);
      li.dataset.callId = e.call_id;
      state.toolItems.set(e.call_id, li);
      break;
    }
    case "tool_call_completed": {
      const li = state.toolItems.get(e.call_id) || addChat("tool", `→ ${e.tool}`);
      li.textContent += `\n← ${short(e.output, 600)}`;
      if (e.is_error) li.classList.add("error");
      break;
    }
    case "tool_skipped": {
      const li = state.toolItems.get(e.call_id) || addChat("tool", `→ (${e.call_id})`);
      li.classList.add("skipped");
      li.textContent += "\n← skipped: steering arrived";
      break;
    }
    case "steering_injected": {
      for (let i = 0; i < e.count && state.queued.length > 0; i++) {
        const li = state.queued.shift();
        li.classList.remove("queued");
        li.classList.add("injected");
      }
      updateQueueLine();
      break;
    }
    case "approval_requested": case "approval_decided": refreshApprovals(); break;
    case "turn_completed": case "turn_failed":
      setBusy(false);
      if (e.type === "turn_failed") addChat("note", "the turn ended: " + errorText(e.error));
      loadSession().catch(() => {});
      refreshSessions();
      refreshLedger();
      break;
  }
}

function updateQueueLine() {
  const line = $("queue-line");
  line.hidden = state.queued.length === 0;
  line.textContent = `${state.queued.length} message(s) queued for the next checkpoint`;
}

// ---- actions ----

async function send(text) {
  try {
    const result = await api("POST", `/api/sessions/${encodeURIComponent(state.key)}/messages`, { text });
    if (result.routed === "steered") {
      const li = addChat("user queued", text);
      li.dataset.messageId = result.message_id;
      state.queued.push(li);
      updateQueueLine();
    } else {
      addChat("user", text);
      setBusy(true);
    }
  } catch (e) {
    addChat("note", "not sent: " + e.message);
  }
}

async function refreshApprovals() {
  if (!state.key) return;
  try {
    const data = await api("GET", `/api/approvals?session=${encodeURIComponent(state.key)}`);
    renderApprovals(data.approvals);
  } catch (e) { status("could not read approvals: " + e.message); }
}

function renderApprovals(list) {
  const box = $("approvals");
  box.replaceChildren();
  $("approval-count").textContent = list.length ? `(${list.length})` : "";
  if (list.length === 0) { box.appendChild(el("p", "empty", "No call waits for approval.")); return; }
  for (const a of list) {
    const card = el("div", "approval");
    card.dataset.callId = a.call_id;
    card.appendChild(el("div", null, `${a.tool} wants to run (call ${a.call_id})`));
    card.appendChild(el("pre", null, JSON.stringify(a.arguments, null, 2)));
    card.appendChild(el("div", "meta", "rejected automatically at " + new Date(a.expires_at).toLocaleTimeString()));
    const reason = el("input");
    reason.placeholder = "reason (for a rejection)";
    const approve = el("button", "approve", "Approve");
    const reject = el("button", "reject", "Reject");
    approve.addEventListener("click", () => decide(a.call_id, true, ""));
    reject.addEventListener("click", () => decide(a.call_id, false, reason.value));
    card.append(reason, approve, reject);
    box.appendChild(card);
  }
  showTab("approvals");
}

async function decide(callId, approve, reason) {
  try {
    await api("POST", `/api/approvals/${encodeURIComponent(callId)}`, { approve, reason: reason || null, session: state.key });
  } catch (e) { status("the decision was not delivered: " + e.message); }
  refreshApprovals();
}

async function refreshLedger() {
  if (!state.key) return;
  const body = $("ledger-rows");
  try {
    const data = await api("GET", `/api/sessions/${encodeURIComponent(state.key)}/ledger`);
    body.replaceChildren();
    for (const entry of data.entries) {
      const tr = el("tr");
      const when = typeof entry.timestamp === "string" ? new Date(entry.timestamp).toLocaleTimeString()
        : entry.timestamp && entry.timestamp.secs_since_epoch !== undefined
          ? new Date(entry.timestamp.secs_since_epoch * 1000).toLocaleTimeString() : "";
      const action = entry.action || "";
      const detail = entry.tool_name ? `${entry.tool_name} ${short(entry.tool_args ?? "", 200)}` : (entry.guidance || "");
      tr.append(el("td", null, when), el("td", null, (entry.kind || "").replace(/_/g, " ")), el("td", action, action),
        el("td", null, [entry.rule_id, entry.evaluator].filter(Boolean).join(" · ")), el("td", null, detail));
      body.appendChild(tr);
    }
  } catch (e) {
    body.replaceChildren();
    const tr = el("tr");
    const td = el("td", "empty", e.code === "no_store" ? "no ledger: sessions are kept in memory only" : e.message);
    td.colSpan = 5;
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

function showTab(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  for (const id of ["timeline", "approvals", "ledger"]) $(id).hidden = id !== name;
  if (name === "ledger") refreshLedger();
}

function init() {
  readToken();
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
  $("new-session").addEventListener("submit", (e) => { e.preventDefault(); openSession($("new-session-key").value.trim()); });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("message").value;
    if (!text.trim() || !state.key) return;
    $("message").value = "";
    send(text);
  });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  $("stop").addEventListener("click", () => api("POST", `/api/sessions/${encodeURIComponent(state.key)}/stop`).catch((e) => status(e.message)));
  $("resume").addEventListener("click", () => api("POST", `/api/sessions/${encodeURIComponent(state.key)}/resume`).then(() => { $("unfinished").hidden = true; }).catch((e) => status(e.message)));
  $("mode").addEventListener("change", () => api("PUT", `/api/sessions/${encodeURIComponent(state.key)}/mode`, { mode: $("mode").value }).catch((e) => status(e.message)));
  refreshSessions();
  setInterval(refreshSessions, 10000);
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("session")) openSession(hash.get("session"));
}

document.addEventListener("DOMContentLoaded", init);
