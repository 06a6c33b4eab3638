// What the page scripts share: Chromium (from NOETIC_BROWSER_DIR's playwright-core, the executable from CHROMIUM or
// /usr/bin/chromium), headless and quiet, and a page that waits up to a minute per step, prefers reduced motion and
// records every console error and uncaught exception in `consoleErrors`.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_BROWSER_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");

/** How long one step may wait. */
export const STEP_TIMEOUT = 60_000;

/** Chromium, headless, with nothing of its own on the network. */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/** Sets `page`'s step timeout and records its console errors and uncaught exceptions in `consoleErrors`. */
export function watch(page, consoleErrors) {
  page.setDefaultTimeout(STEP_TIMEOUT);
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
}

/** A new page of `browser` at `viewport`, watched (see `watch`), with reduced motion. */
export async function openPage(browser, consoleErrors, viewport = { width: 1400, height: 900 }) {
  const page = await (await browser.newContext({ viewport })).newPage();
  watch(page, consoleErrors);
  await page.emulateMedia({ reducedMotion: "reduce" });
  return page;
}

/** Opens the page at `base` and a session `key` from its session list; resolves once its events are live. */
export async function openSession(page, base, key) {
  await page.goto(`${base}/`);
  await page.fill("#new-session-key", key);
  await page.press("#new-session-key", "Enter");
  await page.locator("#connection[data-state=live]").waitFor();
}

/**
 * Runs a page script's `steps(shot)` on `page`: `shot(name)` saves `NN-name.png` in `dir` (or what `fileName(NN,
 * name)` says) and lists it in `seen.steps`. Afterwards `seen` (with `consoleErrors`) is printed as one JSON line and
 * the browser closed; a step that fails is shot as "failed", named on stderr with the console errors, and ends the
 * process with status 1.
 */
export async function runSteps(browser, page, dir, seen, consoleErrors, steps, fileName = (nn, name) => `${nn}-${name}.png`) {
  fs.mkdirSync(dir, { recursive: true });
  seen.steps = [];
  let step = 0;
  const shot = async (name) => {
    step += 1;
    const file = path.join(dir, fileName(String(step).padStart(2, "0"), name));
    await page.screenshot({ path: file });
    seen.steps.push(file);
  };
  try {
    await steps(shot);
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
}
