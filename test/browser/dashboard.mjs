// The dashboard scenario, run by browser_test.go against the real local stack in Debian's headless Chromium
// through playwright-core. It asserts behaviour only (no timings): login; a root created with `60k` holds 60000
// through the API; a child above its parent is refused before submit, then parent and child are raised and saved;
// a server refusal is shown next to its field in the server's words; a minted key is called until 429, the 429
// shows on the group page under the limit that refused it, the key is revoked and the next call is 401; a bulk
// limit edit is refused next to each group, then saved to both (checked through the API); a bulk delete shows the
// subtrees; a subtree is deleted; the tree is navigated with the keyboard over five levels; workspace keys are
// offered as authz.Decide allows each key type, and an organization admin creates a team key for the shared model
// API (a refused name shown next to its field, the secret shown once and copied, the key calling the model API),
// renames it and revokes it after a confirmation; an Endpoint of two targets whose first refuses connections shows
// that target cooling until a time and the other up; zero axe (WCAG 2.2 AA) violations on every screen in both themes;
// no console error, page error or CSP violation. Screenshots of every screen in both themes go to OUT_DIR.
import { readFileSync } from "node:fs";
import { api, BASE, check, context, env, expectLoadFailures, failed, finish, KEY, must, OUT, page, run, screen, SLUG, until } from "./harness.mjs";
import { join } from "node:path";

const KEYS_KEY = env("KEYS_API_KEY");
const OWNER_KEY = env("OWNER_API_KEY");
const byExt = async (ext) => (await api("GET", `/v1/gateway/groups?external_entity_id=${encodeURIComponent(ext)}`)).json?.items ?? [];
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });

// openKeysAs signs in with key and opens the workspace keys screen.
async function openKeysAs(key) {
  await page.fill("#api-key", key);
  await page.click("button[type=submit]");
  await page.getByRole("navigation", { name: "Main" }).waitFor();
  await page.getByRole("link", { name: "Workspace keys" }).click();
  await page.getByRole("heading", { level: 1, name: "Workspace keys" }).waitFor();
  await page.locator("[aria-busy=true]").waitFor({ state: "detached" });
}

