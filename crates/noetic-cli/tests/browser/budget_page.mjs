// The page with a session paused over its budget: the banner names the limit reached, a message sent meanwhile
// queues (and the status line says why), and raising the limit from the banner runs it. Run by
// tests/serve_budget.rs:
//
//   node budget_page.mjs BASE_URL SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { launch, openPage, openSession, runSteps } from "./harness.mjs";

const [base, shots] = process.argv.slice(2);
const browser = await launch();
const consoleErrors = [];
const page = await openPage(browser, consoleErrors);
const seen = {};

await runSteps(browser, page, shots, seen, consoleErrors, async (shot) => {
  await openSession(page, base, "budget-1");
  await page.fill("#message", "look around");
  await page.press("#message", "Enter");
  await page.locator("#budget-paused").waitFor({ state: "visible" });
  await page.locator("#session-state[data-state=idle]").waitFor();
  seen.reason = await page.locator("#budget-reason").textContent();
  seen.limitName = await page.locator("#budget-limit-name").textContent();
  await page.locator("#chat li.turn-paused").waitFor();
  seen.chatSays = await page.locator("#chat li.turn-paused strong").textContent();
  seen.chatFailures = await page.locator("#chat li.turn-error").count();
  await shot("paused-over-its-budget");
  // A phone: the banner, its field and its button fit the width.
  await page.setViewportSize({ width: 390, height: 844 });
  seen.bannerFits390 = await page.evaluate(() => {
    const fits = (id) => { const r = document.getElementById(id).getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; };
    return ["budget-paused", "budget-limit", "budget-raise", "send"].every(fits) && document.documentElement.scrollWidth <= window.innerWidth;
  });
  await shot("paused-over-its-budget-390px");
  await page.setViewportSize({ width: 1400, height: 900 });

  await page.fill("#message", "and now?");
  await page.press("#message", "Enter");
  await page.locator("#status-line", { hasText: "paused over its budget" }).waitFor();
  seen.queuedStatus = await page.locator("#status-line").textContent();

  await page.fill("#budget-limit", "5");
  await page.click("#budget-raise");
  await page.locator("#chat li.assistant", { hasText: "Looked twice." }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();
  seen.bannerHidden = await page.locator("#budget-paused").isHidden();
  await shot("raised-and-continued");
});
