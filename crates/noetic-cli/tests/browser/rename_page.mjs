// Renaming a session on the page (#33): from the session list with the mouse, from the session bar with the
// keyboard only (Esc cancels without stopping anything), a title carrying markup shown as text, a title the
// server refuses said beside the field, and the title shown at 1400 px and 390 px. Run by tests/serve_rename.rs:
//
//   node rename_page.mjs BASE_URL SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import fs from "node:fs";
import path from "node:path";

import { launch, openPage, openSession } from "./harness.mjs";

const [base, shots] = process.argv.slice(2);
const XSS = `<img src=x onerror="window.__xss='img'"><script>window.__xss='script'</script> **Q3** notes`;
fs.mkdirSync(shots, { recursive: true });

const browser = await launch();
const consoleErrors = [];
let page = await openPage(browser, consoleErrors);
const seen = { steps: [] };
let step = 0;

async function shot(name) {
  step += 1;
  const file = path.join(shots, `${String(step).padStart(2, "0")}-${page.viewportSize().width}px-${name}.png`);
  await page.screenshot({ path: file });
  seen.steps.push(file);
}

// What shows the session in the list and in the bar, and whether any markup ran or became elements.
const shown = () => page.evaluate(() => ({
  list: document.querySelector("#sessions li[data-key=rename-1] .session-name")?.textContent,
  listKey: document.querySelector("#sessions li[data-key=rename-1] .session-key-small")?.textContent,
  bar: document.querySelector("#session-title .session-name")?.textContent,
  elements: document.querySelectorAll("#sessions img, #sessions script, #session-title img, #session-title script").length,
  xss: window.__xss ?? null,
}));

try {
  await openSession(page, base, "rename-1");
  await page.fill("#message", "hello");
  await page.press("#message", "Enter");
  await page.locator("#chat li.assistant", { hasText: "Hello there." }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();
  await page.locator("#sessions li[data-key=rename-1]").waitFor();

  // With the mouse, from the list: the title carries markup.
  await page.click("#sessions li[data-key=rename-1] .session-rename");
  seen.fieldFocused = await page.evaluate(() => document.activeElement?.getAttribute("aria-label"));
  await page.fill("#sessions form.rename input", XSS);
  await shot("renaming-in-the-list");
  await page.click("#sessions form.rename .rename-save");
  await page.locator("#sessions li[data-key=rename-1] .session-name", { hasText: "**Q3** notes" }).waitFor();
  seen.afterList = await shown();
  seen.status = await page.locator("#status-line").textContent();
  await shot("renamed-with-markup-shown-as-text");

  // With the keyboard only, from the session bar: Esc cancels (and stops nothing), Enter saves.
  await page.focus("#rename-session");
  await page.keyboard.press("Enter");
  await page.keyboard.type("never saved");
  await page.keyboard.press("Escape");
  seen.afterEscape = await shown();
  seen.focusAfterEscape = await page.evaluate(() => document.activeElement?.id || document.activeElement?.className);
  await page.focus("#rename-session");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Control+A");
  await page.keyboard.type("Release notes");
  await page.keyboard.press("Enter");
  await page.locator("#session-title .session-name", { hasText: "Release notes" }).waitFor();
  await page.locator("#sessions li[data-key=rename-1] .session-name", { hasText: "Release notes" }).waitFor();
  seen.afterKeyboard = await shown();

  // A title the server refuses: the reason shows beside the field, and the old title stays.
  await page.click("#rename-session");
  await page.fill("#session-bar form.rename input", "bell\u0007here");
  await page.press("#session-bar form.rename input", "Enter");
  await page.locator("#session-bar .rename-error:not(:empty)").waitFor();
  seen.refused = await page.locator("#session-bar .rename-error").textContent();
  await shot("refused-title");
  await page.press("#session-bar form.rename input", "Escape");
  seen.afterRefused = await shown();
  await shot("titled-1400");

  // A phone: the bar and the list show the title; the list is in the drawer.
  page = await openPage(browser, consoleErrors, { width: 390, height: 844 });
  await page.goto(`${base}/#session=rename-1`);
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#session-title .session-name", { hasText: "Release notes" }).waitFor();
  seen.phoneBarFits = await page.locator("#session-bar").evaluate((bar) => bar.scrollWidth <= bar.clientWidth + 1);
  await shot("titled");
  await page.click("#toggle-sessions");
  await page.locator("#sessions-pane").waitFor({ state: "visible" });
  await page.locator("#sessions li[data-key=rename-1] .session-name", { hasText: "Release notes" }).waitFor();
  seen.phone = await shown();
  await shot("sessions-drawer-titled");
  await page.click("#sessions li[data-key=rename-1] .session-rename");
  await shot("renaming-in-the-drawer");
  seen.phoneFieldFits = await page.locator("#sessions form.rename").evaluate((f) => f.getBoundingClientRect().right <= window.innerWidth);

  seen.consoleErrors = consoleErrors;
  console.log(JSON.stringify(seen));
  await browser.close();
} catch (e) {
  try { await shot("failed"); } catch (_) { /* the page may be gone */ }
  console.error(`page step ${step + 1} failed: ${e.message}`);
  console.error(`console errors: ${JSON.stringify(consoleErrors)}`);
  console.log(JSON.stringify(seen));
  await browser.close();
  process.exit(1);
}
