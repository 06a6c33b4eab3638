// A call waiting for a decision, as a card: the tool, its arguments (written by the model: shown as text), the
// diff a file write would make, the time left before it is rejected automatically, and the buttons.
import { el, pretty, countdown, clock } from "/dom.js";

// The diff the server made, line by line, each line coloured by its first character.
function diffView(preview) {
  const pre = el("pre", "diff");
  pre.setAttribute("aria-label", "What the call would change");
  for (const line of preview.split("\n")) {
    let cls = "ctx";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.appendChild(el("span", cls, line + "\n"));
  }
  return pre;
}

// The card for pending approval `a`; `decide(callId, approve, reason, argumentsSha256)` delivers the decision,
// bound to the arguments the card shows.
export function approvalCard(a, decide, inline) {
  const card = el("div", inline ? "approval inline" : "approval");
  card.dataset.callId = a.call_id;
  card.appendChild(el("div", "approval-title", `${a.tool} wants to run (call ${a.call_id})`));
  if (a.preview) card.appendChild(diffView(a.preview));
  if (!inline) {
    // The call's block in the conversation shows the arguments of an inline card.
    const args = el("details", "approval-args");
    args.open = !a.preview;
    args.appendChild(el("summary", null, "arguments"));
    args.appendChild(el("pre", null, pretty(a.arguments)));
    card.appendChild(args);
  }
  // Counted down from the time left by the server's clock, so a browser whose clock is off still counts right.
  const deadline = Date.now() + (typeof a.expires_in_ms === "number" ? a.expires_in_ms : a.expires_at - Date.now());
  const due = el("div", "deadline");
  due.dataset.deadline = String(deadline);
  card.appendChild(due);
  updateDeadline(due);
  const reason = el("input");
  reason.placeholder = "reason (for a rejection)";
  reason.setAttribute("aria-label", `Why ${a.tool} is rejected`);
  const approve = el("button", "approve", "Approve");
  const reject = el("button", "reject", "Reject");
  approve.type = "button";
  reject.type = "button";
  approve.addEventListener("click", () => { card.classList.add("deciding"); decide(a.call_id, true, "", a.arguments_sha256); });
  reject.addEventListener("click", () => { card.classList.add("deciding"); decide(a.call_id, false, reason.value, a.arguments_sha256); });
  reason.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); reject.click(); } });
  const row = el("div", "approval-actions");
  row.append(reason, approve, reject);
  card.appendChild(row);
  return card;
}

export function updateDeadline(node) {
  const deadline = Number(node.dataset.deadline);
  const left = deadline - Date.now();
  node.textContent = left > 0
    ? `Decide within ${countdown(left)}: rejected automatically at ${clock(deadline)} unless you decide.`
    : "No decision in time: it is being rejected.";
  node.classList.toggle("urgent", left < 30_000);
}
