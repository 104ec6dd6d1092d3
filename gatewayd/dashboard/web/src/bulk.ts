// Bulk edits of the group tree, the pure half: the models a limit change writes to each selected group, the order
// the writes go in, and which groups a bulk delete sends. The tree (tree.tsx) runs them, each PATCH dry-run first.

import type { Group, Limit, ModelConfig } from "./api-types";
import { limitList } from "./limitkind";

export interface LimitChange {
  slug: string;
  type: Limit["type"];
  unit: Limit["unit"];
  threshold: number;
}

// withLimit is g's own models with change applied: the limit of the same (type, unit) on change.slug is replaced,
// or added when g has none. A group without the slug gets an error in words for the operator, and nothing is sent.
export function withLimit(g: Group, c: LimitChange): { models: ModelConfig[]; old: number | null } | { error: string } {
  const kind = limitList(c.unit);
  let old: number | null = null;
  let found = false;
  const models = g.models.map((m) => {
    const out: ModelConfig = { slug: m.slug, rate_limits: [...m.rate_limits], usage_limits: [...m.usage_limits] };
    if (m.slug !== c.slug) return out;
    found = true;
    const list = out[kind]!;
    const i = list.findIndex((l) => l.type === c.type && l.unit === c.unit);
    const next = { type: c.type, unit: c.unit, threshold: c.threshold };
    if (i >= 0) {
      old = list[i].threshold;
      list[i] = next;
    } else list.push(next);
    return out;
  });
  if (!found) return { error: `models: this group has no model ${c.slug}; nothing was sent.` };
  return { models, old };
}

// depthOf is how many ancestors g has among all.
export function depthOf(id: string, all: Group[]): number {
  const byId = new Map(all.map((g) => [g.id, g]));
  let d = 0;
  const seen = new Set<string>();
  for (let p = byId.get(id)?.hierarchy.parent_group_id; p && byId.has(p) && !seen.has(p); p = byId.get(p)!.hierarchy.parent_group_id) {
    seen.add(p);
    d++;
  }
  return d;
}

// writeOrder orders the groups of a limit change so that, in a CASCADING tree, no write is refused only because
// another selected group has not been written yet: the groups whose limit goes down are written deepest first (a
// parent may not fall below its descendant), then those whose limit goes up or is new, shallowest first (a child
// may not exceed its parent).
export function writeOrder(ids: string[], all: Group[], c: LimitChange): string[] {
  const byId = new Map(all.map((g) => [g.id, g]));
  const down: [string, number][] = [];
  const up: [string, number][] = [];
  for (const id of ids) {
    const g = byId.get(id);
    if (!g) continue;
    const w = withLimit(g, c);
    const d = depthOf(id, all);
    if ("old" in w && w.old !== null && c.threshold < w.old) down.push([id, d]);
    else up.push([id, d]);
  }
  down.sort((a, b) => b[1] - a[1]);
  up.sort((a, b) => a[1] - b[1]);
  return [...down, ...up].map(([id]) => id);
}

// topmost is the selected groups that have no selected ancestor: deleting them deletes the others with their
// subtrees, so only they are sent.
export function topmost(ids: string[], all: Group[]): string[] {
  const byId = new Map(all.map((g) => [g.id, g]));
  const sel = new Set(ids);
  return ids.filter((id) => {
    const seen = new Set<string>();
    for (let p = byId.get(id)?.hierarchy.parent_group_id; p && !seen.has(p); p = byId.get(p)?.hierarchy.parent_group_id) {
      if (sel.has(p)) return false;
      seen.add(p);
    }
    return true;
  });
}
