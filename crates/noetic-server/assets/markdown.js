// Markdown from the model, rendered into DOM nodes built one by one: text only ever goes into text nodes, so no
// tag, attribute or script in the model's text can reach the page. Links open only for http and https addresses;
// images are shown as links (a model's image could carry data out to another server).
import { el } from "/dom.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEPARATOR = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

// Nesting deeper than this (quotes in quotes, lists in lists, emphasis in emphasis) is shown as text: no answer
// can exhaust the stack.
const MAX_DEPTH = 12;

export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), fragment, 0);
  return fragment;
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line)
    || (line.includes("|") && next !== undefined && TABLE_SEPARATOR.test(next) && next.includes("-"));
}

function blocks(lines, parent, depth) {
  if (depth > MAX_DEPTH) {
    parent.appendChild(el("p", null, lines.join("\n")));
    return;
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i += 1; continue; }
    let m;
    if ((m = FENCE.exec(line))) { i = code(lines, i, m, parent); continue; }
    if ((m = HEADING.exec(line))) {
      const h = el(`h${Math.min(m[1].length + 2, 6)}`);
      inline(m[2], h);
      parent.appendChild(h);
      i += 1;
      continue;
    }
    if (RULE.test(line)) { parent.appendChild(el("hr")); i += 1; continue; }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) { inner.push(m[1]); i += 1; }
      const quote = el("blockquote");
      blocks(inner, quote, depth + 1);
      parent.appendChild(quote);
      continue;
    }
    if (ITEM.test(line)) { i = list(lines, i, parent, depth); continue; }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEPARATOR.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      i = table(lines, i, parent);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && (para.length === 0 || !startsBlock(lines[i], lines[i + 1]))) {
      para.push(lines[i].trim());
      i += 1;
    }
    const p = el("p");
    inline(para.join("\n"), p);
    parent.appendChild(p);
  }
}

