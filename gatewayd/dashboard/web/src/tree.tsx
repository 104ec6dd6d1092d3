// The group tree: every group of the workspace under its parent (at most five levels), with its mode, model and
// key counts, its highest usage as a share of its threshold and its 429s of the last hour. It is an ARIA tree:
// arrow keys move and open, Home and End jump, Enter opens the group, Space selects it for a bulk edit (so does its
// checkbox). Search and filters live in the URL.
import { useMemo, useRef, useState } from "preact/hooks";
import { api, listGroups, listKeys, refusal, type Throttles } from "./api";
import type { Group, GroupUsage, Key } from "./api-types";
import { type LimitChange, topmost, withLimit, writeOrder } from "./bulk";
import { LimitKindSelects } from "./limitkind";
import { BASE, groupPath, Link, navigate, newGroupPath, replaceQuery } from "./router";
import { formatLimit, limitEquals, parseLimit } from "./shorthand";
import { Confirm, FieldMsg, Loading, Page, useAsync } from "./ui";

export const NEAR_LIMIT = 0.8;

export interface TreeData {
  groups: Group[];
  keys: Map<string, Key[]>;
  usage: Map<string, number>; // highest current/threshold, 0..
  throttled: Map<string, number>;
}

// mapLimit runs f over items, n at a time.
async function mapLimit<T, R>(items: T[], n: number, f: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let i = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (i < items.length) {
        const j = i++;
        out[j] = await f(items[j]);
      }
    }),
  );
  return out;
}

export function highestUsage(u: GroupUsage | null): number {
  let best = 0;
  for (const entries of Object.values(u?.usage ?? {})) {
    for (const e of entries) if (e.threshold > 0) best = Math.max(best, e.current_usage / e.threshold);
  }
  return best;
}

// deleted holds the groups this tab deleted, with their subtrees: the list may still show them for a moment while
// the manager removes the descendants, and they are not worth a look-up that can only answer 404.
export const deleted = new Set<string>();

export async function loadTree(): Promise<TreeData> {
  const groups = (await listGroups()).filter((g) => !deleted.has(g.id));
  const [keys, usage, thr] = await Promise.all([
    mapLimit(groups, 4, (g) => listKeys(g.id).catch(() => [] as Key[])),
    mapLimit(groups, 4, (g) => api<GroupUsage>("GET", `/v1/gateway/groups/${g.id}/usage`).catch(() => null)),
    api<Throttles>("GET", "/v1/gateway/throttles").catch(() => ({ items: [] }) as unknown as Throttles),
  ]);
  const throttled = new Map<string, number>();
  for (const t of thr.items) throttled.set(t.group_id, (throttled.get(t.group_id) ?? 0) + t.count);
  return {
    groups,
    keys: new Map(groups.map((g, i) => [g.id, keys[i]])),
    usage: new Map(groups.map((g, i) => [g.id, highestUsage(usage[i])])),
    throttled,
  };
}

export function matches(g: Group, q: string, keys: Key[]): boolean {
  const s = q.trim().toLowerCase();
  if (!s) return true;
  return (
    g.id.toLowerCase().includes(s) ||
    g.metadata.name.toLowerCase().includes(s) ||
    g.metadata.external_entity_id.toLowerCase().includes(s) ||
    keys.some((k) => k.prefix.toLowerCase().startsWith(s))
  );
}

interface Row { g: Group; level: number; hasChildren: boolean; expanded: boolean; parent: string | null }

// Outcome is what a bulk action did to one group, shown next to it.
interface Outcome { ok: boolean; msg: string }

