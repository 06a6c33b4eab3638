// Pages on other origins attack a `noetic serve` whose session "victim" has a command waiting for approval: a page
// on another site (evil.test, mapped to 127.0.0.1) and one on another port of the same machine send no-CORS
// fetches and form posts to stop, continue, resume, steer and approve. Then a name that resolves to the server
// (rebind.test, the DNS rebinding case) loads the page and approves from its "own" origin. Last, the real page
// stops the turn. Run by tests/serve_guards.rs:
//
//   node cross_site.mjs BASE_URL
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import http from "node:http";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_BROWSER_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");

const [base] = process.argv.slice(2);
const port = new URL(base).port;
const STEP_TIMEOUT = 60_000;

// The attacker's page: what any web site can make a browser send without being able to read the answer.
const attackPage = `<!doctype html>
<html><body>
<iframe name="approve-sink"></iframe>
<iframe name="stop-sink"></iframe>
<form id="approve" method="POST" enctype="text/plain" target="approve-sink" action="${base}/api/approvals/c1">
  <input name='{"approve":true,"session":"victim","x":"' value='"}'>
</form>
<form id="stop" method="POST" target="stop-sink" action="${base}/api/sessions/victim/stop"></form>
<script>
window.attack = async () => {
  const post = (route, init) => fetch("${base}" + route, Object.assign({ method: "POST", mode: "no-cors" }, init)).catch(() => {});
  const text = { "Content-Type": "text/plain" };
  await post("/api/sessions/victim/stop");
  await post("/api/sessions/victim/continue");
  await post("/api/sessions/victim/resume");
  await post("/api/sessions/victim/messages", { headers: text, body: JSON.stringify({ text: "forged from another site" }) });
  await post("/api/approvals/c1", { headers: text, body: JSON.stringify({ approve: true, session: "victim" }) });
  // Needs a CORS preflight, which the server does not grant: never sent.
  await fetch("${base}/api/sessions/victim/mode", { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ mode: "all" }) }).catch(() => {});
};
</script>
</body></html>`;

const attacker = http.createServer((req, res) => {
  res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
  res.end(attackPage);
});
await new Promise((resolve) => attacker.listen(0, "127.0.0.1", resolve));
const attackerPort = attacker.address().port;

async function api(route) {
  const r = await fetch(base + route);
  return r.json();
}

async function state() {
  const session = await api("/api/sessions/victim");
  const approvals = await api("/api/approvals?session=victim");
  return {
    busy: session.busy,
    queued: session.queued,
    steering_mode: session.steering_mode,
    pending: approvals.approvals.map((a) => a.call_id),
  };
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP rebind.test 127.0.0.1",
    "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable"],
});
const seen = {};

// The answers the server gave to the pages' state-changing requests (the browser sees them, the page does not).
async function attackFrom(origin) {
  const page = await browser.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT);
  const answers = [];
  page.on("response", (r) => {
    const method = r.request().method();
    if (r.url().startsWith(base) && method !== "GET" && method !== "OPTIONS") {
      answers.push({ method, url: r.url().slice(base.length), status: r.status() });
    }
  });
  await page.goto(`${origin}/attack.html`);
  await page.evaluate(() => window.attack());
  // Each form into its own frame: a navigation started while a frame shows a blocked answer may be dropped.
  for (const form of ["approve", "stop"]) {
    const answered = page.waitForResponse((r) => r.url().startsWith(base) && r.request().method() === "POST" && r.request().resourceType() === "document");
    await page.evaluate((id) => document.getElementById(id).submit(), form);
    await answered;
  }
  await page.close();
  return answers;
}

try {
  seen.crossSite = await attackFrom(`http://evil.test:${attackerPort}`);
  seen.sameSite = await attackFrom(`http://127.0.0.1:${attackerPort}`);
  seen.afterAttacks = await state();

  // DNS rebinding: the attacker's name now resolves to the server, so its page is "same-origin" with the API.
  const rebind = await browser.newPage();
  rebind.setDefaultTimeout(STEP_TIMEOUT);
  const loaded = await rebind.goto(`http://rebind.test:${port}/`);
  seen.rebindPage = loaded.status();
  seen.rebindApprove = await rebind.evaluate(async () => {
    const r = await fetch("/api/approvals/c1", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Noetic-Request": "1" },
      body: JSON.stringify({ approve: true, session: "victim" }),
    });
    const body = await r.json();
    return { status: r.status, code: body.error ? body.error.code : null };
  });
  await rebind.close();
  seen.afterRebind = await state();

  // The real page still stops the turn.
  const page = await browser.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT);
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(`${base}/#session=victim`);
  await page.locator("#connection[data-state=live]").waitFor();
  await page.locator("#stop:not([disabled])").click();
  await page.locator("#stop[disabled]").waitFor();
  seen.stoppedByPage = (await state()).busy === false;
  seen.consoleErrors = consoleErrors;
  console.log(JSON.stringify(seen));
  await browser.close();
  attacker.close();
} catch (e) {
  console.error(`failed: ${e.message}`);
  console.log(JSON.stringify(seen));
  await browser.close();
  attacker.close();
  process.exit(1);
}
