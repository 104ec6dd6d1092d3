// Shorthand limit inputs (docs/decisions.md, "Dashboard", Shorthand): `1k`, `60k`, `1.5M`, `1B`. The suffix is k or K
// (thousand), M (million) or B (billion); lowercase m is refused as ambiguous (milli? mega?). A decimal part has at
// most two digits and the result must be whole, so `1.5M` is 1,500,000 while `1.005k` is refused (write 1005). Plain
// integers, with or without thousands commas, are accepted too. Parsing is done on digit strings with BigInt: no
// floating point, so no 1.005 * 1000 = 1004.999… surprise. formatShorthand writes what parseShorthand reads back to the
// same number.

export type Parsed = { ok: true; value: number } | { ok: false; error: string };

const MULT: Record<string, bigint> = { k: 1000n, K: 1000n, M: 1000000n, B: 1000000000n };
const MAX = BigInt(Number.MAX_SAFE_INTEGER);

export function parseShorthand(input: string): Parsed {
  const s = input.trim();
  if (s === "") return { ok: false, error: "Enter a number, for example 60k." };
  if (/^\d{1,3}(,\d{3})+$/.test(s)) return bounded(BigInt(s.replace(/,/g, "")));
  const m = /^(\d+)(?:\.(\d+))?([A-Za-z])?$/.exec(s);
  if (!m) return { ok: false, error: `"${s}" is not a number: use digits with an optional k, M or B, for example 60k.` };
  const [, whole, frac = "", suffix] = m;
  if (suffix === "m") return { ok: false, error: "Lowercase m is ambiguous: write M for million." };
  if (suffix !== undefined && !(suffix in MULT)) {
    return { ok: false, error: `Unknown suffix "${suffix}": use k (thousand), M (million) or B (billion).` };
  }
  const mult = suffix === undefined ? 1n : MULT[suffix];
  if (frac !== "" && suffix === undefined) return { ok: false, error: "Limits are whole numbers." };
  if (frac.length > 2) return { ok: false, error: `At most two decimals: write ${exact(whole, frac, mult)} instead of ${s}.` };
  const scale = 10n ** BigInt(frac.length);
  const num = BigInt(whole) * scale + (frac === "" ? 0n : BigInt(frac));
  if ((num * mult) % scale !== 0n) return { ok: false, error: `${s} is not a whole number.` };
  return bounded((num * mult) / scale);
}

// exact is the integer that whole.frac × mult names, or the input when it names none, for the message only.
function exact(whole: string, frac: string, mult: bigint): string {
  const scale = 10n ** BigInt(frac.length);
  const num = BigInt(whole) * scale + BigInt(frac);
  return (num * mult) % scale === 0n ? ((num * mult) / scale).toString() : `${whole}.${frac}`;
}

function bounded(v: bigint): Parsed {
  if (v < 1n) return { ok: false, error: "A limit is at least 1." };
  if (v > MAX) return { ok: false, error: "That number is too large." };
  return { ok: true, value: Number(v) };
}

// formatShorthand writes n with the largest suffix that keeps it exact within two decimals, else as digits.
export function formatShorthand(n: number): string {
  const v = BigInt(n);
  for (const [suffix, mult] of [["B", 1000000000n], ["M", 1000000n], ["k", 1000n]] as const) {
    if (v >= mult && (v * 100n) % mult === 0n) {
      const hundredths = (v * 100n) / mult;
      const whole = hundredths / 100n;
      const frac = (hundredths % 100n).toString().padStart(2, "0").replace(/0+$/, "");
      return frac === "" ? `${whole}${suffix}` : `${whole}.${frac}${suffix}`;
    }
  }
  return v.toString();
}

// groupDigits writes an integer with thousands commas, the same in every locale: 60000 → "60,000".
export function groupDigits(n: number | string): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

// Money (docs/decisions.md, "Dashboard", Money): a COST limit's threshold is micro-USD in the API, and US dollars in
// the dashboard's fields: `$5`, `$0.25`, `$1.5k`, `$2M`, the dollar sign optional, with thousands commas or a k, M
// or B suffix as above. The amount may name fractions of a cent down to one micro-USD (six decimals after the
// suffix is applied); it is converted to a whole number of micro-USD with BigInt, never floating point.
const MICROS = 1000000n;

export function parseMoney(input: string): Parsed {
  const s = input.trim().replace(/^\$\s*/, "");
  if (s === "") return { ok: false, error: "Enter an amount in dollars, for example $5." };
  const plain = /^\d{1,3}(,\d{3})+(\.\d+)?$/.test(s) ? s.replace(/,/g, "") : s;
  const m = /^(\d+)(?:\.(\d+))?([A-Za-z])?$/.exec(plain);
  if (!m) return { ok: false, error: `"${input.trim()}" is not an amount: use dollars with an optional k, M or B, for example $5 or $1.5k.` };
  const [, whole, frac = "", suffix] = m;
  if (suffix === "m") return { ok: false, error: "Lowercase m is ambiguous: write M for million." };
  if (suffix !== undefined && !(suffix in MULT)) {
    return { ok: false, error: `Unknown suffix "${suffix}": use k (thousand), M (million) or B (billion).` };
  }
  const mult = (suffix === undefined ? 1n : MULT[suffix]) * MICROS;
  const scale = 10n ** BigInt(frac.length);
  const num = BigInt(whole) * scale + (frac === "" ? 0n : BigInt(frac));
  if ((num * mult) % scale !== 0n) return { ok: false, error: `${input.trim()} is finer than one micro-USD ($0.000001).` };
  const v = (num * mult) / scale;
  if (v < 1n) return { ok: false, error: "A budget is at least $0.000001." };
  if (v > MAX) return { ok: false, error: "That amount is too large." };
  return { ok: true, value: Number(v) };
}

// formatMoney writes micro-USD as the dollars parseMoney reads back to the same number: the largest suffix that keeps
// it exact within two decimals, else dollars with as many decimals as it needs.
export function formatMoney(micros: number): string {
  const v = BigInt(micros);
  for (const [suffix, mult] of [["B", 1000000000n], ["M", 1000000n], ["k", 1000n]] as const) {
    const m = mult * MICROS;
    if (v >= m && (v * 100n) % m === 0n) {
      const hundredths = (v * 100n) / m;
      const frac = (hundredths % 100n).toString().padStart(2, "0").replace(/0+$/, "");
      return `$${hundredths / 100n}${frac === "" ? "" : "." + frac}${suffix}`;
    }
  }
  const frac = (v % MICROS).toString().padStart(6, "0").replace(/0+$/, "");
  const cents = frac.length === 1 ? frac + "0" : frac;
  return `$${groupDigits((v / MICROS).toString())}${cents === "" ? "" : "." + cents}`;
}

// parseLimit reads a limit's threshold as its type takes it: dollars for COST, a count otherwise.
export function parseLimit(type: string, input: string): Parsed {
  return type === "COST" ? parseMoney(input) : parseShorthand(input);
}

// formatLimit writes a threshold of type as parseLimit reads it back.
export function formatLimit(type: string, n: number): string {
  return type === "COST" ? formatMoney(n) : formatShorthand(n);
}

// limitEquals is the hint beside a threshold field: the whole number the API receives, in micro-USD for COST.
export function limitEquals(type: string, n: number): string {
  return type === "COST" ? `= ${groupDigits(n)} micro-USD` : `= ${groupDigits(n)}`;
}

// showAmount writes a count of a limit of type for reading: dollars for COST, digits with commas otherwise.
export function showAmount(type: string, n: number): string {
  return type === "COST" ? formatMoney(n) : groupDigits(n);
}
