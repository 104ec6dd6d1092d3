// The group page (effective limits with the binding one, usage, 429s, usage charts per model, keys) and the group editor (create and
// edit, with shorthand limit inputs, the client-side cascading check and the server's dry run).
import { useMemo, useState } from "preact/hooks";
import { api, ApiError, listGroups, listKeys, serverWords, type ThrottleCount, type Throttles } from "./api";
import type { EffectiveLimit, Group, GroupUsage, Key, MintedKey, ModelConfig } from "./api-types";
import { type CGroup, cascadingConflicts, descendantsOf } from "./cascade";
import { LimitKindSelects, limitList } from "./limitkind";
import { BASE, groupPath, Link, navigate, newGroupPath } from "./router";
import { formatLimit, groupDigits, limitEquals, parseLimit, showAmount } from "./shorthand";
import { deleted } from "./tree";
import { GroupUsageCharts } from "./usage";
import { Confirm, FieldMsg, Loading, Page, SecretOnce, useAsync, utc } from "./ui";

const enc = encodeURIComponent;

function toC(g: Group): CGroup {
  return {
    id: g.id,
    parent: g.hierarchy.parent_group_id,
    mode: g.hierarchy.limit_enforcement,
    models: g.models.map((m) => ({ slug: m.slug, rate_limits: m.rate_limits, usage_limits: m.usage_limits })),
  };
}

interface LimitRow { key: number; type: string; unit: string; text: string }
interface ModelRow { key: number; slug: string; limits: LimitRow[] }
let seq = 1;

function rowsOf(models: ModelConfig[]): ModelRow[] {
  return models.map((m) => ({
    key: seq++,
    slug: m.slug,
    limits: [...(m.rate_limits ?? []), ...(m.usage_limits ?? [])].map((l) => ({ key: seq++, type: l.type, unit: l.unit, text: formatLimit(l.type, l.threshold) })),
  }));
}

// toModels builds the API's models from the rows. paths maps each API field path back to the input it came from.
function toModels(rows: ModelRow[]): { models: ModelConfig[]; paths: Map<string, string>; errors: Map<string, string> } {
  const paths = new Map<string, string>();
  const errors = new Map<string, string>();
  const models = rows.map((m, i) => {
    const rate: ModelConfig["rate_limits"] = [];
    const usage: ModelConfig["rate_limits"] = [];
    paths.set(`models[${i}].slug`, `slug-${m.key}`);
    if (!m.slug.trim()) errors.set(`slug-${m.key}`, "A model slug is required.");
    for (const l of m.limits) {
      const p = parseLimit(l.type, l.text);
      if (!p.ok) errors.set(`thr-${l.key}`, p.error);
      const kind = limitList(l.unit);
      const list = kind === "usage_limits" ? usage : rate;
      paths.set(`models[${i}].${kind}[${list.length}].threshold`, `thr-${l.key}`);
      paths.set(`models[${i}].${kind}[${list.length}]`, `thr-${l.key}`);
      paths.set(`models[${i}].${kind}[${list.length}].type`, `thr-${l.key}`);
      paths.set(`models[${i}].${kind}[${list.length}].unit`, `thr-${l.key}`);
      list.push({ type: l.type as "REQUEST", unit: l.unit as "MINUTE", threshold: p.ok ? p.value : 0 });
    }
    return { slug: m.slug.trim(), rate_limits: rate, usage_limits: usage };
  });
  return { models, paths, errors };
}

