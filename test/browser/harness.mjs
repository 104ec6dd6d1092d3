// The frame every browser scenario shares (dashboard.mjs, usage.mjs): the environment browser_test.go sets, checks
// that count failures, the API with the admin key, Debian's Chromium through playwright-core with console, page
// error and CSP capture, and screen(): axe (WCAG 2.2 AA) and a screenshot in both themes. finish() checks what was
// captured and exits with the scenario's outcome.
import { createRequire } from "node:module";
import { readFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

export const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
export const BASE = env("GATEWAY_URL");
export const KEY = env("API_KEY");
export const SLUG = env("MODEL_SLUG");
export const OUT = env("OUT_DIR");
const require = createRequire(join(env("WEB_DIR"), "package.json"));
const { chromium } = require("playwright-core");
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
mkdirSync(OUT, { recursive: true });

// run makes this run's names unique.
export const run = Date.now().toString(36);
let failures = 0;
export function check(cond, what) {
  console.log(`${cond ? "ok  " : "FAIL"} ${what}`);
  if (!cond) failures++;
  return cond;
}
export function must(cond, what) {
  if (!check(cond, what)) throw new Error(`stopping: ${what}`);
}

// api calls gatewayd's /v1 with the admin workspace key, as any API client would.
export async function api(method, path, body, auth = `Bearer ${KEY}`) {
  const res = await fetch(BASE + path, {
    method,
    headers: { Authorization: auth, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: res.status, json, text };
}
// until waits (bounded) for a condition in the page, for what the app does after an event (a render, a focus).
export const until = (page, fn, arg) => page.waitForFunction(fn, arg, { timeout: 10000 }).then(() => true, () => false);

export const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
export const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: "light" });
await context.addInitScript(() => {
  window.__csp = [];
  document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
});
export const page = await context.newPage();
const consoleErrors = [];
// Refusals a scenario provokes on purpose are logged by Chromium as failed loads; only those are expected.
let expectedLoadFailures = [];
export function expectLoadFailures(statuses) {
  expectedLoadFailures = statuses;
}
page.on("console", (m) => {
  if (m.type() !== "error" && m.type() !== "warning") return;
  const t = m.text();
  const expected = expectedLoadFailures.find((s) => t.startsWith("Failed to load resource") && t.includes(`status of ${s}`));
  if (expected) return;
  if (m.type() === "error" || /Content Security Policy/i.test(t)) consoleErrors.push(t);
});
page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
page.on("response", (r) => {
  if (r.status() >= 400) console.log(`     (answer ${r.status()} to ${r.request().method()} ${r.url().replace(BASE, "")})`);
});

const a11y = [];
let shots = 0;
// screen checks the page as it is, in both themes: axe (WCAG 2.2 AA) and a screenshot of each.
export async function screen(name) {
  for (const theme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: theme });
    await page.waitForTimeout(50); // let the theme's styles apply before the screenshot (not an assertion)
    await page.evaluate(axeSource + ";0");
    const res = await page.evaluate(async () =>
      // eslint-disable-next-line no-undef
      axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] } }),
    );
    if (name === "login" && theme === "light") console.log(`     (axe on login: ${res.passes.length} rules passed, ${res.violations.length} violated)`);
    for (const v of res.violations) {
      a11y.push(`${name} (${theme}): ${v.id} ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(" | ")}`);
    }
    await page.screenshot({ path: join(OUT, `${name}-${theme}.png`), fullPage: true });
    shots++;
  }
  await page.emulateMedia({ colorScheme: "light" });
}

// failed records an exception that stopped the scenario, with a screenshot of where it stopped.
export async function failed(e) {
  failures++;
  console.log(`FAIL ${e.stack ?? e}`);
  await page.screenshot({ path: join(OUT, "failure.png"), fullPage: true }).catch(() => {});
}

// finish checks what the whole run captured (CSP violations, console and page errors, axe violations), closes the
// browser and exits 1 when any check failed.
export async function finish() {
  const csp = await page.evaluate(() => window.__csp ?? []).catch(() => []);
  check(csp.length === 0, `no CSP violation${csp.length ? ": " + csp.join("; ") : ""}`);
  check(consoleErrors.length === 0, `no console or page error${consoleErrors.length ? ":\n  " + consoleErrors.join("\n  ") : ""}`);
  check(a11y.length === 0, `zero axe WCAG 2.2 AA violations on every screen in both themes${a11y.length ? ":\n  " + a11y.join("\n  ") : ""}`);
  console.log(`${shots} screenshots in ${OUT}`);
  await browser.close();
  process.exit(failures ? 1 : 0);
}
