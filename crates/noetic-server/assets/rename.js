// Renaming a session: an inline field in the session list (and one in the session bar for the open session).
// A title is untrusted text (anyone with the API may set it): it reaches the page only through textContent and
// input values, never as HTML.
import { el } from "/dom.js";

// The longest title the server keeps (noetic::agent::MAX_TITLE_CHARS).
export const MAX_TITLE = 120;

// Puts a rename form in place of `shown` (inside `host`): Enter or Save renames, Esc or Cancel puts `shown` back;
// either way the focus returns to `opener` (the Rename button).
// `rename(title)` resolves when done (the caller refreshes what shows the title) or throws with the server's
// message, which the form then shows.
export function editTitle(host, shown, key, current, rename, opener) {
  if (host.querySelector("form.rename")) return;
  const form = el("form", "rename");
  const input = el("input");
  input.value = current || "";
  input.maxLength = MAX_TITLE;
  input.placeholder = "a title for " + key;
  input.setAttribute("aria-label", `New title for session ${key}`);
  input.autocomplete = "off";
  const save = el("button", "rename-save", "Save");
  save.type = "submit";
  const cancel = el("button", "rename-cancel", "Cancel");
  cancel.type = "button";
  const error = el("div", "rename-error");
  error.setAttribute("role", "alert");
  const close = () => { form.remove(); shown.hidden = false; if (opener.isConnected) opener.focus(); };
  cancel.addEventListener("click", close);
  input.addEventListener("keydown", (e) => {
    // Esc leaves the field; it must not reach the page's Esc (which stops a running turn).
    if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); }
  });
  form.addEventListener("click", (e) => e.stopPropagation());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const title = input.value.trim();
    if (!title) { error.textContent = "Type a title first (Esc keeps the old one)."; return; }
    save.disabled = true;
    try {
      await rename(title);
      close();
    } catch (err) {
      error.textContent = "Not renamed: " + err.message;
      save.disabled = false;
      input.focus();
    }
  });
  form.append(input, save, cancel, error);
  shown.hidden = true;
  shown.after(form);
  input.focus();
  input.select();
}

// What shows a session: its title (with its key beside it), or its key alone.
export function nameParts(key, title) {
  const parts = [el("span", "session-name", title || key)];
  if (title) parts.push(el("span", "session-key-small", key));
  return parts;
}
