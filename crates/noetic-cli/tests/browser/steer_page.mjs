// Drives the page `noetic serve` serves in headless Chromium, 1400 px wide: send a task, watch the tool calls
// appear in order with their state, approve a call from its card (which counts down to its deadline), steer while
// a tool runs, see the rest of the batch skipped by name and the message placed where the agent read it, approve a
// write from its diff, read the ledger. Then, 390 px wide: a second session plays the example's script from its
// start, Esc stops its turn, and sessions are deleted. Saves a screenshot of each step. Run by tests/serve.rs:
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
// Panes appear at once (no sliding), so each screenshot shows a settled page.
await page.emulateMedia({ reducedMotion: "reduce" });
const consoleErrors = [];
page.on("console", (m) => { if (m.type() === "error" && !/status of 409/.test(m.text())) consoleErrors.push(m.text()); });
page.on("pageerror", (e) => consoleErrors.push(String(e)));

async function shot(name, on = page) {
  step += 1;
  const width = on.viewportSize().width;
  const file = path.join(shots, `${String(step).padStart(2, "0")}-${width}px-${name}.png`);
  await on.screenshot({ path: file });
  seen.steps.push(file);
}

// The conversation as "kind: text" lines (the kind is the item's first class).
const chatLines = () => page.locator("#chat > li").evaluateAll((lis) => lis.map((li) => {
  const kind = li.classList.contains("tool") ? `tool ${li.dataset.state}` : li.className.split(" ")[0];
  const text = li.classList.contains("tool")
    ? `${li.querySelector(".tool-name").textContent} ${li.querySelector(".tool-summary").textContent}`
    : li.firstChild ? li.firstChild.textContent : "";
  return `${kind}: ${text.slice(0, 60)}`;
}));

