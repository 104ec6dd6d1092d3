import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { formatShorthand, groupDigits, parseShorthand } from "./shorthand";

// The shared case file: gatewayd/dashboard/testdata/shorthand.json.
const cases = JSON.parse(readFileSync(new URL("../../testdata/shorthand.json", import.meta.url), "utf8")) as {
  parse: { in: string; want?: number; error?: string }[];
  format: { n: number; want: string }[];
  roundtrip: number[];
};

describe("parseShorthand", () => {
  it.each(cases.parse)("$in", (c) => {
    const got = parseShorthand(c.in);
    if (c.error !== undefined) {
      expect(got.ok).toBe(false);
      if (!got.ok) expect(got.error).toContain(c.error);
    } else {
      expect(got).toEqual({ ok: true, value: c.want });
      if (got.ok) expect(Number.isInteger(got.value)).toBe(true);
    }
  });
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
