package pricing

import (
	"math"
	"math/big"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Price
		bad  bool
	}{
		{in: "", want: 0},
		{in: "0", want: 0},
		{in: "0.60", want: 600_000},
		{in: "0.6", want: 600_000},
		{in: "3", want: 3_000_000},
		{in: "15.000001", want: 15_000_001},
		{in: "0.000001", want: 1},
		{in: "0.1", want: 100_000},
		{in: "999999999.999999", want: 999_999_999_999_999},
		{in: "0.0000001", bad: true}, // seven places: finer than a micro-USD
		{in: "-1", bad: true},
		{in: "1e3", bad: true},
		{in: "01", bad: true},
		{in: ".5", bad: true},
		{in: "5.", bad: true},
		{in: "1000000000", bad: true}, // ten digits before the point
		{in: " 1", bad: true},
		{in: "NaN", bad: true},
	} {
		got, err := Parse(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParsePricingNamesTheField(t *testing.T) {
	if _, err := ParsePricing("0.5", "x"); err == nil || err.Error()[:len("outputPerMillionTokens")] != "outputPerMillionTokens" {
		t.Fatalf("ParsePricing(0.5, x) = %v, want an error naming outputPerMillionTokens", err)
	}
	p, err := ParsePricing("0.60", "")
	if err != nil || p != (Pricing{Input: 600_000}) {
		t.Fatalf("ParsePricing(0.60, \"\") = %+v, %v", p, err)
	}
}

func TestCost(t *testing.T) {
	usd := func(s string) Price {
		p, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		p       Pricing
		in, out int64
		want    int64
	}{
		{name: "unpriced", p: Pricing{}, in: 1000, out: 1000, want: 0},
		{name: "one token at 0.60 is 0.6 micro-USD, up to 1", p: Pricing{Input: usd("0.60")}, in: 1, want: 1},
		{name: "0.4 micro-USD rounds down", p: Pricing{Input: usd("0.40")}, in: 1, want: 0},
		{name: "exactly half rounds up", p: Pricing{Input: usd("0.50")}, in: 1, want: 1},
		{name: "just under half rounds down", p: Pricing{Input: usd("0.499999")}, in: 1, want: 0},
		{name: "1.5 rounds up to 2", p: Pricing{Input: usd("1.5")}, in: 1, want: 2},
		{name: "2.5 rounds up to 3", p: Pricing{Input: usd("2.5")}, in: 1, want: 3},
		{name: "sum rounded once: 0.3 + 0.3 = 0.6 -> 1, not 0 + 0", p: Pricing{Input: usd("0.30"), Output: usd("0.30")}, in: 1, out: 1, want: 1},
		{name: "the design's example", p: Pricing{Input: usd("0.60"), Output: usd("0.80")}, in: 1000, out: 500, want: 1000},
		{name: "a million tokens cost the price", p: Pricing{Input: usd("3"), Output: usd("15")}, in: 1_000_000, out: 1_000_000, want: 18_000_000},
		{name: "the smallest price", p: Pricing{Output: usd("0.000001")}, in: 5, out: 499_999, want: 0},
		{name: "the smallest price, half", p: Pricing{Output: usd("0.000001")}, out: 500_000, want: 1},
		{name: "negative counts are 0", p: Pricing{Input: usd("1"), Output: usd("1")}, in: -5, out: 2, want: 2},
		{name: "no overflow past 64 bits", p: Pricing{Input: usd("999999999.999999")}, in: 1_000_000_000, want: 999_999_999_999_999_000},
		{name: "saturates", p: Pricing{Input: usd("999999999.999999"), Output: usd("999999999.999999")}, in: math.MaxInt64, out: math.MaxInt64, want: math.MaxInt64},
	} {
		if got := Cost(tc.p, tc.in, tc.out); got != tc.want {
			t.Errorf("%s: Cost(%+v, %d, %d) = %d, want %d", tc.name, tc.p, tc.in, tc.out, got, tc.want)
		}
	}
}

// exact is the cost by rational arithmetic: the definition Cost must equal.
func exact(p Pricing, in, out int64) *big.Int {
	n := new(big.Int).Mul(big.NewInt(max(in, 0)), big.NewInt(int64(p.Input)))
	n.Add(n, new(big.Int).Mul(big.NewInt(max(out, 0)), big.NewInt(int64(p.Output))))
	n.Add(n, big.NewInt(microPerUSD/2))
	return n.Quo(n, big.NewInt(microPerUSD))
}

func FuzzCost(f *testing.F) {
	f.Add("0.60", "0.80", int64(1000), int64(500))
	f.Add("0.5", "0", int64(1), int64(0))
	f.Add("999999999.999999", "1", int64(math.MaxInt64), int64(3))
	f.Fuzz(func(t *testing.T, in, out string, ti, to int64) {
		p, err := ParsePricing(in, out)
		if err != nil {
			return
		}
		want := exact(p, ti, to)
		if !want.IsInt64() {
			want = big.NewInt(math.MaxInt64)
		}
		if got := Cost(p, ti, to); got != want.Int64() {
			t.Fatalf("Cost(%+v, %d, %d) = %d, want %d", p, ti, to, got, want.Int64())
		}
	})
}

// FuzzParse checks Parse against the decimal read by math/big: the same number of micro-USD.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0.60", "3", "0.000001", "12.5", "-1", "1.2345678"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil || s == "" {
			return
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("Parse(%q) = %d, but it is not a decimal", s, p)
		}
		r.Mul(r, big.NewRat(microPerUSD, 1))
		if !r.IsInt() || r.Num().Int64() != int64(p) {
			t.Fatalf("Parse(%q) = %d, want %s", s, p, r.RatString())
		}
	})
}
