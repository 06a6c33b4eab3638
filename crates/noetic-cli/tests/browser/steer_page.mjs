// Drives the page `noetic serve` serves in headless Chromium: send a task, watch the tool calls appear, steer
// while a tool runs, see the rest of the batch skipped and the new instruction answered, approve a tool call,
// read the ledger. Saves a screenshot of each step. Run by tests/serve.rs:
//
//   node steer_page.mjs BASE_URL WORKSPACE SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_BROWSER_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");

const [base, workspace, shots] = process.argv.slice(2);
const STEP_TIMEOUT = 60_000;
fs.mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const seen = { steps: [] };
let step = 0;
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
page.setDefaultTimeout(STEP_TIMEOUT);
const consoleErrors = [];
page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
page.on("pageerror", (e) => consoleErrors.push(String(e)));

async function shot(name) {
  step += 1;
  const file = path.join(shots, `${String(step).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file });
  seen.steps.push(file);
}

try {
  await page.goto(`${base}/#session=browser-steer`);
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#message:not([disabled])").waitFor();
  await shot("opened");

  // Send the task: the first check asks for approval (run_command always does); approve it on the page.
  await page.fill("#message", "run the checks");
  await page.press("#message", "Enter");
  const first = page.locator("#approvals .approval").first();
  await first.waitFor();
  seen.firstApproval = (await first.locator("pre").textContent()).includes("lint passed");
  await shot("command-approval");
  await first.locator("button.approve").click();
  // The check runs and waits; its call shows up live in the chat and the timeline.
  await page.locator("#chat li.tool", { hasText: "run_command" }).first().waitFor();
  await page.locator("#timeline li[data-type=approval_decided]").first().waitFor({ state: "attached" });
  await page.locator("#timeline li[data-type=tool_call_started]").first().waitFor({ state: "attached" });
  seen.busyWhileToolRuns = await page.locator("#stop:not([disabled])").count() === 1;
  await shot("tool-running");

  // Steer while the tool runs: the input stays usable, the message shows as queued.
  await page.fill("#message", "skip the remaining checks and write notes.txt instead");
  await page.press("#message", "Enter");
  await page.locator("#chat li.user.queued").waitFor();
  seen.queuedShown = true;
  await shot("steering-queued");

  // Let the running check end: the message is injected and the rest of the batch skipped.
  fs.writeFileSync(path.join(workspace, "release"), "");
  await page.locator("#timeline li[data-type=steering_injected]").waitFor({ state: "attached" });
  await page.locator("#timeline li[data-type=tool_skipped]").nth(1).waitFor({ state: "attached" });
  seen.skipped = await page.locator("#timeline li[data-type=tool_skipped]").count();
  await shot("steering-injected-tools-skipped");

  // The new instruction is answered with a write that needs approval.
  const card = page.locator("#approvals .approval", { hasText: "write_file" });
  await card.waitFor();
  seen.approvalTool = (await card.locator("div").first().textContent()).trim();
  await shot("approval-pending");
  await card.locator("button.approve").click();
  await page.locator("#chat li.assistant", { hasText: "Wrote notes.txt" }).waitFor();
  seen.notes = fs.readFileSync(path.join(workspace, "notes.txt"), "utf8");
  seen.chat = await page.locator("#chat li").allTextContents();
  await shot("answered");

  // The ledger as a table.
  await page.click(".tab[data-tab=ledger]");
  await page.locator("#ledger-rows tr").first().waitFor();
  seen.ledgerRows = await page.locator("#ledger-rows tr").count();
  seen.ledgerText = await page.locator("#ledger-rows").textContent();
  await shot("ledger");

  seen.timeline = await page.locator("#timeline li").evaluateAll((lis) => lis.map((li) => li.dataset.type));
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
