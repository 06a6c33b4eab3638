// Small helpers the page's modules share. Text reaches the page only through textContent and text nodes.

export const $ = (id) => document.getElementById(id);

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

export function short(text, max) {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  if (s === undefined) return "";
  return s.length > max ? s.slice(0, max) + "…" : s;
}

// "7 s", "2 min 05 s", "1 h 02 min".
export function elapsed(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

// "4:32" (minutes and seconds left).
export function countdown(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString();
}

// The server's clock minus this browser's, learnt from live events, so durations measured against event times
// do not depend on the two clocks agreeing.
let skew = 0;
export function learnClock(atText) {
  const at = Date.parse(atText);
  if (!Number.isNaN(at)) skew = at - Date.now();
}
export function serverNow() { return Date.now() + skew; }

// A readable sentence for an error: the server's own text when it sent one, else what the JSON says.
export function errorText(error, text) {
  if (text) return text;
  if (!error) return "";
  if (typeof error === "string") return error;
  if (error.kind === "step_failed" && error.cause) return errorText(error.cause);
  if (error.kind === "cancelled") return "cancelled" + (error.reason ? ": " + error.reason : "");
  return error.message || error.guidance || error.reason || JSON.stringify(error);
}

// The kind of the error under the steps that passed it up (`cancelled`, `budget_reached`, …).
export function rootKind(error) {
  let e = error;
  while (e && e.kind === "step_failed") e = e.cause;
  return e ? e.kind : undefined;
}

export function isCancelled(error) {
  return rootKind(error) === "cancelled";
}

// The arguments a model wrote, parsed when they are JSON (else the text as it is).
export function parseArgs(args) {
  if (typeof args !== "string") return args;
  try { return JSON.parse(args); } catch (_) { return args; }
}

// One line that says what a call does: its command, path, query or URL, else its arguments in short.
export function callSummary(args) {
  const value = parseArgs(args);
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const key of ["command", "path", "query", "url", "pattern", "name"]) {
      if (typeof value[key] === "string") return short(value[key].replace(/\s+/g, " "), 160);
    }
    const text = JSON.stringify(value);
    return text === "{}" ? "" : short(text, 160);
  }
  return short(String(value ?? ""), 160);
}

// What a rewrite changed: each argument whose value differs, with its new value ("content: …"); the whole call's
// summary when the arguments are not two objects.
export function changeSummary(before, after) {
  const [was, now] = [parseArgs(before), parseArgs(after)];
  const isObject = (v) => v && typeof v === "object" && !Array.isArray(v);
  if (!isObject(was) || !isObject(now)) return callSummary(after);
  const text = (v) => (typeof v === "string" ? v : JSON.stringify(v ?? null)).replace(/\s+/g, " ");
  const keys = [...new Set([...Object.keys(was), ...Object.keys(now)])]
    .filter((k) => JSON.stringify(was[k]) !== JSON.stringify(now[k]));
  if (!keys.length) return callSummary(after);
  return short(keys.map((k) => (k in now ? `${k}: ${text(now[k])}` : `${k} removed`)).join(" · "), 160);
}

export function pretty(args) {
  const value = parseArgs(args);
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