function LimitInput(props: { row: LimitRow; label: string; error?: string; onChange: (r: LimitRow) => void; onRemove: () => void }) {
  const { row } = props;
  const id = `thr-${row.key}`;
  const parsed = parseLimit(row.type, row.text);
  return (
    <div class="limit-row">
      <LimitKindSelects label={props.label} type={row.type} unit={row.unit} onKind={(type, unit) => props.onChange({ ...row, type, unit })} />
      <div class="thr">
        <label for={id}>{props.label} threshold</label>
        <input
          id={id}
          name={id}
          inputMode="decimal"
          autocomplete="off"
          value={row.text}
          aria-invalid={props.error ? "true" : undefined}
          aria-describedby={`${id}-eq ${id}-err`}
          onInput={(e) => props.onChange({ ...row, text: (e.target as HTMLInputElement).value })}
        />
        <span id={`${id}-eq`} class="equals" aria-live="polite">
          {parsed.ok ? limitEquals(row.type, parsed.value) : ""}
        </span>
        <FieldMsg id={`${id}-err`} msg={props.error ?? (!parsed.ok && row.text.trim() ? parsed.error : undefined)} />
      </div>
      <button type="button" class="link" onClick={props.onRemove}>
        Remove limit
      </button>
    </div>
  );
}

