import { describe, expect, it } from "vitest";
import type { UsageLimit } from "./api-types";
import { bucketName, limitLines, niceCeil, scaleTop } from "./chart";

const lim = (type: UsageLimit["type"], unit: UsageLimit["unit"], threshold: number, per_bucket: number, source = "g"): UsageLimit =>
  ({ type, unit, threshold, per_bucket, source_group_id: source });

describe("limitLines", () => {
  it("draws the lowest ceiling per unit of the chart's type, lowest first", () => {
    const lines = limitLines(
      [lim("REQUEST", "MINUTE", 5, 5, "root"), lim("REQUEST", "MINUTE", 3, 3, "leaf"), lim("REQUEST", "SECOND", 1, 60), lim("TOKEN", "DAY", 1000, 1000)],
      "REQUEST",
      60,
    );
    expect(lines.map((l) => [l.unit, l.value, l.source])).toEqual([["MINUTE", 3, "leaf"], ["SECOND", 60, "g"]]);
    expect(lines[0].label).toBe("3 per minute");
    expect(lines[1].label).toBe("1 per second = 60 per minute");
  });
  it("names a day's allowance as one a bucket may spend, on half-hour buckets", () => {
    const [l] = limitLines([lim("TOKEN", "DAY", 1000, 1000), lim("REQUEST", "MINUTE", 2, 60)], "TOKEN", 1800);
    expect(l.label).toBe("1,000 tokens per day (any 30 minutes may spend it)");
    expect(limitLines([lim("REQUEST", "MINUTE", 2, 60)], "REQUEST", 1800)[0].label).toBe("2 per minute = 60 per 30 minutes");
  });
});

describe("budget lines", () => {
  // The usage route answers COST limits (micro-USD) and MONTH windows once the server has them; the chart reads
  // type and unit as strings, so it draws them already.
  const cost = (unit: string, threshold: number) => ({ type: "COST", unit, threshold, per_bucket: threshold, source_group_id: "root" });
  it("draws a COST limit on the cost chart only, in dollars, lowest first", () => {
    const limits = [cost("MONTH", 5_000_000), cost("DAY", 1_500_000), lim("TOKEN", "DAY", 1000, 1000)];
    const lines = limitLines(limits, "COST", 60);
    expect(lines.map((l) => [l.unit, l.value, l.label])).toEqual([
      ["DAY", 1_500_000, "$1.50 per day (any minute may spend it)"],
      ["MONTH", 5_000_000, "$5.00 per month (any minute may spend it)"],
    ]);
    expect(limitLines(limits, "TOKEN", 60).map((l) => l.unit)).toEqual(["DAY"]);
    expect(limitLines([lim("TOKEN", "DAY", 1000, 1000)], "COST", 60)).toEqual([]);
  });
  it("names a month of tokens as a calendar window too", () => {
    expect(limitLines([{ ...lim("TOKEN", "DAY", 2000, 2000), unit: "MONTH" }], "TOKEN", 1800)[0].label)
      .toBe("2,000 tokens per month (any 30 minutes may spend it)");
  });
});

describe("scale", () => {
  it("rounds up to 1, 2, 2.5 or 5 times a power of ten", () => {
    expect([0, 1, 3, 7, 20, 21, 240, 251, 9000].map(niceCeil)).toEqual([1, 1, 5, 10, 20, 25, 250, 500, 10000]);
  });
  it("leaves room for the limit lines", () => {
    expect(scaleTop([1, 2], [{ value: 60, label: "", unit: "SECOND", source: "" }])).toBe(100);
    expect(scaleTop([], [])).toBe(1);
  });
  it("names buckets in UTC", () => {
    expect(bucketName("2026-11-25T12:05:00Z", 60)).toBe("12:05");
    expect(bucketName("2026-11-25T12:30:00Z", 1800)).toBe("11-25 12:30");
  });
});
