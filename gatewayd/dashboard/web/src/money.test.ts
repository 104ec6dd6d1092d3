import { describe, expect, it } from "vitest";
import { priceText, usd } from "./money";

describe("usd", () => {
  it("writes micro-USD as dollars, exactly, with at least two decimals", () => {
    expect([0, 5, 10_000, 1_500_000, 1_234_567, 18_000_000, 12_000_000_000].map(usd)).toEqual([
      "$0.00", "$0.000005", "$0.01", "$1.50", "$1.234567", "$18.00", "$12,000.00",
    ]);
  });
  it("rounds a fraction of a micro-USD (a scale's midpoint) to whole micro-USD", () => {
    expect(usd(12.5)).toBe("$0.000013");
  });
});

describe("priceText", () => {
  it("shows the prices as they were set, per million tokens", () => {
    expect(priceText({ input_per_million_tokens: "0.60", output_per_million_tokens: "0.80" })).toBe("$0.60 in / $0.80 out");
    expect(priceText({ output_per_million_tokens: "15" })).toBe("$0 in / $15 out");
    expect(priceText(undefined)).toBe("unpriced");
    expect(priceText({})).toBe("unpriced");
  });
});
