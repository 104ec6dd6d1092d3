// The client-side cascading check: the same rule as api/v1alpha1/hierarchy.validateCascading, run before a
// submit so the operator sees the refusal next to the field at once. In a CASCADING tree a declared limit may not
// exceed the same (slug, type, unit) of any ancestor, nor fall below that of any descendant. The server stays the
// authority (a dry run follows); the messages are the webhook's, word for word, and both sides run the case file
// api/v1alpha1/hierarchy/testdata/cascading.json.

export interface CLimit { type: string; unit: string; threshold: number }
export interface CModel { slug: string; rate_limits: CLimit[]; usage_limits: CLimit[] }
export interface CGroup { id: string; parent: string | null; mode: string; models: CModel[] }

export interface Conflict { path: string; message: string }

export const MSG_CHILD_EXCEEDS_PARENT = "Child group exceeds parent group limit.";

// cascadingConflicts checks group g (its models as they would be written) against the other groups of the
// workspace. g.parent names its parent; g.id may be new (not in groups).
export function cascadingConflicts(g: CGroup, groups: CGroup[]): Conflict[] {
  const byId = new Map(groups.map((x) => [x.id, x]));
  byId.set(g.id, g);
  const ancestors: CGroup[] = [];
  const seen = new Set([g.id]);
  for (let p = g.parent; p && byId.has(p) && !seen.has(p); p = byId.get(p)!.parent) {
    seen.add(p);
    ancestors.push(byId.get(p)!);
  }
  const root = ancestors.length ? ancestors[ancestors.length - 1] : g;
  if (root.mode !== "CASCADING") return [];
  const descendants = descendantsOf(g.id, groups);
  const out: Conflict[] = [];
  g.models.forEach((m, i) => {
    for (const kind of ["rate_limits", "usage_limits"] as const) {
      m[kind].forEach((l, j) => {
        const path = `models[${i}].${kind}[${j}].threshold`;
        const a = tightest(ancestors, m.slug, l, (other, mine) => other < mine);
        if (a) {
          out.push({ path, message: `${MSG_CHILD_EXCEEDS_PARENT} (${m.slug} ${l.type} ${l.unit}: ${l.threshold} here, ancestor ${a.id} allows ${a.threshold})` });
        }
        const d = tightest(descendants, m.slug, l, (other, mine) => other > mine);
        if (d) {
          out.push({ path, message: `${MSG_CHILD_EXCEEDS_PARENT} (${m.slug} ${l.type} ${l.unit}: ${l.threshold} here, descendant ${d.id} declares ${d.threshold}; lower the descendant first)` });
        }
      });
    }
  });
  return out;
}

// descendantsOf lists the descendants of id, breadth first, children sorted by id.
export function descendantsOf(id: string, groups: CGroup[]): CGroup[] {
  const children = new Map<string, CGroup[]>();
  for (const x of groups) {
    if (!x.parent) continue;
    const list = children.get(x.parent) ?? [];
    list.push(x);
    children.set(x.parent, list);
  }
  const out: CGroup[] = [];
  const queue = [id];
  const seen = new Set([id]);
  while (queue.length) {
    const cur = queue.shift()!;
    for (const c of (children.get(cur) ?? []).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
      if (seen.has(c.id)) continue;
      seen.add(c.id);
      out.push(c);
      queue.push(c.id);
    }
  }
  return out;
}

function tightest(others: CGroup[], slug: string, l: CLimit, conflicts: (other: number, mine: number) => boolean) {
  for (const o of others) {
    const m = o.models.find((x) => x.slug === slug);
    if (!m) continue;
    for (const ol of [...m.rate_limits, ...m.usage_limits]) {
      if (ol.type === l.type && ol.unit === l.unit && conflicts(ol.threshold, l.threshold)) {
        return { id: o.id, threshold: ol.threshold };
      }
    }
  }
  return null;
}
