// The noetic page: talk to, watch and steer one session at a time. Everything the agent or the model wrote is
// shown through text nodes (markdown is built node by node), never parsed as HTML.
import { $, el, elapsed, errorText, isCancelled, learnClock, rootKind, serverNow } from "/dom.js";
import { updateDeadline } from "/approval.js";
import * as chat from "/chat.js";
import * as side from "/side.js";
import { editTitle, nameParts } from "/rename.js";
import { confirmTwice, sessionItem } from "/sessions.js";

const WIDE = window.matchMedia("(min-width: 1100px)");
const state = {
  token: null,
  key: null,
  source: null,
  lastSeq: 0,
  loadedSeq: 0,
  busy: false,
  turns: 0,
  turnSince: null,
  runningOn: null,
  opened: 0,
  title: null, // the open session's title
  budget: null, // the session's budget, as GET /api/sessions/{key} gave it
  pausedOn: null, // the limit it is paused over
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
    const error = new Error(data && data.error ? data.error.message : "HTTP " + response.status);
    error.code = data && data.error ? data.error.code : String(response.status);
    error.status = response.status;
    throw error;
  }
  return data;
}

const sessionPath = (suffix) => `/api/sessions/${encodeURIComponent(state.key)}${suffix || ""}`;

function status(text) { $("status-line").textContent = text; }

// ---- sessions ----

async function refreshSessions() {
  const list = $("sessions");
  // A title being typed is not thrown away by a refresh; saving it refreshes the list.
  if (list.querySelector("form.rename")) return;
  try {
    const data = await api("GET", "/api/sessions");
    list.replaceChildren();
    for (const s of data.sessions) {
      list.appendChild(sessionItem(s, s.key === state.key, {
        open: () => openSession(s.key),
        remove: () => deleteSession(s.key),
        rename: (title) => renameSession(s.key, title),
      }));
    }
    if (data.sessions.length === 0) list.appendChild(el("li", "empty", "No session yet: name one above."));
  } catch (e) {
    list.replaceChildren(el("li", "empty", e.code === "no_store" ? "Sessions are kept in memory only." : "Could not list the sessions: " + e.message));
  }
}

async function deleteSession(key) {
  try {
    await api("DELETE", `/api/sessions/${encodeURIComponent(key)}`);
    // Closed first: closing resets the status line, which then says what happened.
    if (key === state.key) closeSession();
    status(`Deleted session ${key}.`);
  } catch (e) {
    status(`Session ${key} was not deleted: ${e.message}`);
  }
  refreshSessions();
}

async function renameSession(key, title) {
  const result = await api("PATCH", `/api/sessions/${encodeURIComponent(key)}`, { title });
  if (key === state.key) showTitle(result.title);
  status(`Session ${key} is now titled “${result.title}”.`);
  refreshSessions();
}

// The open session's name in the session bar: its title (its key beside it), or its key.
function showTitle(title) {
  state.title = title || null;
  const shown = $("session-title");
  if (!state.key) { shown.textContent = "no session open"; shown.title = ""; return; }
  shown.replaceChildren(...nameParts(state.key, state.title));
  shown.title = state.title ? `${state.title} (session ${state.key})` : state.key;
}

function closeSession() {
  if (state.source) { state.source.close(); state.source = null; }
  state.key = null;
  history.replaceState(null, "", location.pathname);
  $("budget-paused").hidden = true;
  chat.clearChat();
  side.clearLedger();
  $("timeline").replaceChildren();
  showTitle(null);
  for (const id of ["message", "send", "mode", "delete-session", "rename-session"]) $(id).disabled = true;
  $("connection").textContent = "not connected";
  $("connection").dataset.state = "idle";
  setBusy(false);
  chat.emptyHint("No session open. Pick one under Sessions, or type a new name there and press Open.");
}

// An answer for a session the page has left since it asked is dropped.
class Left extends Error {}

