// Money as the dashboard shows it (docs/decisions.md "Prices and cost"): amounts arrive as integers of micro-USD
// (millionths of a dollar) and are written with integer arithmetic only, so what is shown is exactly what the
// server counted. Prices arrive as the decimal strings they were set as, and are shown as they are.
import type { TargetPricing } from "./api-types";
import { groupDigits } from "./shorthand";

// usd writes micro-USD as dollars: at least two decimals, more only when a fraction of a cent is left ($1.50,
// $0.000005, $12,000.00).
export function usd(micro: number): string {
  const m = Math.round(micro);
  const sign = m < 0 ? "-" : "";
  const abs = Math.abs(m);
  const dollars = Math.floor(abs / 1_000_000);
  let frac = String(abs % 1_000_000).padStart(6, "0");
  while (frac.length > 2 && frac.endsWith("0")) frac = frac.slice(0, -1);
  return `${sign}$${groupDigits(dollars)}.${frac}`;
}

// priceText is a target's prices per million tokens, input and output, or that it has none.
export function priceText(p: TargetPricing | undefined): string {
  const i = p?.input_per_million_tokens, o = p?.output_per_million_tokens;
  if (!i && !o) return "unpriced";
  return `$${i || "0"} in / $${o || "0"} out`;
}
