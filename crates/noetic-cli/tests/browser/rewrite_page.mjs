// The page's view of a rewrite rule at work (wide screen): the call's block in the conversation, the timeline's "arguments rewritten" line, and the
// ledger's rewrite row with the arguments before and after and the rule's reason; text the model wrote stays text.
// Run by tests/serve_ledger.rs:
//
//   node rewrite_page.mjs BASE_URL SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { launch, openPage, openSession, runSteps } from "./harness.mjs";

const [base, shots] = process.argv.slice(2);
const browser = await launch();
const consoleErrors = [];
const page = await openPage(browser, consoleErrors);
const seen = {};

await runSteps(browser, page, shots, seen, consoleErrors, async (shot) => {
  await openSession(page, base, "rewrite-1");
  await page.fill("#message", "save the settings");
  await page.press("#message", "Enter");
  await page.locator("#chat li.assistant", { hasText: "Saved." }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();

  // The call's block in the conversation keeps what the model wrote and says what runs instead.
  const note = page.locator("#chat li.tool .tool-rewritten");
  await note.waitFor();
  seen.chat = {
    summary: await page.locator("#chat li.tool .tool-summary").textContent(),
    note: await note.evaluate((n) => n.firstChild.textContent),
    runs: await note.locator("pre").textContent(),
    status: await page.locator("#chat li.tool .tool-status").textContent(),
  };
  await shot("chat-rewrite");

  const rewritten = page.locator("#timeline li[data-type=tool_call_rewritten]");
  await rewritten.waitFor();
  seen.timeline = {
    kind: await rewritten.locator(".kind").textContent(),
    text: await rewritten.textContent(),
  };
  await shot("timeline-rewrite");

  await page.click(".tab[data-tab=ledger]");
  const row = page.locator("#ledger-rows tr.rule-row", { has: page.locator("td.action.rewrite") });
  await row.waitFor();
  seen.rewrite = await row.evaluate((tr) => ({
    pill: tr.querySelector("td.action .pill").textContent,
    rule: tr.querySelector("td.rule .rule-id").textContent,
    subjects: [...tr.querySelectorAll("td.detail .subject")].map((s) => s.textContent),
    guidance: tr.querySelector("td.detail .guidance").textContent,
  }));
  // The model's text reached the page only as text: no element it spelled out was made.
  seen.injected = await page.locator("#ledger-rows img, #timeline img, #chat img").count();
  await shot("ledger-rewrite-row");
});