async function api(method, route, body) {
  const headers = { "X-Noetic-Request": "1" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(base + route, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return r.json();
}

async function until(what, check) {
  const deadline = Date.now() + STEP_TIMEOUT;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what} did not happen`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

try {
  // A session nobody opens on the page: its turn waits for an approval, then is stopped. The page deletes it later.
  await api("POST", "/api/sessions/old-one/messages", { text: "run the checks" });
  await until("old-one's approval", async () => (await api("GET", "/api/approvals?session=old-one")).approvals.length === 1);
  await api("POST", "/api/sessions/old-one/stop");
  await until("old-one idle", async () => (await api("GET", "/api/sessions/old-one")).busy === false);

  await page.goto(`${base}/`);
  seen.placeholderBefore = await page.locator("#message").getAttribute("placeholder");
  await page.goto(`${base}/#session=browser-steer`);
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#message:not([disabled])").waitFor();
  seen.opened = {
    placeholder: await page.locator("#message").getAttribute("placeholder"),
    state: await page.locator("#session-state").textContent(),
    hint: await page.locator("#chat li.hint").textContent(),
  };
  await shot("opened");

  // Send the task: the first check asks for approval (run_command always does); approve it on the page.
  await page.fill("#message", "run the checks");
  await page.press("#message", "Enter");
  const first = page.locator("#approvals .approval").first();
  await first.waitFor();
  seen.firstApproval = (await first.locator("pre").textContent()).includes("lint passed");
  seen.deadline = await first.locator(".deadline").textContent();
  seen.inlineCard = await page.locator("#chat li.tool[data-call-id=c1][data-state=waiting] .approval").count();
  seen.orderAtFirstApproval = await chatLines();
  seen.runningLabel = await page.locator("#session-state").textContent();
  await shot("command-approval");
  await first.locator("button.approve").click();
  // The check runs and waits; its block shows it running, with the time so far.
  const c1 = page.locator("#chat li.tool[data-call-id=c1][data-state=running]");
  await c1.waitFor();
  await page.locator("#timeline li[data-type=approval_decided]").first().waitFor({ state: "attached" });
  await page.locator("#timeline li[data-type=tool_call_started]").first().waitFor({ state: "attached" });
  seen.busyWhileToolRuns = await page.locator("#stop:not([disabled])").count() === 1;
  seen.runningStatus = await c1.locator(".tool-status").textContent();
  await shot("tool-running");

  // Steer while the tool runs: the input stays usable, the message waits at the bottom, queued.
  await page.fill("#message", "skip the remaining checks and write notes.txt instead");
  await page.press("#message", "Enter");
  await page.locator("#chat li.user.queued[data-message-id]").waitFor();
  seen.queuedShown = true;
  seen.queuedIsLast = await page.locator("#chat > li").last().evaluate((li) => li.classList.contains("queued"));
  await shot("steering-queued");

  // A page opened now reads the session mid-turn: the call runs, the message waits, the session is running.
  const other = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  other.setDefaultTimeout(STEP_TIMEOUT);
  await other.emulateMedia({ reducedMotion: "reduce" });
  other.on("pageerror", (e) => consoleErrors.push(String(e)));
  await other.goto(`${base}/#session=browser-steer`);
  await other.locator("#connection[data-state=live]").waitFor();
  await other.locator("#chat li.tool[data-call-id=c1][data-state=running]").waitFor();
  seen.reopened = {
    status: await other.locator("#chat li.tool[data-call-id=c1] .tool-status").textContent(),
    queued: await other.locator("#chat li.user.queued").allTextContents(),
    state: await other.locator("#session-state").getAttribute("data-state"),
    list: await other.locator("#sessions li[data-key=browser-steer] .meta").textContent(),
  };
  await shot("reopened-mid-turn", other);
  await other.close();

  // Let the running check end: the message is injected and the rest of the batch skipped.
  fs.writeFileSync(path.join(workspace, "release"), "");
  await page.locator("#timeline li[data-type=steering_injected]").waitFor({ state: "attached" });
  await page.locator("#timeline li[data-type=tool_skipped]").nth(1).waitFor({ state: "attached" });
  seen.skipped = await page.locator("#timeline li[data-type=tool_skipped]").count();
  seen.skippedBlocks = await page.locator("#chat li.tool.skipped").evaluateAll((lis) => lis.map((li) => li.querySelector(".tool-name").textContent + " " + li.querySelector(".tool-summary").textContent));
  await shot("steering-injected-tools-skipped");

  // The new instruction is answered with a write that needs approval; its card shows the diff.
  const card = page.locator("#approvals .approval", { hasText: "write_file" });
  await card.waitFor();
  seen.approvalTool = (await card.locator("div").first().textContent()).trim();
  seen.diff = await card.locator(".diff .add").allTextContents();
  seen.orderBeforeTheEnd = await chatLines();
  await shot("approval-pending");
  await card.locator("button.approve").click();
  await page.locator("#chat li.assistant", { hasText: "Wrote notes.txt" }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();
  seen.notes = fs.readFileSync(path.join(workspace, "notes.txt"), "utf8");
  seen.chat = await page.locator("#chat li").allTextContents();
  seen.orderAtTheEnd = await chatLines();
  await shot("answered");

  // The ledger: a table of decisions, approvals among them.
  await page.click(".tab[data-tab=ledger]");
  await page.locator("#ledger-rows tr.approval-row").nth(1).waitFor();
  seen.ledgerRows = await page.locator("#ledger-rows tr").count();
  seen.ledgerHeaders = await page.locator("#ledger th").allTextContents();
  seen.ledgerApprovals = await page.locator("#ledger-rows tr.approval-row").evaluateAll((trs) => trs.map((tr) => tr.textContent));
  seen.ledgerText = await page.locator("#ledger-rows").textContent();
  await shot("ledger");
  seen.timeline = await page.locator("#timeline li").evaluateAll((lis) => lis.map((li) => li.dataset.type));

  // 390 px: a second session, opened from the sessions pane, plays the script from its start.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click("#toggle-sessions");
  await page.fill("#new-session-key", "browser-second");
  await page.press("#new-session-key", "Enter");
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#sessions-pane").waitFor({ state: "hidden" });
  await page.fill("#message", "run the checks");
  await page.press("#message", "Enter");
  const second = page.locator("#chat li.tool[data-call-id=c1] .approval");
  await second.waitFor();
  seen.secondSession = await chatLines();
  seen.secondApproveInView = await second.locator("button.approve").evaluate((b) => {
    const r = b.getBoundingClientRect();
    return r.left >= 0 && r.right <= window.innerWidth && r.bottom <= window.innerHeight;
  });
  await shot("second-session-approval");
  // Esc stops the turn: a stop, not a failure.
  await page.keyboard.press("Escape");
  await page.locator("#chat li.note", { hasText: "Stopped" }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();
  seen.stopped = await page.locator("#chat li.note").last().textContent();
  seen.stoppedFailures = await page.locator("#chat li.turn-error").count();
  await shot("stopped-with-esc");

  // Deleting: the session nobody opened goes; so does the open one, whose events the page follows (it closes).
  await page.click("#toggle-sessions");
  const remove = page.locator("#sessions li[data-key=old-one] .session-delete");
  await remove.click();
  seen.confirmLabel = await remove.textContent();
  await remove.click();
  await page.locator("#sessions li[data-key=old-one]").waitFor({ state: "detached" });
  seen.deletedStatus = await page.locator("#status-line").textContent();
  seen.sessionsLeft = await page.locator("#sessions li[data-key]").evaluateAll((lis) => lis.map((li) => li.dataset.key));
  await shot("session-deleted");
  await page.keyboard.press("Escape");
  await page.click("#delete-session");
  await page.click("#delete-session");
  await page.locator("#status-line", { hasText: "Deleted session browser-second" }).waitFor();
  seen.openDeletedStatus = await page.locator("#status-line").textContent();
  await page.locator("#sessions li[data-key=browser-second]").waitFor({ state: "detached" });
  seen.sessionsAfter = await page.locator("#sessions li[data-key]").evaluateAll((lis) => lis.map((li) => li.dataset.key));
  await shot("open-session-deleted");

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
