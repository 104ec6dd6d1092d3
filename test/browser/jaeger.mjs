// The trace scenario, run by jaeger_test.go (TestJaegerTraceInChromium) against the real local stack, whose gatewayd
// traces every call into a real Jaeger serving its web UI, in Debian's headless Chromium through playwright-core.
// It asserts behaviour only (no timings): a slug routed to a target that refuses every connection ahead of the demo
// upstream answers a call made under a traceparent of the scenario's own; Jaeger's query API holds that trace; its
// page in Jaeger's UI shows gatewayd's server span and a client span per try, the refused one marked as an error,
// and the refused try's tags name its target and the outcome the routing rules gave it; the key the call carried
// appears nowhere on the page. Its screenshot is jaeger-trace.png (docs/jaeger-trace.png).
import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";
import { join } from "node:path";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const BASE = env("GATEWAY_URL");
const ADMIN = env("API_KEY");
const JAEGER = env("JAEGER_URL");
const UPSTREAM = env("UPSTREAM_URL");
const OUT = env("OUT_DIR");
const { chromium } = createRequire(join(env("WEB_DIR"), "package.json"))("playwright-core");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const run = Date.now().toString(36);

let failures = 0;
function check(cond, what) {
  console.log(`${cond ? "ok  " : "FAIL"} ${what}`);
  if (!cond) failures++;
  return cond;
}
function must(cond, what) {
  if (!check(cond, what)) throw new Error(`stopping: ${what}`);
}
async function call(method, path, body, headers = {}) {
  const res = await fetch(BASE + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: res.status, json, text };
}
// retry repeats f until ok(result) or 40 tries, for what reaches gatewayd's view a moment after a write.
async function retry(f, ok) {
  let r;
  for (let i = 0; i < 40; i++) {
    r = await f();
    if (ok(r)) break;
    await sleep(250);
  }
  return r;
}

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  // ---- A slug whose priority-0 target refuses every connection (nothing listens on 127.0.0.1:1), ahead of the
  // demo upstream, as in the README's tour; a group that may call it, and a key of that group.
  const slug = `demo/traced-${run}`;
  const ep = await call("POST", "/v1/gateway/endpoints", {
    slug,
    targets: [
      { name: "down", provider: "OPENAI", base_url: "http://127.0.0.1:1/v1" },
      { name: "demo", provider: "OPENAI", base_url: UPSTREAM, priority: 1 },
    ],
    cooldown: { failures: 1, duration_ms: 60000 },
  });
  must(ep.status === 201, `the two-target Endpoint is created (${ep.status} ${ep.text.slice(0, 200)})`);
  const group = await retry(
    () => call("POST", "/v1/gateway/groups", { metadata: { name: `Traced ${run}`, external_entity_id: `traced-${run}` }, models: [{ slug }] }),
    (r) => r.status === 201,
  );
  must(group.status === 201, `a group that may call ${slug} is created (${group.status} ${group.text.slice(0, 200)})`);
  const minted = await call("POST", `/v1/gateway/groups/${group.json.id}/api_keys`, { name: "traced" });
  must(minted.status === 201, `a key is minted (${minted.status})`);
  const key = minted.json.api_key;

  // ---- The call, under a traceparent of the scenario's own: the refused try, then the answer from "demo". Calls
  // refused before the key or the slug reach gatewayd's view (401, 403, 404) make no try.
  const traceID = randomBytes(16).toString("hex");
  const answered = await retry(
    () => call("POST", "/v1/chat/completions", { model: slug, messages: [{ role: "user", content: "hello" }] },
      { Authorization: `Api-Key ${key}`, traceparent: `00-${traceID}-${randomBytes(8).toString("hex")}-01` }),
    (r) => ![401, 403, 404].includes(r.status),
  );
  must(answered.status === 200, `the call answers through the second target (${answered.status} ${answered.text.slice(0, 200)})`);

  // ---- Jaeger's query API holds the trace: the server span and a client span per try.
  const spans = await retry(async () => {
    const r = await fetch(`${JAEGER}/api/traces/${traceID}`);
    return r.ok ? ((await r.json()).data?.[0]?.spans ?? []) : [];
  }, (s) => s.length >= 3);
  const tag = (s, k) => s.tags.find((t) => t.key === k)?.value;
  must(spans.length === 3, `Jaeger holds the call's three spans (${spans.length})`);
  const tries = spans.filter((s) => tag(s, "span.kind") === "client");
  check(tries.map((s) => `${tag(s, "modelgate.target")}:${tag(s, "modelgate.try.outcome")}`).sort().join(",") === "demo:ok,down:unreachable",
    `the tries are down (unreachable) and demo (ok): ${tries.map((s) => `${tag(s, "modelgate.target")}:${tag(s, "modelgate.try.outcome")}`)}`);

  // ---- The trace's page in Jaeger's UI.
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${JAEGER}/trace/${traceID}`);
  await page.waitForSelector(".span-row", { timeout: 30000 });
  const rows = page.locator(".span-row");
  must((await rows.count()) === 3, `the trace page draws three span rows (${await rows.count()})`);
  const names = await page.locator(".span-row .endpoint-name").allTextContents();
  check(names.every((n) => n.trim() === `chat ${slug}`), `every span is named "chat ${slug}" (${names.join(" | ")})`);
  const services = await page.locator(".span-row .span-svc-name").allTextContents();
  check(services.every((s) => s.includes("gatewayd")), `every span is gatewayd's (${services.join(" | ")})`);
  const failed = page.locator(".span-row", { has: page.locator(".SpanBarRow--errorIcon") });
  must((await failed.count()) === 1, `one span row is marked as an error, the refused try (${await failed.count()})`);
  await failed.locator(".span-name").click();
  const detail = page.locator(".detail-row").first();
  await detail.waitFor({ timeout: 10000 });
  // Its tags, opened into their table: a row per tag.
  await detail.locator(".AccordianKeyValues--header").first().click();
  await detail.locator(".KeyValueTable--row").first().waitFor({ timeout: 10000 });
  const tags = Object.fromEntries(await detail.locator(".KeyValueTable--row").evaluateAll((rows) =>
    rows.map((r) => [r.querySelector(".KeyValueTable--keyColumn").textContent.trim(), r.querySelector(".KeyValueTable--valueColumn .json-markup")?.textContent.trim()])));
  check(tags["modelgate.target"] === "down", `the refused try's tags name its target, down (${tags["modelgate.target"]})`);
  check(tags["modelgate.try.outcome"] === "unreachable", `the refused try's tags hold its outcome, unreachable (${tags["modelgate.try.outcome"]})`);
  check(tags["server.address"] === "127.0.0.1" && tags["server.port"] === "1", `the refused try's tags hold the address it tried (${tags["server.address"]}:${tags["server.port"]})`);
  check(tags["span.kind"] === "client", `the refused try is a client span (${tags["span.kind"]})`);
  const text = await page.locator("body").innerText();
  check(!text.includes(key) && !text.includes(ADMIN), "neither the caller's key nor the admin key is on the page");
  await page.screenshot({ path: join(OUT, "jaeger-trace.png"), fullPage: true });
  await context.close();
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack ?? e}`);
} finally {
  await browser.close();
}
process.exit(failures === 0 ? 0 : 1);