async function loadSession(full) {
  const key = state.key;
  const data = await api("GET", sessionPath());
  if (key !== state.key) throw new Left();
  state.turns = data.turns;
  state.runningOn = data.running_on || null;
  showTitle(data.title);
  chat.pinFailures(data.history.length);
  if (full || chat.needsHistory(data.queued)) chat.renderHistory(data.history);
  chat.setQueue(data.queued, full || !data.busy);
  $("mode").value = data.steering_mode;
  $("unfinished").hidden = !data.unfinished_turn;
  showBudget(data.budget);
  setBusy(data.busy, state.busy ? state.turnSince : null);
  if (!data.busy) chat.settleCalls();
  showApprovals(data.pending_approvals);
  if (data.history.length === 0 && data.queued.length === 0) chat.emptyHint("Nothing here yet: send a message to start.");
  return data;
}

async function openSession(key) {
  if (state.source) { state.source.close(); state.source = null; }
  const opened = ++state.opened;
  drawer("none");
  state.key = key;
  history.replaceState(null, "", "#session=" + encodeURIComponent(key));
  showTitle(null);
  $("timeline").replaceChildren();
  side.clearLedger();
  chat.clearChat();
  for (const id of ["message", "send", "mode", "delete-session", "rename-session"]) $(id).disabled = false;
  state.lastSeq = 0;
  state.busy = false;
  state.turnSince = null;
  try {
    const data = await loadSession(true);
    if (opened !== state.opened) return;
    state.loadedSeq = data.last_event_seq;
  } catch (e) {
    if (!(e instanceof Left)) status("Could not open the session: " + e.message);
    return;
  }
  connect();
  refreshSessions();
  refreshLedger();
  $("message").focus();
}

// A session paused over its budget: which limit, and a field to raise it (the rest of its budget stays).
function showBudget(status) {
  const paused = status && status.paused;
  $("budget-paused").hidden = !paused;
  state.budget = status ? status.budget : null;
  if (!paused) return;
  state.pausedOn = paused;
  $("budget-reason").textContent = paused.message;
  $("budget-limit-name").textContent = `${paused.scope}.${paused.limit}`;
  $("budget-limit").value = "";
  $("budget-limit").placeholder = `more than ${paused.allowed}`;
}

async function raiseBudget() {
  const paused = state.pausedOn;
  const text = $("budget-limit").value.trim();
  if (!paused || !text) { status("Type the new limit first."); return; }
  const budget = JSON.parse(JSON.stringify(state.budget || {}));
  budget[paused.scope] = budget[paused.scope] || {};
  budget[paused.scope][paused.limit] = /^[0-9.]+$/.test(text) ? Number(text) : text;
  try {
    const result = await api("PUT", sessionPath("/budget"), budget);
    showBudget(result);
    if (result.continued) setBusy(true);
    status(result.continued ? "Budget raised: the queued messages run now." : "Budget raised.");
  } catch (e) {
    status("The budget was not raised: " + e.message);
  }
}

function setBusy(busy, since) {
  state.busy = busy;
  state.turnSince = busy ? (since ?? state.turnSince ?? serverNow()) : null;
  $("stop").disabled = !busy;
  $("message").placeholder = !state.key ? "Open or create a session first"
    : busy ? "Steer the agent: your message reaches it at its next checkpoint"
      : "Message the agent (Enter sends, Shift+Enter adds a line)";
  status(!state.key ? "" : busy ? "The agent is working. What you send now steers it; Esc stops the turn." : "");
  showSessionState();
}

function showSessionState() {
  const label = $("session-state");
  if (!state.key) { label.textContent = ""; label.dataset.state = "none"; return; }
  if (state.busy) {
    label.dataset.state = "running";
    const where = state.runningOn ? ` on ${state.runningOn}` : "";
    label.textContent = `running${where} · ${elapsed(serverNow() - state.turnSince)}`;
  } else if (!$("unfinished").hidden) {
    label.dataset.state = "unfinished";
    label.textContent = "unfinished";
  } else {
    label.dataset.state = "idle";
    label.textContent = "idle";
  }
}

// ---- events ----

function connect() {
  const params = new URLSearchParams({ after: String(state.lastSeq) });
  if (state.token) params.set("access_token", state.token);
  const source = new EventSource(`${sessionPath("/events")}?${params}`);
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
    side.gapLine(gap);
    // The durable events of the gap follow it, read back from the session log (numbered inside it): not skipped.
    state.lastSeq = Math.max(state.lastSeq, gap.from - 1);
    loadSession(true).catch(() => {});
  });
}