// BulkPanel applies one limit change to the selected groups, each PATCH dry-run first and written only when the
// dry run passes, in writeOrder; the outcome of each, in the server's words, goes next to the group. It also
// deletes the selection, after a dialog that lists every subtree that goes with it.
function BulkPanel(props: {
  selected: Set<string>;
  data: TreeData;
  onOutcomes: (o: Map<string, Outcome>) => void;
  onClear: () => void;
  onDone: () => void;
}) {
  const [slug, setSlug] = useState("");
  const [type, setType] = useState<LimitChange["type"]>("REQUEST");
  const [unit, setUnit] = useState<LimitChange["unit"]>("MINUTE");
  const [text, setText] = useState("");
  const [errors, setErrors] = useState<Map<string, string>>(new Map());
  const [busy, setBusy] = useState(false);
  const [status, setStatus] = useState("");
  const [confirming, setConfirming] = useState(false);
  const d = props.data;
  const ids = [...props.selected].filter((id) => d.groups.some((g) => g.id === id));
  const byId = new Map(d.groups.map((g) => [g.id, g]));
  const name = (id: string) => byId.get(id)?.metadata.name || id;
  const parsed = parseLimit(type, text);

  async function apply(e: Event) {
    e.preventDefault();
    const errs = new Map<string, string>();
    if (!slug.trim()) errs.set("slug", "A model slug is required.");
    if (!parsed.ok) errs.set("threshold", text.trim() ? parsed.error : "A threshold is required.");
    setErrors(errs);
    if (errs.size || !parsed.ok) return;
    const change: LimitChange = { slug: slug.trim(), type, unit, threshold: parsed.value };
    const out = new Map<string, Outcome>();
    setBusy(true);
    for (const id of writeOrder(ids, d.groups, change)) {
      setStatus(`Checking ${name(id)} with the server (dry run)…`);
      const w = withLimit(byId.get(id)!, change);
      if ("error" in w) {
        out.set(id, { ok: false, msg: w.error });
      } else {
        const path = `/v1/gateway/groups/${encodeURIComponent(id)}`;
        try {
          await api("PATCH", `${path}?dry_run=true`, { models: w.models });
          await api("PATCH", path, { models: w.models });
          out.set(id, { ok: true, msg: `Saved: ${change.slug} ${type} per ${unit} = ${formatLimit(type, change.threshold)}.` });
        } catch (err) {
          out.set(id, { ok: false, msg: refusal(err) });
        }
      }
      props.onOutcomes(new Map(out));
    }
    const saved = [...out.values()].filter((o) => o.ok).length;
    setStatus(`${saved} of ${out.size} groups saved; ${out.size - saved} refused (see each group).`);
    setBusy(false);
    props.onDone();
  }

  async function doDelete() {
    setConfirming(false);
    const out = new Map<string, Outcome>();
    for (const id of topmost(ids, d.groups)) {
      try {
        await api("DELETE", `/v1/gateway/groups/${encodeURIComponent(id)}`);
        for (const x of [id, ...subtreeOf(id, d.groups)]) deleted.add(x);
      } catch (err) {
        out.set(id, { ok: false, msg: refusal(err) });
      }
    }
    props.onOutcomes(out);
    setStatus(out.size ? `${out.size} deletes refused (see each group).` : "Deleted.");
    props.onClear();
    props.onDone();
  }

  const tops = topmost(ids, d.groups);
  const keyCount = (id: string) => d.keys.get(id)?.length ?? 0;
  return (
    <section class="card bulk" aria-labelledby="bulk-title">
      <h2 id="bulk-title">{ids.length} group{ids.length === 1 ? "" : "s"} selected</h2>
      <form class="limit-row" onSubmit={apply} noValidate>
        <div class="thr">
          <label for="bulk-slug">Model slug</label>
          <input id="bulk-slug" value={slug} onInput={(e) => setSlug((e.target as HTMLInputElement).value)} aria-invalid={errors.has("slug") ? "true" : undefined} aria-describedby="bulk-slug-err" />
          <FieldMsg id="bulk-slug-err" msg={errors.get("slug")} />
        </div>
        <LimitKindSelects
          label="Limit"
          type={type}
          unit={unit}
          onKind={(t, u) => {
            setType(t as LimitChange["type"]);
            setUnit(u as LimitChange["unit"]);
          }}
        />
        <div class="thr">
          <label for="bulk-thr">Threshold</label>
          <input id="bulk-thr" inputMode="decimal" autocomplete="off" value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} aria-invalid={errors.has("threshold") ? "true" : undefined} aria-describedby="bulk-thr-eq bulk-thr-err" />
          <span id="bulk-thr-eq" class="equals" aria-live="polite">{parsed.ok ? limitEquals(type, parsed.value) : ""}</span>
          <FieldMsg id="bulk-thr-err" msg={errors.get("threshold")} />
        </div>
        <button type="submit" class="primary" disabled={busy}>Apply to {ids.length} selected</button>
      </form>
      <div class="actions">
        <span role="status" class="muted">{status}</span>
        <span class="spacer" />
        <button type="button" onClick={props.onClear}>Clear selection</button>
        <button type="button" class="danger" onClick={() => setConfirming(true)} disabled={busy}>Delete selected…</button>
      </div>
      <Confirm open={confirming} title={`Delete ${ids.length} selected group${ids.length === 1 ? "" : "s"}?`} confirmLabel="Delete groups and subtrees" danger onCancel={() => setConfirming(false)} onConfirm={doDelete}>
        <p>These go, each with its subtree and every key of it, revoked at once:</p>
        <ul class="subtree">
          {tops.map((id) => (
            <li key={id}>
              {name(id)} <span class="muted mono">({id}, {keyCount(id)} keys)</span>
              {subtreeOf(id, d.groups).length > 0 && (
                <ul>
                  {subtreeOf(id, d.groups).map((x) => (
                    <li key={x}>{name(x)} <span class="muted mono">({x}, {keyCount(x)} keys)</span></li>
                  ))}
                </ul>
              )}
            </li>
          ))}
        </ul>
      </Confirm>
    </section>
  );
}

