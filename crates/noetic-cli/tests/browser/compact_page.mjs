// A compaction on the page (#33): the timeline shows a `context_compacted` line saying how much was folded, also
// after a reload and (mode "restarted") after the server restarted, when it comes back from the session log. Run
// by tests/serve_compact.rs:
//
//   node compact_page.mjs BASE_URL SCREENSHOT_DIR compact|restarted
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { launch, openPage, openSession, runSteps } from "./harness.mjs";

const [base, shots, mode] = process.argv.slice(2);
const browser = await launch();
const consoleErrors = [];
const page = await openPage(browser, consoleErrors);
const seen = {};

const compactedLine = () => page.locator("#timeline li[data-type=context_compacted]");

await runSteps(browser, page, shots, seen, consoleErrors, async (shot) => {
  if (mode === "compact") {
    await openSession(page, base, "compact-1");
    for (const [said, answer] of [["first", "First answer."], ["second", "Second answer."]]) {
      await page.fill("#message", said);
      await page.press("#message", "Enter");
      await page.locator("#chat li.assistant", { hasText: answer }).waitFor();
      await page.locator("#session-state[data-state=idle]").waitFor();
    }
    seen.compacted = await page.evaluate(async () => {
      const r = await fetch("/api/sessions/compact-1/compact", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      return r.json();
    });
    await compactedLine().waitFor();
    seen.live = await compactedLine().textContent();
    await shot("compacted-live");
    await page.reload();
    await page.locator("#connection[data-state=live]").waitFor();
    await compactedLine().waitFor();
    seen.afterReload = await compactedLine().textContent();
    seen.chatAfterReload = await page.locator("#chat li.assistant").count();
  } else {
    await page.goto(`${base}/#session=compact-1`);
    await page.locator("#connection[data-state=live]").waitFor();
    await compactedLine().waitFor();
    seen.afterRestart = await compactedLine().textContent();
    seen.gaps = await page.locator("#timeline li.gap").allTextContents();
    await shot("compacted-after-restart");
    await page.setViewportSize({ width: 390, height: 844 });
    await page.click("#toggle-side");
    await page.locator("#side-pane").waitFor({ state: "visible" });
    await shot("compacted-activity-pane");
  }
}, (nn, name) => `${mode}-${nn}-${page.viewportSize().width}px-${name}.png`);
