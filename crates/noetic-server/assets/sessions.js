// The session list's items: a session's title (or key), its turns and state, Rename and Delete.
import { el } from "/dom.js";
import { editTitle, nameParts } from "/rename.js";

// A button that acts on a second click within 4 s (the first asks to confirm).
export function confirmTwice(button, label, act) {
  button.addEventListener("click", (e) => {
    e.stopPropagation();
    if (button.dataset.confirm === "1") { button.dataset.confirm = ""; button.textContent = label; act(); return; }
    button.dataset.confirm = "1";
    button.textContent = "Delete? Click again";
    setTimeout(() => { button.dataset.confirm = ""; button.textContent = label; }, 4000);
  });
}

// One line of GET /api/sessions as a list item; `act.open()`, `act.remove()` and `act.rename(title)` do the work.
export function sessionItem(s, current, act) {
  const li = el("li");
  li.dataset.key = s.key;
  const open = el("button", "session-open");
  open.type = "button";
  open.appendChild(el("span", "session-key", "")).append(...nameParts(s.key, s.title));
  const what = s.running ? `running${s.running_on ? " on " + s.running_on : ""}` : s.unfinished ? "unfinished" : "";
  const meta = [`${s.turns} turn${s.turns === 1 ? "" : "s"}`, what, s.queued ? `${s.queued} queued` : ""].filter(Boolean).join(" · ");
  open.appendChild(el("span", `meta${s.running ? " running" : s.unfinished ? " unfinished" : ""}`, meta));
  open.addEventListener("click", act.open);
  const remove = el("button", "session-delete", "Delete");
  remove.type = "button";
  remove.setAttribute("aria-label", `Delete session ${s.key}`);
  confirmTwice(remove, "Delete", act.remove);
  const rename = el("button", "session-rename", "Rename");
  rename.type = "button";
  rename.setAttribute("aria-label", `Rename session ${s.key}`);
  rename.addEventListener("click", (e) => { e.stopPropagation(); editTitle(li, open, s.key, s.title, act.rename, rename); });
  if (current) li.setAttribute("aria-current", "true");
  const actions = el("div", "session-actions");
  actions.append(rename, remove);
  li.append(open, actions);
  return li;
}
