import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { formatLimit, formatMoney, formatShorthand, groupDigits, limitEquals, parseLimit, parseMoney, parseShorthand, type Parsed } from "./shorthand";

// The shared case file: gatewayd/dashboard/testdata/shorthand.json.
const cases = JSON.parse(readFileSync(new URL("../../testdata/shorthand.json", import.meta.url), "utf8")) as {
  parse: { in: string; want?: number; error?: string }[];
  format: { n: number; want: string }[];
  roundtrip: number[];
  money: { parse: { in: string; want?: number; error?: string }[]; format: { n: number; want: string }[]; roundtrip: number[] };
};

// expectParsed checks a parse against one case of the shared file: an error containing c.error, or exactly the
// integer c.want.
function expectParsed(got: Parsed, c: { want?: number; error?: string }) {
  if (c.error !== undefined) {
    expect(got.ok).toBe(false);
    if (!got.ok) expect(got.error).toContain(c.error);
  } else {
    expect(got).toEqual({ ok: true, value: c.want });
    if (got.ok) expect(Number.isInteger(got.value)).toBe(true);
  }
}

describe("parseShorthand", () => {
  it.each(cases.parse)("$in", (c) => expectParsed(parseShorthand(c.in), c));
  it("names the exact integer when a third decimal is refused", () => {
    expect(parseShorthand("1.005k")).toEqual({ ok: false, error: "At most two decimals: write 1005 instead of 1.005k." });
  });
});

describe("formatShorthand", () => {
  it.each(cases.format)("$n", (c) => expect(formatShorthand(c.n)).toBe(c.want));
  it.each(cases.roundtrip)("round trips %d", (n) => {
    expect(parseShorthand(formatShorthand(n))).toEqual({ ok: true, value: n });
    expect(parseShorthand(groupDigits(n))).toEqual({ ok: true, value: n });
  });
  it("groups digits the same in every locale", () => {
    expect(groupDigits(60000)).toBe("60,000");
    expect(groupDigits(1500000)).toBe("1,500,000");
    expect(groupDigits(999)).toBe("999");
  });
});

describe("parseMoney", () => {
  it.each(cases.money.parse)("$in", (c) => expectParsed(parseMoney(c.in), c));
});

describe("formatMoney", () => {
  it.each(cases.money.format)("$n", (c) => expect(formatMoney(c.n)).toBe(c.want));
  it.each(cases.money.roundtrip)("round trips %d", (n) => expect(parseMoney(formatMoney(n))).toEqual({ ok: true, value: n }));
});

describe("limits by type", () => {
  it("reads a COST threshold as dollars and any other as a count", () => {
    expect(parseLimit("COST", "$5")).toEqual({ ok: true, value: 5000000 });
    expect(parseLimit("COST", "1.5k")).toEqual({ ok: true, value: 1500000000 });
    expect(parseLimit("TOKEN", "1.5k")).toEqual({ ok: true, value: 1500 });
    expect(parseLimit("REQUEST", "$5").ok).toBe(false);
    expect(formatLimit("COST", 5000000)).toBe("$5");
    expect(formatLimit("TOKEN", 5000000)).toBe("5M");
    expect(limitEquals("COST", 5000000)).toBe("= 5,000,000 micro-USD");
    expect(limitEquals("TOKEN", 60000)).toBe("= 60,000");
  });
});