// subtreeOf is every descendant of id, parents before children.
function subtreeOf(id: string, all: Group[]): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    for (const g of all) {
      if (g.hierarchy.parent_group_id === p && !out.includes(g.id)) {
        out.push(g.id);
        walk(g.id);
      }
    }
  };
  walk(id);
  return out;
}

export function GroupTree(props: { query: URLSearchParams }) {
  const q = props.query.get("q") ?? "";
  const filter = props.query.get("filter") ?? "";
  const data = useAsync(loadTree, []);
  const [collapsed, setCollapsed] = useState<Set<string>>(new Set());
  const [active, setActive] = useState<string | null>(null);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [outcomes, setOutcomes] = useState<Map<string, Outcome>>(new Map());
  const treeRef = useRef<HTMLUListElement>(null);

  function select(id: string) {
    const next = new Set(selected);
    if (!next.delete(id)) next.add(id);
    setSelected(next);
  }

  function setQuery(next: { q: string } | { filter: string }) {
    replaceQuery(next, BASE, props.query);
  }

  const rows = useMemo<Row[]>(() => {
    const d = data.data;
    if (!d) return [];
    const children = new Map<string | null, Group[]>();
    const ids = new Set(d.groups.map((g) => g.id));
    for (const g of d.groups) {
      const p = g.hierarchy.parent_group_id && ids.has(g.hierarchy.parent_group_id) ? g.hierarchy.parent_group_id : null;
      children.set(p, [...(children.get(p) ?? []), g]);
    }
    const label = (g: Group) => (g.metadata.name || g.id).toLowerCase();
    for (const list of children.values()) list.sort((a, b) => (label(a) < label(b) ? -1 : label(a) > label(b) ? 1 : 0));
    const pass = (g: Group) =>
      matches(g, q, d.keys.get(g.id) ?? []) &&
      (filter !== "near" || (d.usage.get(g.id) ?? 0) >= NEAR_LIMIT) &&
      (filter !== "throttled" || (d.throttled.get(g.id) ?? 0) > 0);
    const filtering = q.trim() !== "" || filter !== "";
    // keep: a group shown because it matches or has a matching descendant.
    const keep = new Map<string, boolean>();
    const visit = (g: Group): boolean => {
      let k = pass(g);
      for (const c of children.get(g.id) ?? []) k = visit(c) || k;
      keep.set(g.id, k);
      return k;
    };
    for (const r of children.get(null) ?? []) visit(r);
    const out: Row[] = [];
    const walk = (g: Group, level: number, parent: string | null) => {
      if (filtering && !keep.get(g.id)) return;
      const kids = children.get(g.id) ?? [];
      const expanded = filtering || !collapsed.has(g.id);
      out.push({ g, level, hasChildren: kids.length > 0, expanded, parent });
      if (expanded) for (const c of kids) walk(c, level + 1, g.id);
    };
    for (const r of children.get(null) ?? []) walk(r, 1, null);
    return out;
  }, [data.data, q, filter, collapsed]);

  const current = rows.find((r) => r.g.id === active) ? active : rows[0]?.g.id ?? null;

  function focus(id: string) {
    setActive(id);
    requestAnimationFrame(() => treeRef.current?.querySelector<HTMLElement>(`[data-id="${CSS.escape(id)}"]`)?.focus());
  }
  function toggle(id: string, open?: boolean) {
    const next = new Set(collapsed);
    const isOpen = !collapsed.has(id);
    if (open ?? !isOpen) next.delete(id);
    else next.add(id);
    setCollapsed(next);
  }
  function onKey(e: KeyboardEvent, i: number) {
    const r = rows[i];
    switch (e.key) {
      case "ArrowDown":
        if (i + 1 < rows.length) focus(rows[i + 1].g.id);
        break;
      case "ArrowUp":
        if (i > 0) focus(rows[i - 1].g.id);
        break;
      case "Home":
        focus(rows[0].g.id);
        break;
      case "End":
        focus(rows[rows.length - 1].g.id);
        break;
      case "ArrowRight":
        if (r.hasChildren && !r.expanded) toggle(r.g.id, true);
        else if (r.hasChildren && i + 1 < rows.length) focus(rows[i + 1].g.id);
        break;
      case "ArrowLeft":
        if (r.hasChildren && r.expanded) toggle(r.g.id, false);
        else if (r.parent) focus(r.parent);
        break;
      case "Enter":
        navigate(groupPath(r.g.id));
        break;
      case " ":
        select(r.g.id);
        break;
      default:
        return;
    }
    e.preventDefault();
  }

  const d = data.data;
  return (
    <Page
      title="Groups"
      actions={
        <Link href={newGroupPath()} class="button primary">
          New root group
        </Link>
      }
    >
      <form class="toolbar" role="search" onSubmit={(e) => e.preventDefault()}>
        <label for="tree-search">Search</label>
        <input
          id="tree-search"
          type="search"
          placeholder="id, name, external id or key prefix"
          value={q}
          onInput={(e) => setQuery({ q: (e.target as HTMLInputElement).value })}
        />
        <fieldset class="filters">
          <legend>Show</legend>
          {[["", "All"], ["near", "Near limit (≥80%)"], ["throttled", "Throttled (last hour)"]].map(([v, label]) => (
            <label key={v}>
              <input type="radio" name="filter" value={v} checked={filter === v} onChange={() => setQuery({ filter: v })} />
              {label}
            </label>
          ))}
        </fieldset>
      </form>
      {d && selected.size > 0 && (
        <BulkPanel selected={selected} data={d} onOutcomes={setOutcomes} onClear={() => setSelected(new Set())} onDone={data.reload} />
      )}
      {!d ? (
        <Loading error={data.error} />
      ) : rows.length === 0 ? (
        <p>{d.groups.length === 0 ? "No groups yet." : "No group matches."}</p>
      ) : (
        <ul role="tree" aria-label="Groups" class="tree" ref={treeRef}>
          {rows.map((r, i) => {
            const usage = d.usage.get(r.g.id) ?? 0;
            const t = d.throttled.get(r.g.id) ?? 0;
            const keys = d.keys.get(r.g.id)?.length ?? 0;
            const o = outcomes.get(r.g.id);
            const label = r.g.metadata.name || r.g.id;
            return (
              <li
                key={r.g.id}
                role="treeitem"
                data-id={r.g.id}
                aria-level={r.level}
                aria-expanded={r.hasChildren ? (r.expanded ? "true" : "false") : undefined}
                aria-selected={current === r.g.id ? "true" : "false"}
                aria-label={`${r.g.metadata.name || r.g.id}, ${r.g.hierarchy.limit_enforcement}, ${r.g.models.length} models, ${keys} keys, usage ${Math.round(usage * 100)}%${t ? `, ${t} throttled` : ""}${selected.has(r.g.id) ? ", selected" : ""}${o ? `. ${o.msg}` : ""}`}
                tabIndex={current === r.g.id ? 0 : -1}
                class={`tree-row level-${r.level}`}
                onKeyDown={(e) => onKey(e as unknown as KeyboardEvent, i)}
                onFocus={() => setActive(r.g.id)}
                onClick={() => navigate(groupPath(r.g.id))}
              >
                <input
                  type="checkbox"
                  class="select"
                  aria-label={`Select ${label}`}
                  checked={selected.has(r.g.id)}
                  onClick={(e) => e.stopPropagation()}
                  onKeyDown={(e) => e.stopPropagation()}
                  onChange={() => select(r.g.id)}
                />
                <span class="twisty" aria-hidden="true">
                  {r.hasChildren ? (r.expanded ? "▾" : "▸") : ""}
                </span>
                <span class="name">{r.g.metadata.name || r.g.id}</span>
                <span class="muted mono">{r.g.metadata.external_entity_id}</span>
                <span class={`badge ${r.g.hierarchy.limit_enforcement.toLowerCase()}`}>{r.g.hierarchy.limit_enforcement}</span>
                <span class="counts">
                  {r.g.models.length} models · {keys} keys
                </span>
                <span class={usage >= NEAR_LIMIT ? "usage near" : "usage"}>{Math.round(usage * 100)}%</span>
                {t > 0 && <span class="badge throttled">{t} × 429</span>}
                {o && <span class={o.ok ? "bulk-msg ok" : "bulk-msg field-error"}>{o.msg}</span>}
              </li>
            );
          })}
        </ul>
      )}
    </Page>
  );
}
