// How the endpoints screen words a target's state over the gatewayd replicas: until when a cooling target is out
// of rotation, its state on each replica, and its tries of the last hour as ok against failed.
import type { EndpointTargets, TargetState } from "./api-types";

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

// replicaLine is a target's state on each replica that answered: "gw-a up; gw-b cooling until 09:00:25 UTC".
export function replicaLine(replicas: TargetState["replicas"], now: Date): string {
  return replicas
    .map((r) => `${r.replica} ${r.state === "cooling" && r.cooling_until ? `cooling until ${untilText(r.cooling_until, now)}` : r.state}`)
    .join("; ");
}

// replicasOf are the replicas whose state the answers hold, in the order first seen, and the addresses of those
// that did not answer.
export function replicasOf(answers: EndpointTargets[]): { answered: string[]; unanswered: string[] } {
  const answered = new Set<string>();
  const unanswered = new Set<string>();
  for (const a of answers) {
    for (const t of a.targets) for (const r of t.replicas) answered.add(r.replica);
    for (const u of a.unanswered_replicas) unanswered.add(u);
  }
  return { answered: [...answered], unanswered: [...unanswered] };
}