function onEvent(event) {
  if (event.seq <= state.lastSeq) return; // already shown (a resumed stream never repeats, but be sure)
  state.lastSeq = event.seq;
  side.describe(event);
  if (event.type === "approval_decided") { side.recordApproval(event); if (!$("ledger").hidden) side.renderLedger(); }
  if (event.seq > state.loadedSeq) { learnClock(event.at); live(event); } else replayed(event);
}

function showFailure(e) {
  if (isCancelled(e.error)) chat.failure("Stopped: the turn was cancelled before it finished.", "note");
  // A budget reached pauses the session: not a failure of the agent.
  else if (rootKind(e.error) === "budget_reached") chat.failure(errorText(e.error, e.error_text), "paused");
  else chat.failure(errorText(e.error, e.error_text), "error");
}

// An event from before the page read the session: the history already holds what it did, so only the state of
// the running turn's calls (running, waiting) and the last turn's failure are taken from it.
function replayed(e) {
  if (e.turn !== state.turns) return;
  if (!state.busy) { if (e.type === "turn_failed") showFailure(e); return; }
  if (e.type === "turn_started") { state.turnSince = Date.parse(e.at); showSessionState(); }
  else if (e.type === "tool_call_started") chat.toolStarted(e);
  else if (e.type === "tool_call_completed") chat.toolCompleted(e);
  else if (e.type === "tool_skipped") chat.toolSkipped(e);
  else if (e.type === "tool_call_rewritten") chat.toolRewritten(e);
  else if (e.type === "approval_requested") chat.approvalAsked(e);
  else if (e.type === "approval_decided") chat.approvalDecided(e);
}

let queueFetch = 0;
function live(e) {
  switch (e.type) {
    case "turn_started": chat.turnStarted(e.turn); state.turns = e.turn; setBusy(true, Date.parse(e.at)); refreshSessions(); break;
    case "model_text_delta": chat.textDelta(e.text); break;
    case "model_call_completed": chat.endText(false); break;
    case "model_response_steered": if (e.action === "guide") chat.discardAnswer(); break;
    case "tool_call_started": chat.endText(false); chat.toolStarted(e); break;
    case "tool_call_completed": chat.toolCompleted(e); break;
    case "tool_skipped": chat.toolSkipped(e); break;
    case "tool_call_rewritten": chat.toolRewritten(e); break;
    case "steering_denied": chat.toolSteered(e, e.error && e.error.guidance ? e.error.guidance : errorText(e.error, e.error_text)); break;
    case "approval_requested": chat.approvalAsked(e); refreshApprovals(); break;
    case "approval_decided": chat.approvalDecided(e); refreshApprovals(); break;
    case "steering_queued":
      chat.steeringQueued(e.id);
      // Learn the text of a message another client queued.
      clearTimeout(queueFetch);
      queueFetch = setTimeout(() => {
        const key = state.key;
        api("GET", sessionPath()).then((d) => { if (key === state.key) chat.setQueue(d.queued, false); }).catch(() => {});
      }, 250);
      break;
    case "steering_injected": chat.steeringInjected(e.count); break;
    case "turn_completed": case "turn_failed":
      chat.endText(false);
      if (e.type === "turn_failed") showFailure(e);
      chat.settleCalls();
      setBusy(false);
      loadSession(false).catch(() => {});
      refreshSessions();
      refreshLedger();
      break;
  }
}

// ---- actions ----

async function send(text) {
  const li = chat.sending(text, state.busy);
  try {
    const result = await api("POST", sessionPath("/messages"), { text });
    if (result.routed === "steered") chat.steered(li, result.message_id);
    else if (result.routed === "paused") { chat.steered(li, result.message_id); status(result.message); }
    else { chat.started(li, result.turn); if (!state.busy) setBusy(true); }
  } catch (e) {
    chat.notSent(li, e.message);
  }
}

