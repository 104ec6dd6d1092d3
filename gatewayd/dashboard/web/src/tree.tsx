// The group tree: every group of the workspace under its parent (at most five levels), with its mode, model and
// key counts, its highest usage as a share of its threshold and its 429s of the last hour. It is an ARIA tree:
// arrow keys move and open, Home and End jump, Enter opens the group. Search and filters live in the URL.
import { useMemo, useRef, useState } from "preact/hooks";
import { api, listGroups, listKeys, type Throttles } from "./api";
import type { Group, GroupUsage, Key } from "./api-types";
import { BASE, Link, navigate } from "./app";
import { Loading, Page, useAsync } from "./ui";

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

export function GroupTree(props: { query: URLSearchParams }) {
  const q = props.query.get("q") ?? "";
  const filter = props.query.get("filter") ?? "";
  const data = useAsync(loadTree, []);
  const [collapsed, setCollapsed] = useState<Set<string>>(new Set());
  const [active, setActive] = useState<string | null>(null);
  const treeRef = useRef<HTMLUListElement>(null);

  function setQuery(next: { q?: string; filter?: string }) {
    const p = new URLSearchParams(props.query);
    for (const [k, v] of Object.entries(next)) {
      if (v) p.set(k, v);
      else p.delete(k);
    }
    const s = p.toString();
    navigate(BASE + (s ? "?" + s : ""), true);
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
        navigate(`${BASE}groups/${encodeURIComponent(r.g.id)}`);
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
        <Link href={BASE + "groups/new"} class="button primary">
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
            return (
              <li
                key={r.g.id}
                role="treeitem"
                data-id={r.g.id}
                aria-level={r.level}
                aria-expanded={r.hasChildren ? (r.expanded ? "true" : "false") : undefined}
                aria-selected={current === r.g.id ? "true" : "false"}
                aria-label={`${r.g.metadata.name || r.g.id}, ${r.g.hierarchy.limit_enforcement}, ${r.g.models.length} models, ${keys} keys, usage ${Math.round(usage * 100)}%${t ? `, ${t} throttled` : ""}`}
                tabIndex={current === r.g.id ? 0 : -1}
                class={`tree-row level-${r.level}`}
                onKeyDown={(e) => onKey(e as unknown as KeyboardEvent, i)}
                onFocus={() => setActive(r.g.id)}
                onClick={() => navigate(`${BASE}groups/${encodeURIComponent(r.g.id)}`)}
              >
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
              </li>
            );
          })}
        </ul>
      )}
    </Page>
  );
}
