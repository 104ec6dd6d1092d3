// How the endpoints screen words a target's state on the replica that answered: until when a cooling target is out
// of rotation, and its tries of the last hour as ok against failed.
import type { TargetState } from "./api-types";

export type Tries = TargetState["tries_last_hour"];

// FAILED are the outcomes that fail a try; canceled (the client left) does not blame the target.
export const FAILED = ["status", "unreachable", "timeout", "credentials"] as const;

// untilText is when a cooling target is back: the UTC time of day, with its date when that is not now's UTC day.
export function untilText(iso: string, now: Date): string {
  const d = new Date(iso);
  if (isNaN(d.getTime())) return iso;
  const [day, time] = d.toISOString().split("T");
  const hms = time.slice(0, 8);
  return day === now.toISOString().slice(0, 10) ? `${hms} UTC` : `${day} ${hms} UTC`;
}

// triesSummary counts the hour's tries as ok and failed, and names the failed ones by outcome ("2 status, 1
// timeout"), in the order of FAILED, leaving out the outcomes with none.
export function triesSummary(tries: Tries): { ok: number; failed: number; detail: string } {
  let failed = 0;
  const parts: string[] = [];
  for (const o of FAILED) {
    const n = tries[o] ?? 0;
    failed += n;
    if (n > 0) parts.push(`${n} ${o}`);
  }
  return { ok: tries.ok ?? 0, failed, detail: parts.join(", ") };
}