async function stop() {
  if (!state.key || !state.busy) return;
  status("Stopping the turn…");
  try { await api("POST", sessionPath("/stop")); } catch (e) { status("Could not stop the turn: " + e.message); }
}

function showApprovals(list) {
  side.renderApprovals(list, decide);
  chat.showApprovals(list, decide);
  if (list.length > 0 && WIDE.matches) showTab("approvals");
}

async function refreshApprovals() {
  if (!state.key) return;
  const key = state.key;
  try {
    const data = await api("GET", `/api/approvals?session=${encodeURIComponent(key)}`);
    if (key === state.key) showApprovals(data.approvals);
  } catch (e) { status("Could not read the approvals: " + e.message); }
}

async function decide(callId, approve, reason, argumentsSha256) {
  try {
    const body = { approve, reason: reason || null, session: state.key, arguments_sha256: argumentsSha256 || null };
    await api("POST", `/api/approvals/${encodeURIComponent(callId)}`, body);
  } catch (e) { status("The decision was not delivered: " + e.message); }
  refreshApprovals();
}

async function refreshLedger() {
  if (!state.key) return;
  const key = state.key;
  try {
    const data = await api("GET", sessionPath("/ledger"));
    if (key !== state.key) return;
    side.setLedger(data.entries);
    side.renderLedger();
  } catch (e) {
    side.setLedger([]);
    side.renderLedger(e.code === "no_store" ? "No ledger: sessions are kept in memory only." : e.message);
  }
}

function showTab(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  for (const id of ["timeline", "approvals", "ledger"]) $(id).hidden = id !== name;
  if (name === "ledger") refreshLedger();
}

// On a narrow screen the sessions and the activity pane slide over the conversation, one at a time.
function drawer(which) {
  document.body.dataset.drawer = which;
  $("toggle-sessions").setAttribute("aria-expanded", String(which === "sessions"));
  $("toggle-side").setAttribute("aria-expanded", String(which === "side"));
  $("scrim").hidden = which === "none";
}

function init() {
  readToken();
  chat.followEnd();
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
  $("toggle-sessions").addEventListener("click", () => drawer(document.body.dataset.drawer === "sessions" ? "none" : "sessions"));
  $("toggle-side").addEventListener("click", () => drawer(document.body.dataset.drawer === "side" ? "none" : "side"));
  $("close-side").addEventListener("click", () => drawer("none"));
  $("scrim").addEventListener("click", () => drawer("none"));
  $("new-session").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("new-session-key").value.trim();
    $("new-session-key").value = "";
    openSession(key);
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("message").value;
    if (!text.trim() || !state.key) return;
    $("message").value = "";
    send(text);
  });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    if (document.body.dataset.drawer !== "none") { drawer("none"); return; }
    if (state.busy) { e.preventDefault(); stop(); }
  });
  $("stop").addEventListener("click", stop);
  $("budget-raise").addEventListener("click", () => raiseBudget());
  $("resume").addEventListener("click", () => api("POST", sessionPath("/resume")).then(() => { $("unfinished").hidden = true; showSessionState(); }).catch((e) => status(e.message)));
  $("mode").addEventListener("change", () => api("PUT", sessionPath("/mode"), { mode: $("mode").value }).catch((e) => status(e.message)));
  confirmTwice($("delete-session"), "Delete", () => { if (state.key) deleteSession(state.key); });
  $("rename-session").addEventListener("click", () => {
    const key = state.key;
    if (key) editTitle($("session-bar"), $("session-title"), key, state.title, (t) => renameSession(key, t), $("rename-session"));
  });
  setInterval(() => {
    for (const li of chat.runningTools()) chat.tick(li);
    for (const node of document.querySelectorAll(".deadline")) updateDeadline(node);
    if (state.busy) showSessionState();
  }, 1000);
  refreshSessions();
  setInterval(refreshSessions, 10000);
  const fromHash = () => new URLSearchParams(location.hash.slice(1)).get("session");
  window.addEventListener("hashchange", () => { if (fromHash() && fromHash() !== state.key) openSession(fromHash()); });
  if (fromHash()) openSession(fromHash());
  else closeSession();
}

init();
