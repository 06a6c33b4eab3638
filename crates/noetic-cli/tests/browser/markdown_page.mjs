// The page `noetic serve` serves, on a phone-sized screen (390 px, then 360 and 420) and a wide one: a scripted
// answer in markdown, which carries script, image, iframe and javascript: link attacks, is rendered as markdown
// and none of the attacks runs or reaches the page as markup; a code block copies; the panes stay reachable and
// Send visible; a turn that fails says why in the conversation. Run by tests/serve.rs:
//
//   node markdown_page.mjs BASE_URL SCREENSHOT_DIR
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
const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
const page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT);
// Panes appear at once (no sliding), so each screenshot shows a settled page.
await page.emulateMedia({ reducedMotion: "reduce" });
const seen = { steps: [], dialogs: 0, requestsElsewhere: [] };
const consoleErrors = [];
page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
page.on("pageerror", (e) => consoleErrors.push(String(e)));
page.on("dialog", (d) => { seen.dialogs += 1; d.dismiss(); });
page.on("request", (r) => { if (!r.url().startsWith(base) && !r.url().startsWith("data:")) seen.requestsElsewhere.push(r.url()); });
let step = 0;

async function shot(name) {
  step += 1;
  const width = page.viewportSize().width;
  const file = path.join(shots, `${String(step).padStart(2, "0")}-${width}px-${name}.png`);
  await page.screenshot({ path: file });
  seen.steps.push(file);
}

// Whether `selector`'s box lies inside the viewport (seen without scrolling sideways).
async function inView(selector) {
  return page.locator(selector).evaluate((node) => {
    const r = node.getBoundingClientRect();
    return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth && r.top >= 0 && r.bottom <= window.innerHeight;
  });
}

const noSideScroll = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

try {
  await page.goto(`${base}/`);
  seen.placeholderBefore = await page.locator("#message").getAttribute("placeholder");
  seen.sendVisible = { 390: await inView("#send") };
  // The sessions pane slides in over the conversation; a new session is opened from it.
  await page.click("#toggle-sessions");
  await page.locator("#sessions-pane").waitFor({ state: "visible" });
  await shot("sessions-drawer");
  await page.fill("#new-session-key", "md-1");
  await page.press("#new-session-key", "Enter");
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#sessions-pane").waitFor({ state: "hidden" });
  seen.drawerClosedOnOpen = true;
  seen.placeholderAfter = await page.locator("#message").getAttribute("placeholder");
  seen.chatLive = await page.locator("#chat").getAttribute("aria-live");
  await shot("opened");

  await page.fill("#message", "how did the checks go?");
  await page.press("#message", "Enter");
  const answer = page.locator("#chat li.assistant").first();
  await answer.locator("table").waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();
  seen.answerBusy = await answer.getAttribute("aria-busy");
  seen.order = await page.locator("#chat > li").evaluateAll((lis) => lis.map((li) => li.className.split(" ")[0]));
  seen.markdown = await answer.evaluate((li) => ({
    heading: li.querySelector("h4") ? li.querySelector("h4").textContent : null,
    strong: [...li.querySelectorAll("strong")].map((n) => n.textContent),
    em: [...li.querySelectorAll("em")].map((n) => n.textContent),
    nestedList: li.querySelectorAll("ol > li ul > li").length,
    tableCells: [...li.querySelectorAll("td")].map((n) => n.textContent),
    code: li.querySelector(".code pre code") ? li.querySelector(".code pre code").textContent : null,
    quote: li.querySelector("blockquote") ? li.querySelector("blockquote").textContent : null,
    links: [...li.querySelectorAll("a")].map((a) => ({ href: a.getAttribute("href"), rel: a.rel, target: a.target, text: a.textContent })),
    text: li.textContent,
  }));
  seen.attack = await page.evaluate(() => ({
    xss: window.__xss === undefined ? null : window.__xss,
    markup: document.querySelectorAll("#chat img, #chat script, #chat iframe, #chat b, #chat [onerror], #chat [src]").length,
    unsafeLinks: [...document.querySelectorAll("a[href]")].filter((a) => !/^https?:/.test(a.href)).length,
  }));
  // Whatever an answer holds, rendering it ends: deep nesting and long runs of markers become text.
  seen.extremes = await page.evaluate(async () => {
    const { renderMarkdown } = await import("/markdown.js");
    const samples = [">".repeat(20000) + " deep", "- ".repeat(5000) + "x", "*_".repeat(20000), "[".repeat(20000), "`".repeat(20000)];
    return samples.map((text) => { try { return renderMarkdown(text).textContent.length > 0; } catch (e) { return String(e); } });
  });
  await shot("markdown-answer");

  // The code block's Copy button puts the code on the clipboard.
  await answer.locator(".code button.copy").click();
  await answer.locator(".code button.copy", { hasText: "Copied" }).waitFor();
  seen.copied = await page.evaluate(() => navigator.clipboard.readText());

  // The script has one answer: the next message fails the turn, and the conversation says why.
  await page.fill("#message", "and the docs?");
  await page.click("#send");
  const failed = page.locator("#chat li.turn-error");
  await failed.waitFor();
  seen.failure = await failed.textContent();
  seen.failureIsLast = await page.locator("#chat > li").last().evaluate((li) => li.classList.contains("turn-error"));
  await page.locator("#session-state[data-state=idle]").waitFor();
  await shot("failed-turn");
  // Reading the session again keeps the failure where it happened.
  await page.reload();
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#chat li.turn-error").waitFor();
  seen.failureAfterReload = await page.locator("#chat li.turn-error").count();

  // The activity pane slides in too, with the ledger and the timeline.
  await page.click("#toggle-side");
  await page.locator("#side-pane").waitFor({ state: "visible" });
  // It slides in: wait until it stands inside the screen.
  await page.waitForFunction(() => {
    const r = document.getElementById("side-pane").getBoundingClientRect();
    return r.left >= 0 && r.right <= window.innerWidth;
  });
  seen.sideFits = await inView("#side-pane");
  await page.click(".tab[data-tab=timeline]");
  seen.timelineFailed = await page.locator("#timeline li[data-type=turn_failed]").count();
  await shot("activity-pane");
  await page.keyboard.press("Escape");
  await page.locator("#side-pane").waitFor({ state: "hidden" });
  seen.noSideScroll = { 390: await noSideScroll() };

  for (const width of [360, 420]) {
    await page.setViewportSize({ width, height: 800 });
    seen.sendVisible[width] = await inView("#send");
    seen.noSideScroll[width] = await noSideScroll();
    await shot("layout");
  }
  await page.setViewportSize({ width: 1400, height: 900 });
  seen.sendVisible[1400] = await inView("#send");
  seen.wideColumns = await page.evaluate(() => ["#sessions-pane", "#chat-pane", "#side-pane"].map((s) => document.querySelector(s).getBoundingClientRect().width > 150));
  await shot("wide");

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
