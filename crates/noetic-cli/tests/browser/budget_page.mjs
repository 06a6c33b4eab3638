// The page with a session paused over its budget: the banner names the limit reached, a message sent meanwhile
// queues (and the status line says why), and raising the limit from the banner runs it. Run by
// tests/serve_budget.rs:
//
//   node budget_page.mjs BASE_URL SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_BROWSER_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");

const [base, shots] = process.argv.slice(2);
const STEP_TIMEOUT = 60_000;
fs.mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
page.setDefaultTimeout(STEP_TIMEOUT);
await page.emulateMedia({ reducedMotion: "reduce" });
const seen = { steps: [] };
const consoleErrors = [];
page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
page.on("pageerror", (e) => consoleErrors.push(String(e)));
let step = 0;

async function shot(name) {
  step += 1;
  const file = path.join(shots, `${String(step).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file });
  seen.steps.push(file);
}

try {
  await page.goto(`${base}/`);
  await page.fill("#new-session-key", "budget-1");
  await page.press("#new-session-key", "Enter");
  await page.locator("#connection[data-state=live]").waitFor();
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
