import { describe, expect, it } from "vitest";
import type { EndpointTargets } from "./api-types";
import { replicaLine, replicasOf, triesSummary, untilText } from "./targetstate";

const now = new Date("2026-11-29T09:00:00Z");
const zero = { ok: 0, status: 0, unreachable: 0, timeout: 0, credentials: 0, canceled: 0 };

describe("untilText", () => {
  it("is the UTC time of day, with the date when it is another day", () => {
    expect(untilText("2026-11-29T09:00:30.123456789Z", now)).toBe("09:00:30 UTC");
    expect(untilText("2026-11-29T10:00:30+01:00", now)).toBe("09:00:30 UTC");
    expect(untilText("2026-11-30T00:00:05Z", now)).toBe("2026-11-30 00:00:05 UTC");
    expect(untilText("soon", now)).toBe("soon");
  });
});

describe("triesSummary", () => {
  it("counts every failing outcome as failed and canceled as neither", () => {
    expect(triesSummary(zero)).toEqual({ ok: 0, failed: 0, detail: "" });
    expect(triesSummary({ ...zero, ok: 7, status: 2, timeout: 1, canceled: 4 })).toEqual({ ok: 7, failed: 3, detail: "2 status, 1 timeout" });
    expect(triesSummary({ ...zero, unreachable: 1, credentials: 5 })).toEqual({ ok: 0, failed: 6, detail: "1 unreachable, 5 credentials" });
  });
});

describe("replicas", () => {
  const up = { state: "up" as const, cooling_until: null, consecutive_failures: 0, tries_last_hour: zero };
  const cooling = { ...up, state: "cooling" as const, cooling_until: "2026-11-29T09:00:25Z" };
  it("words each replica's state", () => {
    expect(replicaLine([{ replica: "gw-a", ...up }, { replica: "gw-b", ...cooling }], now)).toBe("gw-a up; gw-b cooling until 09:00:25 UTC");
  });
  it("gathers the replicas that answered and those that did not, once each", () => {
    const t = (replicas: string[]) => ({ name: "t", provider: "OPENAI", base_url: "u", weight: 1, priority: 0, ...up, replicas: replicas.map((replica) => ({ replica, ...up })) });
    const a = (targets: ReturnType<typeof t>[], unanswered: string[]): EndpointTargets =>
      ({ endpoint_id: "e", slug: "s", replica: "gw-a", retry: { attempts: 1, on_status: [] }, cooldown: { failures: 3, duration_ms: 1 }, targets, unanswered_replicas: unanswered });
    expect(replicasOf([a([t(["gw-a", "gw-b"])], ["10.0.0.3:9090"]), a([t(["gw-a"]), t(["gw-a", "gw-c"])], ["10.0.0.3:9090"])]))
      .toEqual({ answered: ["gw-a", "gw-b", "gw-c"], unanswered: ["10.0.0.3:9090"] });
  });
});