// A fenced code block (to its closing fence, or to the end while the text still streams in), with a copy button.
function code(lines, i, m, parent) {
  const fence = m[1];
  const body = [];
  let j = i + 1;
  while (j < lines.length) {
    const close = lines[j].trim();
    if (close.startsWith(fence[0].repeat(fence.length)) && /^[`~]+$/.test(close)) { j += 1; break; }
    body.push(lines[j]);
    j += 1;
  }
  parent.appendChild(codeBlock(body.join("\n"), m[2]));
  return j;
}

export function codeBlock(text, language) {
  const box = el("div", "code");
  const bar = el("div", "code-bar");
  bar.appendChild(el("span", "code-lang", language || "text"));
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  copy.setAttribute("aria-label", "Copy the code");
  copy.addEventListener("click", () => copyText(text, copy));
  bar.appendChild(copy);
  const pre = el("pre");
  pre.appendChild(el("code", null, text));
  box.append(bar, pre);
  return box;
}

async function copyText(text, button) {
  let done = false;
  try {
    if (navigator.clipboard) { await navigator.clipboard.writeText(text); done = true; }
  } catch (_) { done = false; }
  if (!done) {
    // Without the clipboard API (a page not served over https or localhost): copy through a selection.
    const area = el("textarea", "visually-hidden");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    try { done = document.execCommand("copy"); } catch (_) { done = false; }
    area.remove();
  }
  button.textContent = done ? "Copied" : "Copy failed";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

function list(lines, i, parent, depth) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const indent = first[1].length;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    const width = m[1].length + m[2].length + 1;
    i += 1;
    while (i < lines.length) {
      const line = lines[i];
      const deeper = line.length - line.trimStart().length >= Math.min(width, indent + 2);
      if (!line.trim()) {
        const next = lines[i + 1];
        if (next === undefined || next.length - next.trimStart().length < Math.min(width, indent + 2)) break;
        body.push("");
      } else if (deeper) {
        body.push(line.slice(Math.min(width, line.length - line.trimStart().length)));
      } else if (ITEM.test(line) || startsBlock(line, lines[i + 1])) {
        break;
      } else {
        body.push(line.trim());
      }
      i += 1;
    }
    const li = el("li");
    const simple = body.every((l) => l.trim() && !startsBlock(l));
    if (simple) inline(body.join("\n"), li, depth + 1);
    else blocks(body, li, depth + 1);
    node.appendChild(li);
    while (i < lines.length && !lines[i].trim()) {
      const next = ITEM.exec(lines[i + 1] || "");
      if (!next || next[1].length !== indent) break;
      i += 1;
    }
  }
  parent.appendChild(node);
  return i;
}

function cells(line) {
  let text = line.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  return text.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function table(lines, i, parent) {
  const wrap = el("div", "table-wrap");
  const node = el("table");
  const head = el("thead");
  const row = el("tr");
  for (const c of cells(lines[i])) { const th = el("th"); inline(c, th); row.appendChild(th); }
  head.appendChild(row);
  node.appendChild(head);
  const body = el("tbody");
  i += 2;
  while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
    const tr = el("tr");
    for (const c of cells(lines[i])) { const td = el("td"); inline(c, td); tr.appendChild(td); }
    body.appendChild(tr);
    i += 1;
  }
  node.appendChild(body);
  wrap.appendChild(node);
  parent.appendChild(wrap);
  return i;
}

// An address a link may open: http or https only (never javascript:, data: or a relative path).
export function safeUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (_) {
    return null;
  }
}

function link(label, href, parent) {
  const url = safeUrl(href);
  if (!url) {
    parent.appendChild(document.createTextNode(label === href ? label : `${label} (${href})`));
    return;
  }
  const a = el("a");
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer nofollow";
  a.textContent = label;
  parent.appendChild(a);
}

// The closing delimiter of an emphasis that opens at `from`, or -1.
function closing(text, delim, from) {
  let j = text.indexOf(delim, from);
  while (j !== -1) {
    const before = text[j - 1];
    if (j > from && before !== " " && before !== "\\" && (delim.length > 1 || text[j + 1] !== delim)) return j;
    j = text.indexOf(delim, j + 1);
  }
  return -1;
}

const SPECIAL = /[`*_~[!<\\\nh]/;
// Matched at one position of the whole text (sticky), so no pattern scans more than it must.
const ESCAPE = /\\[\\`*_{}[\]()#+\-.!|~<>]/y;
const LINK = /!?\[([^\]\n]*)\]\(\s*<?((?:[^()\s>]|\([^()\s]*\))+)>?(?:\s+"[^"\n]*")?\s*\)/y;
const AUTOLINK = /<(https?:\/\/[^\s<>]+)>/y;
const BARE_URL = /https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/y;
const EMPHASIS = [["**", "strong"], ["__", "strong"], ["~~", "del"], ["*", "em"], ["_", "em"]];

function at(re, text, i) {
  re.lastIndex = i;
  return re.exec(text);
}

// Inline markdown. A search that found nothing from one position finds nothing from a later one, so each kind of
// search that failed is not repeated: a long run of `*`, `_`, `[` or backticks costs linear time, not quadratic.
function inline(text, parent, depth = 0) {
  if (depth > MAX_DEPTH) {
    parent.appendChild(document.createTextNode(text));
    return;
  }
  let plain = "";
  const flush = () => { if (plain) { parent.appendChild(document.createTextNode(plain)); plain = ""; } };
  const dead = new Map(); // a search that failed → the position it failed from
  const alive = (what, from) => !(dead.has(what) && from >= dead.get(what));
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (!SPECIAL.test(c)) { plain += c; i += 1; continue; }
    let m;
    if (c === "\\" && at(ESCAPE, text, i)) { plain += text[i + 1]; i += 2; continue; }
    if (c === "\n") { flush(); parent.appendChild(el("br")); i += 1; continue; }
    if (c === "`") {
      let run = 1;
      while (text[i + run] === "`") run += 1;
      const ticks = "`".repeat(run);
      let end = alive(ticks, i + run) ? text.indexOf(ticks, i + run) : -1;
      while (end !== -1 && text[end + run] === "`") {
        let next = end;
        while (text[next] === "`") next += 1;
        end = text.indexOf(ticks, next);
      }
      if (end === -1) { dead.set(ticks, i + run); plain += ticks; i += run; continue; }
      flush();
      parent.appendChild(el("code", null, text.slice(i + run, end).replace(/^ (.*) $/, "$1")));
      i = end + run;
      continue;
    }
    if ((c === "[" || (c === "!" && text[i + 1] === "[")) && alive("]", i)) {
      if (text.indexOf("]", i) === -1) dead.set("]", i);
      else if ((m = at(LINK, text, i))) {
        flush();
        link(c === "!" ? `image: ${m[1] || m[2]}` : m[1] || m[2], m[2], parent);
        i += m[0].length;
        continue;
      }
    }
    if (c === "<" && (m = at(AUTOLINK, text, i))) { flush(); link(m[1], m[1], parent); i += m[0].length; continue; }
    if (c === "h" && (i === 0 || /[\s(]/.test(text[i - 1])) && (m = at(BARE_URL, text, i))) {
      flush();
      link(m[0], m[0], parent);
      i += m[0].length;
      continue;
    }
    const pair = EMPHASIS.find(([d]) => text.startsWith(d, i));
    if (pair) {
      const [d, tag] = pair;
      const from = i + d.length;
      const opens = !(d[0] === "_" && i > 0 && /\w/.test(text[i - 1])) && text[from] && text[from] !== " ";
      const end = opens && alive(d, from) ? closing(text, d, from) : -1;
      if (opens && end === -1) dead.set(d, from);
      if (end !== -1 && !(d[0] === "_" && /\w/.test(text[end + d.length] || ""))) {
        flush();
        const node = el(tag);
        inline(text.slice(from, end), node, depth + 1);
        parent.appendChild(node);
        i = end + d.length;
        continue;
      }
      plain += d;
      i += d.length;
      continue;
    }
    plain += c;
    i += 1;
  }
  flush();
}