try {
  // ---- No fallback to the app under /v1.
  const nf = await api("GET", "/v1/no-such-route");
  check(nf.status === 404 && !nf.text.includes('id="app"'), "/v1/no-such-route is a 404 of the API, not the app");

  // ---- Login: a wrong key is refused next to the field, in the server's words; the right one signs in.
  await page.goto(BASE + "/dashboard/");
  await page.locator("#api-key").waitFor();
  await screen("login");
  expectLoadFailures(["401"]);
  await page.fill("#api-key", "mg_wrong.wrongwrongwrong");
  await page.click("button[type=submit]");
  const loginErr = page.locator("#api-key-error");
  await loginErr.waitFor();
  check((await loginErr.textContent()) === "Unknown or revoked API key.", "a wrong key is refused next to the field in the server's words");
  expectLoadFailures([]);
  await page.fill("#api-key", KEY);
  await page.click("button[type=submit]");
  await page.getByRole("navigation", { name: "Main" }).waitFor();
  check(await page.getByRole("heading", { level: 1, name: "Groups" }).isVisible(), "login shows the group tree");
  const storage = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  check(!storage.includes(KEY.split(".")[1]) && !storage.includes("modelgate_session"), "neither the key nor the session is readable by script");
  const cookies = await context.cookies();
  const sess = cookies.find((c) => c.name === "__Host-modelgate_session");
  check(sess && sess.httpOnly && sess.secure && sess.sameSite === "Strict", "the session cookie is HttpOnly, Secure, SameSite=Strict");

  // ---- Theme toggle: system → light → dark → system.
  const toggle = page.locator("button.theme");
  await toggle.click();
  check(await until(page, () => document.documentElement.dataset.theme === "light"), "the toggle pins the light theme");
  await toggle.click();
  check(await until(page, () => document.documentElement.dataset.theme === "dark"), "the toggle pins the dark theme");
  await toggle.click();
  check(await until(page, () => document.documentElement.dataset.theme === undefined), "the toggle returns to the system theme");

  // ---- Create a root with 60k.
  const rootExt = `acme-${run}`;
  await page.click("text=New root group");
  await page.locator("#ext").waitFor();
  await page.fill("#name", `Acme ${run}`);
  await page.fill("#ext", rootExt);
  await page.fill('input[id^="slug-"]', SLUG);
  const thr = page.locator('input[id^="thr-"]').first();
  await thr.fill("60k");
  const eq = page.locator('[id$="-eq"]').first();
  check((await eq.textContent()) === "= 60,000", "60k shows = 60,000");
  await thr.fill("1m");
  check((await page.locator(".thr .field-error").first().textContent()).includes("Lowercase m is ambiguous"), "1m is refused as ambiguous next to the field");
  await thr.fill("60k");
  await screen("group-new");
  await page.click("button:has-text('Create group')");
  await page.getByRole("heading", { name: "Effective limits" }).waitFor();
  const [root] = await byExt(rootExt);
  must(root, "the root exists through the API");
  must(root.models[0].rate_limits[0].threshold === 60000 && Number.isInteger(root.models[0].rate_limits[0].threshold), "the root holds 60000 through the API");
  check(root.hierarchy.limit_enforcement === "CASCADING", "the root is CASCADING");

  // ---- A server refusal, next to its field, in the server's words: a second root with the same external id.
  expectLoadFailures(["409", "400"]);
  await page.goto(BASE + "/dashboard/groups/new");
  await page.locator("#ext").waitFor();
  await page.fill("#ext", rootExt);
  await page.fill('input[id^="slug-"]', SLUG);
  await page.locator('input[id^="thr-"]').first().fill("1k");
  await page.click("button:has-text('Create group')");
  const extErr = page.locator("#ext-err");
  await extErr.waitFor();
  const dup = await api("POST", "/v1/gateway/groups?dry_run=true", { metadata: { external_entity_id: rootExt }, models: [{ slug: SLUG }] });
  const serverWords = dup.json?.detail?.find?.((d) => d.field === "metadata.external_entity_id")?.message ?? dup.json?.error;
  check(dup.status >= 400 && (await extErr.textContent()) === serverWords, `the duplicate external id is refused next to its field in the server's words (${serverWords})`);
  check((await byExt(rootExt)).length === 1, "the dry run and the refused create stored nothing");
  expectLoadFailures([]);

  // ---- A child above its parent is refused before submit.
  const childExt = `team-${run}`;
  let requests = 0;
  const count = (r) => { if (r.url().includes("/v1/gateway/groups") && r.method() !== "GET") requests++; };
  await page.goto(`${BASE}/dashboard/groups/new?parent=${root.id}`);
  await page.locator("#ext").waitFor();
  page.on("request", count);
  await page.fill("#name", `Team ${run}`);
  await page.fill("#ext", childExt);
  await page.fill('input[id^="slug-"]', SLUG);
  await page.locator('input[id^="thr-"]').first().fill("70k");
  await page.click("button:has-text('Create group')");
  const childErr = page.locator(".thr .field-error").first();
  await childErr.waitFor();
  const childMsg = await childErr.textContent();
  check(childMsg.startsWith("Child group exceeds parent group limit.") && childMsg.includes(`ancestor ${root.id} allows 60000`), `the child above its parent is refused next to the field: ${childMsg}`);
  check(requests === 0, "nothing was sent for the refused child");
  page.off("request", count);
  await screen("group-new-refused");
  check((await byExt(childExt)).length === 0, "the refused child does not exist");

  // ---- Raise the parent to 80k, then the child at 70k saves.
  await page.goto(`${BASE}/dashboard/groups/${root.id}`);
  await page.getByRole("button", { name: "Edit" }).click();
  await page.locator('input[id^="thr-"]').first().fill("80k");
  await screen("group-edit");
  await page.click("button:has-text('Save')");
  await page.locator("p.notice", { hasText: "Saved." }).waitFor();
  const raised = (await api("GET", `/v1/gateway/groups/${root.id}`)).json;
  check(raised.models[0].rate_limits[0].threshold === 80000, "the parent holds 80000");
  await page.goto(`${BASE}/dashboard/groups/new?parent=${root.id}`);
  await page.locator("#ext").waitFor();
  await page.fill("#name", `Team ${run}`);
  await page.fill("#ext", childExt);
  await page.fill('input[id^="slug-"]', SLUG);
  await page.locator('input[id^="thr-"]').first().fill("70k");
  await page.click("button:has-text('Create group')");
  await page.getByRole("heading", { name: "Effective limits" }).waitFor();
  const [child] = await byExt(childExt);
  check(child && child.models[0].rate_limits[0].threshold === 70000 && child.hierarchy.parent_group_id === root.id, "the child holds 70000 under the parent");

  // ---- The server's refusal next to the field: the form checked against a parent that changed since it loaded.
  await page.goto(`${BASE}/dashboard/groups/new?parent=${root.id}`);
  await page.locator("#ext").waitFor();
  await page.fill("#ext", `late-${run}`);
  await page.fill('input[id^="slug-"]', SLUG);
  await page.locator('input[id^="thr-"]').first().fill("75k");
  const lowered = await api("PATCH", `/v1/gateway/groups/${root.id}`, { models: [{ slug: SLUG, rate_limits: [{ type: "REQUEST", unit: "MINUTE", threshold: 72000 }] }] });
  must(lowered.status === 200, `the parent is lowered to 72000 behind the form's back (${lowered.status})`);
  expectLoadFailures(["400"]);
  await page.click("button:has-text('Create group')");
  const lateErr = page.locator(".thr .field-error").first();
  await lateErr.waitFor();
  const lateMsg = await lateErr.textContent();
  check(lateMsg.startsWith("Child group exceeds parent group limit.") && lateMsg.includes("72000"), `the server's dry run refuses it, shown next to the field in its words: ${lateMsg}`);
  check((await byExt(`late-${run}`)).length === 0, "the refused child does not exist");
  expectLoadFailures([]);
  await screen("group-new-server-refused");

  // ---- A leaf with a tight limit: mint a key, call until 429, see it on the group page, revoke, then 401.
  const leafExt = `leaf-${run}`;
  await page.goto(`${BASE}/dashboard/groups/new?parent=${child.id}`);
  await page.locator("#ext").waitFor();
  await page.fill("#name", `Leaf ${run}`);
  await page.fill("#ext", leafExt);
  await page.fill('input[id^="slug-"]', SLUG);
  await page.locator('input[id^="thr-"]').first().fill("2");
  // A usage (DAY) limit too, so the usage bar and the near-limit filter have something to show.
  await page.click("button:has-text('Add limit')");
  await page.locator(".limit-row").nth(1).locator("select").nth(1).selectOption("DAY");
  await page.locator('input[id^="thr-"]').nth(1).fill("2");
  // A budget in dollars: COST takes money, and goes to the API in micro-USD.
  await page.click("button:has-text('Add limit')");
  const costRow = page.locator(".limit-row").nth(2);
  await costRow.locator("select").nth(0).selectOption("COST");
  check((await costRow.locator("select").nth(1).inputValue()) === "MONTH", "choosing COST moves a per-minute limit to MONTH");
  await page.locator('input[id^="thr-"]').nth(2).fill("$1.5k");
  check((await costRow.locator(".equals").textContent()).includes("1,500,000,000 micro-USD"), "$1.5k reads as 1,500,000,000 micro-USD");
  await page.click("button:has-text('Create group')");
  await page.getByRole("heading", { name: "Effective limits" }).waitFor();
  const [leaf] = await byExt(leafExt);
  must(leaf, "the leaf exists");
  check(leaf.models[0].usage_limits.some((l) => l.type === "COST" && l.unit === "MONTH" && l.threshold === 1500000000), "the leaf holds a COST MONTH limit of 1,500,000,000 micro-USD");
  check((await page.content()).includes("$1.5k"), "the effective limits show the budget in dollars");
  check(await page.locator("tr.binding").count() >= 1, "the binding limit is highlighted in CASCADING mode");
  check((await page.locator("tr.binding").first().textContent()).includes("2"), "the leaf's own 2/minute is the limit that binds");
  await page.fill("#key-name", `e2e-${run}`);
  await page.click("button:has-text('Mint key')");
  const minted = page.locator("#minted-key");
  await minted.waitFor();
  const leafKey = (await minted.textContent()).trim();
  await screen("group-key-minted");
  await page.click("button:has-text('Copy key')");
  check((await page.evaluate(() => navigator.clipboard.readText())) === leafKey, "Copy puts the minted key on the clipboard");
  await page.click("button:has-text('Done, hide it')");
  check(!(await page.content()).includes(leafKey), "the minted key is gone from the page once hidden");
  await page.reload();
  check(!(await page.content()).includes(leafKey), "the minted key is shown once, not after a reload");

  const call = () => api("POST", "/v1/chat/completions", { model: SLUG, messages: [{ role: "user", content: "hi" }] }, `Api-Key ${leafKey}`);
  let got429 = false;
  const statuses = [];
  for (let i = 0; i < 10 && !got429; i++) {
    const r = await call();
    statuses.push(r.status);
    got429 = r.status === 429;
  }
  must(got429, `the leaf's key is throttled (statuses ${statuses.join(",")})`);
  // Billing events are written in batches: reload until the page shows the 429 (bounded, not timed).
  let shown = false;
  for (let i = 0; i < 40 && !shown; i++) {
    await page.goto(`${BASE}/dashboard/groups/${leaf.id}`);
    await page.getByRole("heading", { name: "429s in the last hour" }).waitFor();
    shown = (await page.locator("table.throttles td.mono", { hasText: SLUG }).count()) > 0;
    if (!shown) await page.waitForTimeout(250);
  }
  check(shown, "the 429 shows on the group page");
  // The page names the limit that refused, as the API counts it: the leaf's own limit, set on the leaf.
  const thrItems = (await api("GET", `/v1/gateway/throttles?group_id=${leaf.id}`)).json?.items ?? [];
  const refused = thrItems.find((t) => t.slug === SLUG && t.refused_by === "GROUP_LIMIT");
  check(refused && refused.source_group_id === leaf.id && refused.count >= 1, `the API counts the 429 under the leaf's own limit (${JSON.stringify(thrItems)})`);
  const label = refused ? `${refused.limit_type} / ${refused.limit_unit} (set on Leaf ${run})` : "(none)";
  check((await page.locator("table.throttles td.limit", { hasText: label }).count()) === 1, `the group page charts the 429 under its limit: ${label}`);
  const meter = page.locator("ul.bars li", { hasText: "REQUEST per DAY" }).locator("meter");
  check((await meter.getAttribute("value")) === "2" && (await meter.getAttribute("max")) === "2", "the usage bar shows 2 of 2");
  check((await page.locator("ul.bars li", { hasText: "COST per MONTH" }).textContent()).includes("$0 / $1.5k"), "the budget's bar reads in dollars: $0 of $1.5k (the demo target has no price)");
  check((await page.locator("ul.bars").textContent()).includes("UTC"), "the usage bar names its UTC reset");
  await screen("group");
  await page.screenshot({ path: join(OUT, "group-page.png"), fullPage: true });

  // Tree: the throttled filter finds the leaf.
  await page.goto(`${BASE}/dashboard/?filter=throttled`);
  await page.getByRole("tree").waitFor();
  check((await page.getByRole("treeitem").filter({ hasText: `Leaf ${run}` }).count()) === 1, "the throttled filter shows the leaf");
  check((await page.getByRole("treeitem").count()) === 3, "the throttled filter shows only the leaf with its two ancestors");
  await page.getByLabel("Near limit (≥80%)").check();
  await page.waitForURL(/filter=near/);
  await page.getByRole("tree").waitFor();
  check((await page.getByRole("treeitem").filter({ hasText: `Leaf ${run}` }).locator(".usage.near").textContent()) === "100%", "the near-limit filter shows the leaf at 100% of its usage limit");

  // The session cookie is for the management API only: a model call from the page gets no credential from it.
  expectLoadFailures(["401"]);
  const cookieCall = await page.evaluate(async (slug) => {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ model: slug, messages: [{ role: "user", content: "hi" }] }) });
    return r.status;
  }, SLUG);
  check(cookieCall === 401, `a model call with only the session cookie is 401 (got ${cookieCall})`);
  expectLoadFailures([]);

  await page.goto(`${BASE}/dashboard/groups/${leaf.id}`);
  const oldPrefix = leafKey.slice(0, 16);
  // Rotation: mint the new key, then the page offers to revoke the old one.
  await page.getByRole("button", { name: `Rotate key ${oldPrefix}` }).click();
  const dialog = page.getByRole("dialog");
  await dialog.waitFor();
  const rotated = (await page.locator("#minted-key").textContent()).trim();
  check(rotated !== leafKey && (await dialog.textContent()).includes(`Revoke the old key ${oldPrefix}`), "rotate mints a new key and offers to revoke the old one");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await page.click("button:has-text('Done, hide it')");
  await page.getByRole("button", { name: `Revoke key ${oldPrefix}` }).click();
  await dialog.waitFor();
  await screen("group-revoke-confirm");
  await dialog.getByRole("button", { name: "Revoke key" }).click();
  await page.locator("p.notice", { hasText: "revoked" }).waitFor();
  const after = await call();
  check(after.status === 401, `the next call after the revocation is 401 (got ${after.status})`);
  const withNew = await api("POST", "/v1/chat/completions", { model: SLUG, messages: [{ role: "user", content: "hi" }] }, `Api-Key ${rotated}`);
  check(withNew.status === 429, `the rotated key still works, within the group's spent limits (got ${withNew.status})`);

  // ---- Bulk limit edit from the tree: select by keyboard (a checkbox, and Space on a tree item), each group
  // dry-run first. 75k is over the root's 72000: both are refused, next to each group in the server's words, and
  // nothing changes; 71k saves both (parent first), as the API shows.
  await page.goto(`${BASE}/dashboard/`);
  await page.getByRole("tree").waitFor();
  const teamBox = page.getByRole("checkbox", { name: `Select Team ${run}` });
  await teamBox.focus();
  await page.keyboard.press("Space");
  check(await teamBox.isChecked(), "Space on a group's checkbox selects it");
  const leafItem = page.getByRole("treeitem", { name: new RegExp(`^Leaf ${run},`) });
  await leafItem.focus();
  await page.keyboard.press("Space");
  check(await page.getByRole("checkbox", { name: `Select Leaf ${run}` }).isChecked(), "Space on a tree item selects it");
  await page.getByRole("heading", { name: "2 groups selected" }).waitFor();
  await page.fill("#bulk-slug", SLUG);
  await page.fill("#bulk-thr", "75k");
  expectLoadFailures(["400", "403"]);
  await page.click("button:has-text('Apply to 2 selected')");
  const bulkStatus = page.locator(".bulk [role=status]");
  await bulkStatus.filter({ hasText: "0 of 2 groups saved" }).waitFor();
  const teamMsg = await page.getByRole("treeitem", { name: new RegExp(`^Team ${run},`) }).locator(".bulk-msg").textContent();
  check(teamMsg.includes("Child group exceeds parent group limit.") && teamMsg.includes("72000"), `the team's refusal is next to it in the server's words: ${teamMsg}`);
  const leafMsg = await leafItem.locator(".bulk-msg").textContent();
  check(leafMsg.includes("Child group exceeds parent group limit.") && leafMsg.includes("70000"), `the leaf's refusal is next to it in the server's words: ${leafMsg}`);
  const minuteOf = async (id) => (await api("GET", `/v1/gateway/groups/${id}`)).json.models[0].rate_limits.find((l) => l.unit === "MINUTE")?.threshold;
  check((await minuteOf(child.id)) === 70000 && (await minuteOf(leaf.id)) === 2, "the refused bulk edit changed nothing (API)");
  expectLoadFailures([]);
  await screen("tree-bulk-refused");
  await page.fill("#bulk-thr", "71k");
  await page.click("button:has-text('Apply to 2 selected')");
  await bulkStatus.filter({ hasText: "2 of 2 groups saved" }).waitFor();
  check((await minuteOf(child.id)) === 71000 && (await minuteOf(leaf.id)) === 71000, "the bulk edit set 71000 per minute on both groups (API)");
  const leafAfter = (await api("GET", `/v1/gateway/groups/${leaf.id}`)).json;
  check(leafAfter.models[0].usage_limits?.[0]?.threshold === 2, "the bulk edit kept the leaf's other limits");
  await page.getByRole("button", { name: "Clear selection" }).click();

  // ---- Bulk delete: the dialog shows each selected subtree; a selected descendant goes with its ancestor.
  const mk = async (name, parentId) => (await api("POST", "/v1/gateway/groups", {
    metadata: { name: `${name} ${run}`, external_entity_id: `${name.toLowerCase().replace(" ", "")}-${run}` },
    models: [{ slug: SLUG }],
    hierarchy: parentId ? { parent_group_id: parentId } : { limit_enforcement: "INDEPENDENT" },
  })).json;
  const bulkA = await mk("Bulk A", null);
  const bulkA1 = await mk("Bulk A1", bulkA.id);
  const bulkB = await mk("Bulk B", null);
  await page.goto(`${BASE}/dashboard/?q=${encodeURIComponent("Bulk")}`);
  await page.getByRole("tree").waitFor();
  for (const n of ["Bulk A", "Bulk A1", "Bulk B"]) await page.getByRole("checkbox", { name: `Select ${n} ${run}` }).check();
  await page.getByRole("button", { name: "Delete selected…" }).click();
  const bulkDialog = page.getByRole("dialog");
  await bulkDialog.waitFor();
  const bulkListed = await bulkDialog.locator(".subtree > li").allTextContents();
  check(bulkListed.length === 2 && bulkListed[0].includes(`Bulk A1 ${run}`) && bulkListed[1].includes(`Bulk B ${run}`), `the bulk delete dialog shows each subtree (${bulkListed.join(" | ")})`);
  await screen("tree-bulk-delete-confirm");
  await bulkDialog.getByRole("button", { name: "Delete groups and subtrees" }).click();
  for (const g of [bulkA, bulkA1, bulkB]) {
    let status = 0;
    for (let i = 0; i < 80 && status !== 404; i++) {
      status = (await api("GET", `/v1/gateway/groups/${g.id}`)).status;
      if (status !== 404) await new Promise((r) => setTimeout(r, 250));
    }
    check(status === 404, `bulk-deleted ${g.metadata.name}: GET answers 404`);
  }

  // ---- Five levels, keyboard navigation, search with URL state.
  const chain = [];
  let parent = null;
  for (let level = 1; level <= 5; level++) {
    const r = await api("POST", "/v1/gateway/groups", {
      metadata: { name: `Deep ${level} ${run}`, external_entity_id: `deep${level}-${run}` },
      models: [{ slug: SLUG, rate_limits: [{ type: "REQUEST", unit: "MINUTE", threshold: 1000 }] }],
      hierarchy: parent ? { parent_group_id: parent } : { limit_enforcement: "INDEPENDENT" },
    });
    must(r.status === 201, `level ${level} created (${r.status} ${r.text.slice(0, 120)})`);
    chain.push(r.json);
    parent = r.json.id;
  }
  await page.goto(`${BASE}/dashboard/`);
  await page.getByRole("tree").waitFor();
  await screen("tree");
  await page.fill("#tree-search", `deep5-${run}`);
  await page.waitForURL(/\?q=deep5-/);
  const items = page.getByRole("treeitem");
  check((await items.count()) === 5, "a search by external id shows the match with its four ancestors");
  check((await items.last().getAttribute("aria-level")) === "5", "the match sits at level 5");
  await screen("tree-search");
  await page.reload();
  check((await page.locator("#tree-search").inputValue()) === `deep5-${run}`, "the search survives a reload (URL state)");
  const level = (n) => until(page, (n) => document.activeElement?.getAttribute("aria-level") === n, n);
  await items.first().focus();
  check(await level("1"), "the first item takes the focus");
  await page.keyboard.press("End");
  check(await level("5"), "End moves to the last item");
  await page.keyboard.press("ArrowLeft");
  check(await level("4"), "ArrowLeft moves to the parent");
  await page.keyboard.press("Home");
  check(await level("1"), "Home moves to the first item");
  await page.keyboard.press("ArrowDown");
  check(await level("2"), "ArrowDown moves to the next item");
  await page.keyboard.press("Enter");
  must(await until(page, (p) => location.pathname === p, `/dashboard/groups/${chain[1].id}`), "Enter opens the group");
  // Search by key prefix.
  const k = await api("POST", `/v1/gateway/groups/${chain[2].id}/api_keys`, { name: "by-prefix" });
  await page.goto(`${BASE}/dashboard/?q=${encodeURIComponent(k.json.prefix)}`);
  await page.getByRole("tree").waitFor();
  check((await page.getByRole("treeitem").last().textContent()).includes(`Deep 3 ${run}`), "a search by key prefix finds the key's group");

  // ---- Delete a subtree: the dialog lists the subtree; the API no longer has any of it.
  await page.goto(`${BASE}/dashboard/groups/${chain[1].id}`);
  await page.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("dialog").waitFor();
  const listed = await page.locator(".subtree li").allTextContents();
  check(listed.length === 4 && listed.some((t) => t.includes(`Deep 5 ${run}`)), "the delete dialog lists the group and its three descendants");
  check(listed.join(" ").includes(k.json.prefix), "the delete dialog lists the keys that go with it");
  await screen("group-delete-confirm");
  await page.getByRole("dialog").getByRole("button", { name: "Delete group and subtree" }).click();
  await page.getByRole("heading", { level: 1, name: "Groups" }).waitFor();
  // The group goes at once; its descendants go as the manager cascades the delete: poll, bounded.
  for (const g of chain.slice(1)) {
    let status = 0;
    for (let i = 0; i < 80 && status !== 404; i++) {
      status = (await api("GET", `/v1/gateway/groups/${g.id}`)).status;
      if (status !== 404) await new Promise((r) => setTimeout(r, 250));
    }
    check(status === 404, `deleted ${g.metadata.name}: GET answers 404`);
  }
  check((await api("GET", `/v1/gateway/groups/${chain[0].id}`)).status === 200, "the subtree's parent remains");

  // ---- An Endpoint of two targets: target-0 at a loopback port where nothing listens, tried first (priority 0),
  // and target-1 the demo upstream behind it (priority 1). Each call of a federated key fails on target-0 and is
  // served by target-1, until target-0's third failure in a row (the default cooldown) takes it out of rotation.
  // The Endpoints page then shows target-0 cooling until the time the targets route answers and target-1 up.
  const demo = (await api("GET", "/v1/gateway/endpoints")).json?.items?.find((e) => e.slug === SLUG);
  must(demo, "the demo endpoint is listed");
  const pairSlug = `pair-${run}`;
  const pair = await api("POST", "/v1/gateway/endpoints", {
    slug: pairSlug,
    targets: [{ provider: "OPENAI", base_url: "http://127.0.0.1:1/v1" }, { ...demo.targets[0], name: undefined, priority: 1 }],
  });
  must(pair.status === 201, `an endpoint of two targets is created (${pair.status} ${pair.text.slice(0, 200)})`);
  const pairGroup = await api("POST", "/v1/gateway/groups", {
    metadata: { name: `Pair ${run}`, external_entity_id: `pair-${run}` }, models: [{ slug: pairSlug }], hierarchy: { limit_enforcement: "INDEPENDENT" },
  });
  must(pairGroup.status === 201, `a group may call it (${pairGroup.status})`);
  const pairKey = (await api("POST", `/v1/gateway/groups/${pairGroup.json.id}/api_keys`, { name: "pair" })).json?.api_key;
  must(pairKey, "a key of the group is minted");
  const pairStatuses = [];
  let pairState = null;
  for (let i = 0; i < 10 && pairState?.targets?.[0]?.state !== "cooling"; i++) {
    pairStatuses.push((await api("POST", "/v1/chat/completions", { model: pairSlug, messages: [{ role: "user", content: "hi" }] }, `Api-Key ${pairKey}`)).status);
    pairState = (await api("GET", `/v1/gateway/endpoints/${pair.json.id}/targets`)).json;
  }
  const [t0, t1] = pairState?.targets ?? [];
  must(t0?.state === "cooling" && t0.cooling_until, `target-0 is cooling after its failures (${JSON.stringify(pairState)})`);
  check(pairStatuses.length === 3 && pairStatuses.every((s) => s === 200), `three calls, each served by target-1, took target-0 out (${pairStatuses.join(",")})`);
  check(t0.name === "target-0" && t0.tries_last_hour.unreachable === 3 && t1.name === "target-1" && t1.state === "up" && t1.tries_last_hour.ok === 3,
    `the targets route counts target-0's refused connections and target-1's answers (${JSON.stringify(pairState.targets)})`);
  await page.goto(`${BASE}/dashboard/endpoints`);
  await page.getByRole("heading", { level: 1, name: "Endpoints" }).waitFor();
  await page.locator("[aria-busy=true]").waitFor({ state: "detached" });
  const pairSection = page.getByRole("region", { name: pairSlug });
  const row0 = pairSection.locator("tr[data-target=target-0]");
  const row1 = pairSection.locator("tr[data-target=target-1]");
  const until0 = row0.locator("time");
  const hms = new Date(t0.cooling_until).toISOString().slice(11, 19);
  check((await row0.locator("td").nth(3).textContent()).startsWith("cooling until ") && (await until0.getAttribute("datetime")) === t0.cooling_until &&
    (await until0.textContent()).endsWith(`${hms} UTC`), `the page shows target-0 cooling until ${hms} UTC, in words (${await row0.textContent()})`);
  check((await row0.locator("td").nth(6).textContent()) === "3 (3 unreachable)", `the page counts target-0's three failed tries (${await row0.locator("td").nth(6).textContent()})`);
  check((await row1.locator("td").nth(3).textContent()) === "up" && (await row1.locator("td").nth(5).textContent()) === "3" && (await row1.locator("td").nth(2).textContent()) === "1",
    `the page shows target-1 up, at priority 1, with three ok tries (${await row1.textContent()})`);
  await screen("endpoints");

  // ---- The other screens.
  for (const [path, name, heading] of [
    ["events", "billing-events", "Billing events"],
    ["models", "models", "Models"],
  ]) {
    await page.goto(`${BASE}/dashboard/${path}`);
    await page.getByRole("heading", { level: 1, name: heading }).waitFor();
    await page.locator("[aria-busy=true]").waitFor({ state: "detached" });
    await screen(name);
  }
  await page.goto(`${BASE}/dashboard/events?status=429`);
  await page.locator("table").waitFor();
  check((await page.locator("td.bad", { hasText: "429" }).count()) >= 1, "the billing events filter shows the 429s");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("button:has-text('Export CSV')")]);
  const csv = readFileSync(await download.path(), "utf8");
  check(csv.startsWith("timestamp,request_id,model_slug") && csv.includes(leafExt) && csv.includes(",429,"), "the CSV export holds the filtered events");
  await page.goto(`${BASE}/dashboard/models`);
  const disclosure = page.locator("button.disclosure").first();
  await disclosure.waitFor();
  await disclosure.click();
  await page.getByRole("heading", { name: "Environments" }).waitFor();
  check((await page.locator(".model-detail td", { hasText: "production" }).count()) >= 1, "the seeded model shows its production environment");
  await screen("model-detail");
  await page.locator(".model-detail tr", { hasText: "production" }).first().getByRole("button", { name: "Activate" }).click();
  const actNotice = page.locator(".model-detail p.notice");
  await actNotice.waitFor();
  check((await actNotice.textContent()) === "Activate production: already so.", `activating the active production environment is a no-op (${await actNotice.textContent()})`);

  // A deployment's logs: a predict call made through the API shows under its request id; a search pattern
  // that does not compile is refused next to its field, in the server's words.
  const traced = await fetch(`${BASE}/models/demo-model/production/predict`, {
    method: "POST", body: JSON.stringify({ text: "from the browser test" }),
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json", "X-Request-Id": "browser-logs-1" },
  });
  must(traced.status === 200, `a traced predict call answers 200 (got ${traced.status})`);
  await page.locator(".model-detail tr", { hasText: "demo-model-v1" }).getByRole("button", { name: "Logs" }).first().click();
  await page.getByRole("heading", { name: "Logs of demo-model-v1" }).waitFor();
  await page.fill("#logs-search", "^browser-logs-1$");
  await page.click(".logs button:has-text('Show')");
  const tracedRow = page.locator(".log-lines tr", { hasText: "browser-logs-1" });
  await tracedRow.first().waitFor();
  check((await tracedRow.count()) === 1 && (await tracedRow.first().textContent()).includes("POST /production/predict 200"),
    "the deployment's logs show the traced call, found by its request id");
  await screen("deployment-logs");
  expectLoadFailures(["400"]);
  await page.fill("#logs-search", "(");
  await page.click(".logs button:has-text('Show')");
  const searchErr = page.locator("#logs-search-error");
  await searchErr.waitFor();
  check((await searchErr.textContent()).includes("search_pattern") && (await page.getAttribute("#logs-search", "aria-invalid")) === "true",
    `a pattern that does not compile is refused next to the search field (${await searchErr.textContent()})`);
  expectLoadFailures([]);

  check((await page.getByRole("link", { name: "Workspace keys" }).count()) === 0, "a WORKSPACE_MANAGE_ALL key is not offered the workspace keys screen (authz.Decide)");

  // ---- Sign out ends the session.
  await page.click("button:has-text('Sign out')");
  await page.locator("#api-key").waitFor();
  check(true, "sign out returns to the login form");
  check((await api("GET", "/v1/gateway/groups", undefined, "")).status === 401, "without a key the API refuses");

  // ---- A WORKSPACE_MANAGE_API_KEYS key sees the workspace keys and not the gateway screens.
  await openKeysAs(KEYS_KEY);
  const navLinks = await page.getByRole("navigation", { name: "Main" }).getByRole("link").allTextContents();
  check(navLinks.includes("Workspace keys") && !navLinks.includes("Groups") && !navLinks.includes("Billing events"), `a WORKSPACE_MANAGE_API_KEYS key is offered only its screens (${navLinks.join(", ")})`);
  check((await page.locator("td.mono", { hasText: KEY.slice(0, 16) }).count()) === 1, "the workspace keys screen lists the admin key by prefix");
  check((await page.getByRole("button", { name: /^Rename key / }).count()) === 0 && (await page.getByRole("button", { name: /^Revoke key / }).count()) > 0,
    "a WORKSPACE_MANAGE_API_KEYS key is offered revoke but no rename (authz.Decide: key-management keys rename nothing)");
  await screen("workspace-keys");
  await page.click("button:has-text('New key')");
  await page.locator("#key-type").waitFor();
  const mgrTypes = await page.locator("#key-type option").evaluateAll((os) => os.map((o) => o.value));
  check(!mgrTypes.includes("PERSONAL") && !mgrTypes.includes("WORKSPACE_MANAGE_API_KEYS") && mgrTypes.includes("WORKSPACE_INVOKE"),
    `a WORKSPACE_MANAGE_API_KEYS key is offered team key types only (${mgrTypes.join(", ")})`);
  await page.click("button:has-text('Cancel')");
  await page.click("button:has-text('Sign out')");
  await page.locator("#api-key").waitFor();

  // ---- An organization admin's PERSONAL key manages workspace keys: create, the secret once, rename, revoke.
  await openKeysAs(OWNER_KEY);
  check((await page.getByRole("button", { name: `Rename key ${OWNER_KEY.slice(0, 16)}` }).count()) === 1,
    "an organization admin is offered the rename of its own PERSONAL key");
  await page.click("button:has-text('New key')");
  await page.locator("#shared-api").waitFor();
  const ownerTypes = await page.locator("#key-type option").evaluateAll((os) => os.map((o) => o.value));
  check(ownerTypes.length === 5, `an organization admin is offered every key type (${ownerTypes.join(", ")})`);
  await page.check("#shared-api");
  check((await page.locator("#key-type").count()) === 0 && (await page.locator("#key-envs").count()) === 0,
    "the shared model API option fixes the type and offers no environments");
  await page.selectOption("#key-team", "red");
  await page.getByRole("checkbox", { name: SLUG, exact: true }).check();
  expectLoadFailures(["400"]);
  await page.fill("#key-new-name", "Chat Key");
  await page.click("button:has-text('Create key')");
  const nameErr = page.locator("#key-new-name-err");
  await nameErr.waitFor();
  check((await nameErr.textContent()).includes("lowercase letters, digits and hyphens") && (await page.getAttribute("#key-new-name", "aria-invalid")) === "true",
    `a refused name is shown next to its field in the server's words (${await nameErr.textContent()})`);
  await screen("workspace-keys-refused");
  await page.screenshot({ path: join(OUT, "keys-page.png"), fullPage: true });
  expectLoadFailures([]);
  const keyName = `chat-${run}`;
  await page.fill("#key-new-name", keyName);
  await page.click("button:has-text('Create key')");
  await page.locator("#minted-key").waitFor();
  const secret = (await page.locator("#minted-key").textContent()).trim();
  check(/^mgw_[A-Za-z0-9]{12}\.[A-Za-z0-9]{32}$/.test(secret) && (await page.locator(".minted").textContent()).includes("shown once"),
    "the new key's secret is shown, with the warning that it is shown once");
  await page.click("button:has-text('Copy key')");
  await page.locator(".minted", { hasText: "Copied." }).waitFor();
  check((await page.evaluate(() => navigator.clipboard.readText())) === secret, "Copy key puts the secret on the clipboard");
  await screen("workspace-keys-created");
  const prefix = secret.slice(0, 16);
  const created = ((await api("GET", "/v1/api_keys", undefined, `Bearer ${OWNER_KEY}`)).json?.keys ?? []).find((k) => k.prefix === prefix);
  check(created?.type === "WORKSPACE_INVOKE" && created?.team_id === "red" && created?.model_ids.join() === SLUG && created?.environments.length === 0 && created?.name === keyName,
    `the API lists the new key as created: a WORKSPACE_INVOKE key of team red for ${SLUG}, no environments (${JSON.stringify(created)})`);
  const chat = await fetch(BASE + "/v1/chat/completions", {
    method: "POST", headers: { Authorization: `Bearer ${secret}`, "Content-Type": "application/json" },
    body: JSON.stringify({ model: SLUG, messages: [{ role: "user", content: "hi" }] }),
  });
  check(chat.status === 200, `the new team key calls the shared model API (${chat.status})`);
  await page.click("button:has-text('Done, hide it')");
  await page.reload();
  await page.getByRole("heading", { level: 1, name: "Workspace keys" }).waitFor();
  await page.locator("td.mono", { hasText: prefix }).waitFor();
  check(!(await page.content()).includes(secret), "the secret is not shown again");

  // Rename: a refusal next to the field, then the new name.
  await page.click(`button[aria-label="Rename key ${prefix}"]`);
  const renameInput = page.locator(`#rename-${prefix}`);
  expectLoadFailures(["400"]);
  await renameInput.fill("Renamed Key");
  await page.getByRole("form", { name: `Rename key ${prefix}` }).getByRole("button", { name: "Save" }).click();
  const renameErr = page.locator(`#rename-${prefix}-err`);
  await renameErr.waitFor();
  check((await renameErr.textContent()).includes("lowercase letters"), `a refused rename is shown next to the name (${await renameErr.textContent()})`);
  expectLoadFailures([]);
  await renameInput.fill(`${keyName}-renamed`);
  await page.getByRole("form", { name: `Rename key ${prefix}` }).getByRole("button", { name: "Save" }).click();
  await page.locator("tr", { hasText: prefix }).locator("td", { hasText: `${keyName}-renamed` }).first().waitFor();
  const renamed = ((await api("GET", "/v1/api_keys", undefined, `Bearer ${OWNER_KEY}`)).json?.keys ?? []).find((k) => k.prefix === prefix);
  check(renamed?.name === `${keyName}-renamed`, "the rename is saved (through the API)");
  await screen("workspace-keys-admin");

  // Revoke, with a confirmation: Cancel keeps the key, Revoke key ends it.
  await page.click(`button[aria-label="Revoke key ${prefix}"]`);
  const revokeDialog = page.getByRole("dialog", { name: `Revoke key ${prefix}?` });
  await revokeDialog.waitFor();
  await screen("workspace-keys-revoke");
  await revokeDialog.getByRole("button", { name: "Cancel" }).click();
  check((await api("GET", "/v1/api_keys", undefined, `Bearer ${secret}`)).status !== 401, "Cancel keeps the key");
  await page.click(`button[aria-label="Revoke key ${prefix}"]`);
  await revokeDialog.getByRole("button", { name: "Revoke key" }).click();
  await page.locator(".notice", { hasText: `Key ${prefix} (${keyName}-renamed) revoked.` }).waitFor();
  check(await page.locator("td.mono", { hasText: prefix }).waitFor({ state: "detached" }).then(() => true, () => false), "the revoked key leaves the list");
  const revoked = await fetch(BASE + "/v1/chat/completions", {
    method: "POST", headers: { Authorization: `Bearer ${secret}`, "Content-Type": "application/json" },
    body: JSON.stringify({ model: SLUG, messages: [{ role: "user", content: "hi" }] }),
  });
  check(revoked.status === 401, `the revoked key is refused at once (${revoked.status})`);
  await page.click("button:has-text('Sign out')");
  await page.locator("#api-key").waitFor();
} catch (e) {
  await failed(e);
}
await finish();
