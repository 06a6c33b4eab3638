// The page's ledger with a shadow rule (wide screen): a turn's live decisions, each shadow rule's would-be decision
// in a marked row after the live one, the rows where they differ marked more, and the count of disagreements
// above the table. Run by tests/serve_ledger.rs:
//
//   node ledger_page.mjs BASE_URL SCREENSHOT_DIR
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { launch, openPage, openSession, runSteps } from "./harness.mjs";

const [base, shots] = process.argv.slice(2);
const browser = await launch();
const consoleErrors = [];
const page = await openPage(browser, consoleErrors);
const seen = {};

await runSteps(browser, page, shots, seen, consoleErrors, async (shot) => {
  await openSession(page, base, "ledger-1");
  await page.fill("#message", "tidy up");
  await page.press("#message", "Enter");
  await page.locator("#chat li.assistant", { hasText: "Tidied." }).waitFor();
  await page.locator("#session-state[data-state=idle]").waitFor();

  await page.click(".tab[data-tab=ledger]");
  await page.locator("#ledger-rows tr.shadow").nth(1).waitFor();
  seen.rows = await page.locator("#ledger-rows tr.rule-row").evaluateAll((trs) => trs.map((tr) => ({
    classes: [...tr.classList].filter((c) => c !== "rule-row").sort(),
    decision: tr.querySelector("td.action").textContent,
    rule: tr.querySelector("td.rule .rule-id").textContent,
    shadowNote: tr.querySelector(".shadow-note") ? tr.querySelector(".shadow-note").textContent : null,
    subject: tr.querySelector("td.detail .subject").textContent,
  })));
  seen.summary = await page.locator("#ledger-shadow").textContent();
  seen.summaryVisible = await page.locator("#ledger-shadow").isVisible();
  seen.marked = await page.locator("#ledger-rows tr.shadow.disagrees td").first().evaluate((td) => getComputedStyle(td).boxShadow);
  await shot("ledger-with-shadow-rows");

  // A phone: the ledger in the activity drawer, each decision a card whose rule and call fit the width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click("#toggle-side");
  await page.locator("#side-pane").waitFor({ state: "visible" });
  seen.phoneRowsFit = await page.locator("#ledger-rows tr.rule-row").evaluateAll((trs) => trs.every((tr) => {
    const r = tr.getBoundingClientRect();
    const rule = tr.querySelector("td.rule .rule-id").getBoundingClientRect();
    return r.left >= 0 && r.right <= window.innerWidth && rule.width > 40;
  }));
  await shot("ledger-390px");
});