// GroupEditor creates (group undefined) or edits a group.
function GroupEditor(props: { group?: Group; parent?: Group | null; all: Group[]; onDone: (g: Group) => void; onCancel: () => void }) {
  const g = props.group;
  const [name, setName] = useState(g?.metadata.name ?? "");
  const [ext, setExt] = useState("");
  const [mode, setMode] = useState(props.parent?.hierarchy.limit_enforcement ?? "CASCADING");
  const [rows, setRows] = useState<ModelRow[]>(() =>
    g ? rowsOf(g.models) : [{ key: seq++, slug: "", limits: [{ key: seq++, type: "REQUEST", unit: "MINUTE", text: "" }] }],
  );
  const [errors, setErrors] = useState<Map<string, string>>(new Map());
  const [formError, setFormError] = useState("");
  const [busy, setBusy] = useState(false);
  const [status, setStatus] = useState("");

  function update(i: number, m: ModelRow) {
    setRows(rows.map((r, j) => (j === i ? m : r)));
  }

  async function submit(e: Event) {
    e.preventDefault();
    setFormError("");
    setStatus("");
    const built = toModels(rows);
    const errs = new Map(built.errors);
    if (!g && !ext.trim()) errs.set("ext", "An external id is required.");
    if (errs.size === 0) {
      // The client-side cascading check, against ancestors and descendants.
      const me: CGroup = {
        id: g?.id ?? "(new group)",
        parent: g ? g.hierarchy.parent_group_id : props.parent?.id ?? null,
        mode: g ? g.hierarchy.limit_enforcement : mode,
        models: built.models.map((m) => ({ slug: m.slug, rate_limits: m.rate_limits ?? [], usage_limits: m.usage_limits ?? [] })),
      };
      for (const c of cascadingConflicts(me, props.all.map(toC))) {
        const at = built.paths.get(c.path);
        if (at && !errs.has(at)) errs.set(at, c.message);
      }
    }
    setErrors(errs);
    if (errs.size > 0) {
      setFormError("Fix the fields marked below; nothing was sent.");
      return;
    }
    const body: any = g
      ? { metadata: { name }, models: built.models }
      : {
          metadata: { name, external_entity_id: ext.trim() },
          models: built.models,
          hierarchy: props.parent ? { parent_group_id: props.parent.id } : { limit_enforcement: mode },
        };
    const path = g ? `/v1/gateway/groups/${enc(g.id)}` : "/v1/gateway/groups";
    const method = g ? "PATCH" : "POST";
    setBusy(true);
    try {
      setStatus("Checking with the server (dry run)…");
      await api(method, `${path}?dry_run=true`, body);
      setStatus("Saving…");
      const saved = await api<Group>(method, path, body);
      setStatus("Saved.");
      props.onDone(saved);
    } catch (err) {
      setStatus("");
      const ae = err as ApiError;
      const fe = new Map<string, string>();
      for (const f of ae.fields ?? []) {
        const at =
          built.paths.get(f.field) ??
          (f.field === "metadata.external_entity_id" ? "ext" : f.field === "metadata.name" ? "name" : undefined);
        if (at && !fe.has(at)) fe.set(at, serverWords(ae, f.message));
      }
      setErrors(fe);
      setFormError(fe.size ? "The server refused the change: see the fields marked below." : ae.message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="card editor" onSubmit={submit} noValidate aria-labelledby="editor-title">
      <h2 id="editor-title">{g ? "Edit group" : props.parent ? `New child of ${props.parent.metadata.name || props.parent.id}` : "New root group"}</h2>
      {formError && <p class="form-error" role="alert">{formError}</p>}
      <div class="field">
        <label for="name">Name</label>
        <input id="name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} aria-describedby="name-err" />
        <FieldMsg id="name-err" msg={errors.get("name")} />
      </div>
      {!g && (
        <div class="field">
          <label for="ext">External id</label>
          <input id="ext" value={ext} onInput={(e) => setExt((e.target as HTMLInputElement).value)} aria-invalid={errors.has("ext") ? "true" : undefined} aria-describedby="ext-err" required />
          <FieldMsg id="ext-err" msg={errors.get("ext")} />
        </div>
      )}
      {!g && !props.parent && (
        <fieldset class="field">
          <legend>Limit enforcement</legend>
          {["CASCADING", "INDEPENDENT"].map((m) => (
            <label key={m}>
              <input type="radio" name="mode" value={m} checked={mode === m} onChange={() => setMode(m as "CASCADING")} /> {m}
            </label>
          ))}
        </fieldset>
      )}
      <p class="hint">Thresholds accept shorthand: 1k, 60k, 1.5M, 1B (k or K, M, B; not lowercase m).</p>
      {rows.map((m, i) => (
        <fieldset key={m.key} class="model">
          <legend>Model {i + 1}</legend>
          <div class="field">
            <label for={`slug-${m.key}`}>Slug</label>
            <input id={`slug-${m.key}`} value={m.slug} onInput={(e) => update(i, { ...m, slug: (e.target as HTMLInputElement).value })} aria-describedby={`slug-${m.key}-err`} />
            <FieldMsg id={`slug-${m.key}-err`} msg={errors.get(`slug-${m.key}`)} />
          </div>
          {m.limits.map((l, j) => (
            <LimitInput
              key={l.key}
              row={l}
              label={`Model ${i + 1} limit ${j + 1}`}
              error={errors.get(`thr-${l.key}`)}
              onChange={(nl) => update(i, { ...m, limits: m.limits.map((x) => (x.key === l.key ? nl : x)) })}
              onRemove={() => update(i, { ...m, limits: m.limits.filter((x) => x.key !== l.key) })}
            />
          ))}
          <div class="actions">
            <button type="button" onClick={() => update(i, { ...m, limits: [...m.limits, { key: seq++, type: "REQUEST", unit: "MINUTE", text: "" }] })}>
              Add limit
            </button>
            <button type="button" class="link" onClick={() => setRows(rows.filter((_, j) => j !== i))}>
              Remove model
            </button>
          </div>
        </fieldset>
      ))}
      <div class="actions">
        <button type="button" onClick={() => setRows([...rows, { key: seq++, slug: "", limits: [] }])}>
          Add model
        </button>
        <span class="spacer" />
        <span role="status" class="muted">{status}</span>
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button type="submit" class="primary" disabled={busy}>
          {g ? "Save" : "Create group"}
        </button>
      </div>
    </form>
  );
}

export function GroupCreate(props: { parent: string | null }) {
  const all = useAsync(listGroups, []);
  if (!all.data) return <Page title="New group"><Loading error={all.error} /></Page>;
  const parent = props.parent ? all.data.find((g) => g.id === props.parent) ?? null : null;
  return (
    <Page title={parent ? "New child group" : "New root group"}>
      <GroupEditor
        parent={parent}
        all={all.data}
        onDone={(g) => navigate(groupPath(g.id))}
        onCancel={() => history.back()}
      />
    </Page>
  );
}

interface PageData { group: Group; all: Group[]; usage: GroupUsage | null; keys: Key[]; throttles: Throttles | null }

async function loadGroup(id: string): Promise<PageData> {
  const [group, all, usage, keys, throttles] = await Promise.all([
    api<Group>("GET", `/v1/gateway/groups/${enc(id)}`),
    listGroups(),
    api<GroupUsage>("GET", `/v1/gateway/groups/${enc(id)}/usage`).catch(() => null),
    listKeys(id),
    api<Throttles>("GET", `/v1/gateway/throttles?group_id=${enc(id)}`).catch(() => null),
  ]);
  return { group, all, usage, keys, throttles };
}

// binding marks, in CASCADING mode, the tightest limit of each (slug, type, unit): every call charges every
// ancestor's bucket too, so the smallest threshold is the one that refuses first.
function bindingSet(g: Group): Set<EffectiveLimit> {
  const out = new Set<EffectiveLimit>();
  if (g.hierarchy.limit_enforcement !== "CASCADING") return out;
  for (const m of g.effective_models) {
    const best = new Map<string, EffectiveLimit>();
    for (const l of [...m.rate_limits, ...m.usage_limits]) {
      const k = `${l.type}/${l.unit}`;
      const b = best.get(k);
      if (!b || l.threshold < b.threshold) best.set(k, l);
    }
    for (const l of best.values()) out.add(l);
  }
  return out;
}

// limitLabel names the limit that refused a count of 429s, as the group page charts it: the type and unit with the
// group that set it (an ancestor's in CASCADING mode), the workspace's model-API tier, or neither.
export function limitLabel(t: ThrottleCount, names: Map<string, string>): string {
  if (t.refused_by === "GROUP_LIMIT") return `${t.limit_type} / ${t.limit_unit} (set on ${names.get(t.source_group_id) ?? t.source_group_id})`;
  if (t.refused_by === "MODEL_API_TIER") return `${t.limit_type} / ${t.limit_unit} (workspace model-API tier)`;
  return "Not a gateway limit (bytes in flight, or the model's own 429)";
}

export function GroupPage(props: { id: string }) {
  const data = useAsync(() => loadGroup(props.id), [props.id]);
  const [editing, setEditing] = useState(false);
  const [minted, setMinted] = useState<MintedKey | null>(null);
  const [keyName, setKeyName] = useState("");
  const [mintError, setMintError] = useState("");
  const [revoke, setRevoke] = useState<{ key: Key; then?: string } | null>(null);
  const [deleting, setDeleting] = useState(false);
  const [notice, setNotice] = useState("");
  const [subKeys, setSubKeys] = useState<Map<string, Key[]>>(new Map());
  const d = data.data;
  const binding = useMemo(() => (d ? bindingSet(d.group) : new Set<EffectiveLimit>()), [d]);
  const names = useMemo(() => new Map((d?.all ?? []).map((g) => [g.id, g.metadata.name || g.id])), [d]);

  if (!d) return <Page title="Group"><Loading error={data.error} /></Page>;
  const g = d.group;
  const subtree = descendantsOf(g.id, d.all.map(toC));

  async function mint(name: string, rotating?: Key) {
    setMintError("");
    try {
      const k = await api<MintedKey>("POST", `/v1/gateway/groups/${enc(g.id)}/api_keys`, name ? { name } : {});
      setMinted(k);
      setKeyName("");
      if (rotating) setRevoke({ key: rotating, then: `Rotation: the new key ${k.prefix} is minted. Revoke the old key ${rotating.prefix} once the new one is in use.` });
      data.reload();
    } catch (err) {
      setMintError((err as ApiError).forField?.("name") ?? (err as Error).message);
    }
  }

  async function doRevoke(k: Key) {
    setRevoke(null);
    try {
      await api("DELETE", `/v1/gateway/groups/${enc(g.id)}/api_keys/${enc(k.prefix)}`);
      setNotice(`Key ${k.prefix} revoked.`);
      data.reload();
    } catch (err) {
      setNotice((err as Error).message);
    }
  }

  async function doDelete() {
    setDeleting(false);
    try {
      await api("DELETE", `/v1/gateway/groups/${enc(g.id)}`);
      for (const id of [g.id, ...subtree.map((x) => x.id)]) deleted.add(id);
      navigate(BASE);
    } catch (err) {
      setNotice((err as Error).message);
    }
  }

  const throttles = d.throttles?.items ?? [];
  const maxT = Math.max(1, ...throttles.map((t) => t.count));
  return (
    <Page
      title={g.metadata.name || g.id}
      actions={
        <>
          <button type="button" onClick={() => setEditing(true)} disabled={editing}>Edit</button>
          <Link href={newGroupPath(g.id)} class="button">Add child</Link>
          <button
            type="button"
            class="danger"
            onClick={async () => {
              // The keys of every group of the subtree go too: list them before asking.
              const ids = subtree.map((x) => x.id);
              const keys = await Promise.all(ids.map((id) => listKeys(id).catch(() => [] as Key[])));
              setSubKeys(new Map(ids.map((id, i) => [id, keys[i]])));
              setDeleting(true);
            }}
          >
            Delete
          </button>
        </>
      }
    >
      <dl class="facts">
        <dt>Id</dt><dd class="mono">{g.id}</dd>
        <dt>External id</dt><dd class="mono">{g.metadata.external_entity_id}</dd>
        <dt>Mode</dt><dd><span class={`badge ${g.hierarchy.limit_enforcement.toLowerCase()}`}>{g.hierarchy.limit_enforcement}</span></dd>
        <dt>Parent</dt>
        <dd>{g.hierarchy.parent_group_id ? <Link href={groupPath(g.hierarchy.parent_group_id)}>{names.get(g.hierarchy.parent_group_id) ?? g.hierarchy.parent_group_id}</Link> : "none (root)"}</dd>
        <dt>Created</dt><dd>{utc(g.created_at)}</dd>
      </dl>
      {notice && <p role="status" class="notice">{notice}</p>}
      {editing && (
        <GroupEditor group={g} all={d.all} onDone={() => { setEditing(false); setNotice("Saved."); data.reload(); }} onCancel={() => setEditing(false)} />
      )}

      <section aria-labelledby="eff-title">
        <h2 id="eff-title">Effective limits</h2>
        {g.effective_models.length === 0 ? <p>No models.</p> : (
          <table>
            <caption class="sr-only">Effective limits per model, type and unit</caption>
            <thead><tr><th scope="col">Model</th><th scope="col">Type</th><th scope="col">Unit</th><th scope="col">Threshold</th><th scope="col">Set by</th><th scope="col">Binds</th></tr></thead>
            <tbody>
              {g.effective_models.flatMap((m) =>
                [...m.rate_limits, ...m.usage_limits].map((l, i) => (
                  <tr key={`${m.slug}-${i}`} class={binding.has(l) ? "binding" : undefined}>
                    <td class="mono">{m.slug}</td><td>{l.type}</td><td>{l.unit}</td>
                    <td class="num">{showAmount(l.type, l.threshold)}</td>
                    <td>{l.source_group === g.id ? "this group" : <Link href={groupPath(l.source_group)}>{names.get(l.source_group) ?? l.source_group}</Link>}</td>
                    <td>{binding.has(l) ? <strong>binding</strong> : ""}</td>
                  </tr>
                )),
              )}
            </tbody>
          </table>
        )}
      </section>

      <section aria-labelledby="usage-title">
        <h2 id="usage-title">Usage this day and month</h2>
        {!d.usage || Object.keys(d.usage.usage).length === 0 ? <p>No usage (DAY or MONTH) limits.</p> : (
          <ul class="bars">
            {Object.entries(d.usage.usage).flatMap(([slug, entries]) =>
              entries.map((u, i) => {
                const pct = u.threshold ? Math.min(100, Math.round((u.current_usage / u.threshold) * 100)) : 0;
                const id = `usage-${slug}-${i}`;
                return (
                  <li key={id}>
                    <span id={id}>{slug} {u.type} per {u.unit}</span>
                    <meter aria-labelledby={id} min={0} max={u.threshold} value={u.current_usage} high={u.threshold * 0.8} optimum={0} />
                    <span class="num">{showAmount(u.type, u.current_usage)} / {showAmount(u.type, u.threshold)} ({pct}%)</span>
                    <span class="muted">resets {utc(u.reset_at)}</span>
                  </li>
                );
              }),
            )}
          </ul>
        )}
      </section>

      <section aria-labelledby="thr-title">
        <h2 id="thr-title">429s in the last hour</h2>
        {throttles.length === 0 ? <p>No call was throttled in the last hour.</p> : (
          <table class="throttles">
            <caption class="sr-only">Calls refused with 429, per model and the limit that refused them, over the last hour</caption>
            <thead><tr><th scope="col">Model</th><th scope="col">Refused by</th><th scope="col">429s</th><th scope="col"><span class="sr-only">Chart</span></th></tr></thead>
            <tbody>
              {throttles.map((t) => (
                <tr key={`${t.slug}|${t.refused_by}|${t.source_group_id}|${t.limit_type}|${t.limit_unit}`}>
                  <td class="mono">{t.slug}</td>
                  <td class="limit">{limitLabel(t, names)}</td>
                  <td class="num">{groupDigits(t.count)}</td>
                  <td><span class="hbar" style={{ width: `${Math.max(2, Math.round((t.count / maxT) * 100))}%` }} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <GroupUsageCharts id={g.id} />

      <section aria-labelledby="keys-title">
        <h2 id="keys-title">Keys</h2>
        {minted && <SecretOnce key={minted.prefix} title={`New key ${minted.prefix}.`} secret={minted.api_key} onDone={() => setMinted(null)} />}
        <form class="inline" onSubmit={(e) => { e.preventDefault(); mint(keyName.trim()); }}>
          <label for="key-name">Key name</label>
          <input id="key-name" value={keyName} onInput={(e) => setKeyName((e.target as HTMLInputElement).value)} aria-describedby="key-name-err" />
          <button type="submit" class="primary">Mint key</button>
          <FieldMsg id="key-name-err" msg={mintError} />
        </form>
        {d.keys.length === 0 ? <p>No keys.</p> : (
          <table>
            <caption class="sr-only">Keys of this group</caption>
            <thead><tr><th scope="col">Prefix</th><th scope="col">Name</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {d.keys.map((k) => (
                <tr key={k.prefix}>
                  <td class="mono">{k.prefix}</td><td>{k.name}</td>
                  <td class="actions">
                    <button type="button" onClick={() => mint(k.name ? `${k.name}-rotated` : "", k)} aria-label={`Rotate key ${k.prefix}`}>Rotate</button>
                    <button type="button" class="danger" onClick={() => setRevoke({ key: k })} aria-label={`Revoke key ${k.prefix}`}>Revoke</button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <Confirm open={!!revoke} title={`Revoke key ${revoke?.key.prefix ?? ""}?`} confirmLabel="Revoke key" danger onCancel={() => setRevoke(null)} onConfirm={() => revoke && doRevoke(revoke.key)}>
        {revoke?.then && <p>{revoke.then}</p>}
        <p>Calls with this key fail with 401 from the next request. This cannot be undone.</p>
      </Confirm>
      <Confirm open={deleting} title={`Delete ${g.metadata.name || g.id}?`} confirmLabel="Delete group and subtree" danger onCancel={() => setDeleting(false)} onConfirm={doDelete}>
        <p>
          These go with it: the group, {subtree.length} descendant group{subtree.length === 1 ? "" : "s"} and{" "}
          {d.keys.length + [...subKeys.values()].reduce((n, ks) => n + ks.length, 0)} keys, revoked at once.
        </p>
        <ul class="subtree">
          <li>{g.metadata.name || g.id} <span class="muted mono">({g.id}, {d.keys.length} keys{d.keys.length ? `: ${d.keys.map((k) => k.prefix).join(", ")}` : ""})</span></li>
          {subtree.map((s) => {
            const ks = subKeys.get(s.id) ?? [];
            return (
              <li key={s.id}>
                {names.get(s.id)} <span class="muted mono">({s.id}, {ks.length} keys{ks.length ? `: ${ks.map((k) => k.prefix).join(", ")}` : ""})</span>
              </li>
            );
          })}
        </ul>
      </Confirm>
    </Page>
  );
}
