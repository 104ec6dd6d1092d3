// The arithmetic of the usage charts, kept apart from the drawing so it is tested on its own: which limit lines a
// chart draws, the top of its scale, and how its buckets are named.
import type { UsageLimit } from "./api-types";
import { usd } from "./money";

export interface LimitLine {
  // value is the limit's ceiling on one bucket (the API's per_bucket), where the line is drawn.
  value: number;
  label: string;
  unit: string;
  source: string;
}

// A limit as the usage route answers it; type and unit are read as strings, so a type or unit this build does not
// list (COST, MONTH) is still drawn when a chart asks for it.
type AnyLimit = Omit<UsageLimit, "type" | "unit"> & { type: string; unit: string };

const UNIT_WORD: Record<string, string> = { SECOND: "second", MINUTE: "minute", DAY: "day", MONTH: "month" };
// CALENDAR units are windows a bucket never straddles: one bucket may spend the whole allowance.
const CALENDAR = new Set(["DAY", "MONTH"]);
const WHAT: Record<string, string> = { TOKEN: "tokens", REQUEST: "requests" };

// amount writes a limit's threshold: dollars for COST (micro-USD), else a grouped count.
function amount(type: string, n: number): string {
  return type === "COST" ? usd(n) : n.toLocaleString("en-US");
}

// limitLines are the lines a chart of type draws: per unit, the limit with the lowest ceiling on a bucket (in
// CASCADING mode every layer's bucket is charged, so the lowest refuses first), lowest first. The label says the
// limit as set and what it allows in one bucket. A COST limit (a budget, in micro-USD) is labelled in dollars.
export function limitLines(limits: AnyLimit[], type: string, bucketSeconds: number): LimitLine[] {
  const best = new Map<string, AnyLimit>();
  for (const l of limits) {
    if (l.type !== type) continue;
    const b = best.get(l.unit);
    if (!b || l.per_bucket < b.per_bucket) best.set(l.unit, l);
  }
  const per = bucketSeconds === 60 ? "minute" : `${bucketSeconds / 60} minutes`;
  return [...best.values()]
    .sort((a, b) => a.per_bucket - b.per_bucket)
    .map((l) => ({
      value: l.per_bucket,
      unit: l.unit,
      source: l.source_group_id,
      label: CALENDAR.has(l.unit)
        ? `${amount(type, l.threshold)}${WHAT[type] ? ` ${WHAT[type]}` : ""} per ${UNIT_WORD[l.unit]} (any ${per} may spend it)`
        : l.per_bucket === l.threshold
          ? `${amount(type, l.threshold)} per ${UNIT_WORD[l.unit] ?? l.unit.toLowerCase()}`
          : `${amount(type, l.threshold)} per ${UNIT_WORD[l.unit] ?? l.unit.toLowerCase()} = ${amount(type, l.per_bucket)} per ${per}`,
    }));
}

// niceCeil is the smallest of 1, 2, 2.5 or 5 times a power of ten that is at least n (and at least 1).
export function niceCeil(n: number): number {
  if (n <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(n)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= n) return m * p;
  return 10 * p;
}

// scaleTop is the top of a chart's scale: room for the tallest bar and every limit line.
export function scaleTop(values: number[], lines: LimitLine[]): number {
  return niceCeil(Math.max(0, ...values, ...lines.map((l) => l.value)));
}

// bucketName names a bucket by its start in UTC: the time of day, and the date too for a day's window.
export function bucketName(start: string, bucketSeconds: number): string {
  const d = new Date(start);
  const hm = d.toISOString().slice(11, 16);
  return bucketSeconds >= 1800 ? `${d.toISOString().slice(5, 10)} ${hm}` : hm;
}
