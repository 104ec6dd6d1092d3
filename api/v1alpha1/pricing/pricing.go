// Package pricing is the arithmetic of money: an Endpoint target's prices, decimal strings of US dollars per
// million tokens, read exactly into integers, and a call's cost from its token usage, in millionths of a dollar
// rounded half up (docs/decisions.md "Prices and cost"). No float touches a price. Pure; gatewayd's view parses
// each target's prices once when it loads a snapshot, and every settled call costs one Cost.
package pricing

import (
	"fmt"
	"math"
	"math/bits"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Price is a price of a million tokens in micro-USD (millionths of a US dollar): "0.60" is 600000. The price
// pattern allows at most six places after the point, so every valid price is a whole number of micro-USD, and
// at most nine digits before it, so the largest fits an int64 with room (999999999999999).
type Price int64

// microPerUSD is the number of micro-USD in a dollar, and of tokens in the million a price is quoted for.
const microPerUSD = 1_000_000

// Parse reads s, a price as the CRD and REST accept it (gatewayv1.PricePattern: a non-negative decimal, at most
// six places after the point), exactly. The empty string is no price: 0.
func Parse(s string) (Price, error) {
	if s == "" {
		return 0, nil
	}
	if !gatewayv1.PricePattern.MatchString(s) {
		return 0, fmt.Errorf("price %q: must be a non-negative decimal of US dollars with at most 6 places after the point", s)
	}
	var whole, frac int64
	places := 0
	point := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			point = true
		case point:
			frac = 10*frac + int64(c-'0')
			places++
		default:
			whole = 10*whole + int64(c-'0')
		}
	}
	for ; places < 6; places++ {
		frac *= 10
	}
	return Price(whole*microPerUSD + frac), nil
}

// Pricing is a target's prices: of input (prompt) tokens and of output (completion) tokens. The zero value is
// an unpriced target, whose calls cost 0.
type Pricing struct {
	Input, Output Price
}

// ParsePricing reads a pair of price strings, as an Endpoint target carries them.
func ParsePricing(input, output string) (Pricing, error) {
	in, err := Parse(input)
	if err != nil {
		return Pricing{}, fmt.Errorf("inputPerMillionTokens: %w", err)
	}
	out, err := Parse(output)
	if err != nil {
		return Pricing{}, fmt.Errorf("outputPerMillionTokens: %w", err)
	}
	return Pricing{Input: in, Output: out}, nil
}

// Cost is what a call of inputTokens and outputTokens costs at p, in micro-USD: (input × p.Input + output ×
// p.Output) / 1,000,000, rounded half up once, on the exact sum (so a call's cost does not depend on how its
// tokens split). Negative counts are taken as 0. The product is computed on 128 bits; a cost past the largest
// int64 (about 9.2 trillion dollars) is that largest int64.
func Cost(p Pricing, inputTokens, outputTokens int64) int64 {
	hi1, lo1 := bits.Mul64(nonNegative(inputTokens), uint64(max(p.Input, 0)))
	hi2, lo2 := bits.Mul64(nonNegative(outputTokens), uint64(max(p.Output, 0)))
	lo, carry := bits.Add64(lo1, lo2, 0)
	hi, over := bits.Add64(hi1, hi2, carry)
	lo, carry = bits.Add64(lo, microPerUSD/2, 0) // half up
	hi, over2 := bits.Add64(hi, 0, carry)
	if over != 0 || over2 != 0 || hi >= microPerUSD {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, microPerUSD)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func nonNegative(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}
