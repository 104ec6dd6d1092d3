package tryplan

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// seq is a Rand that answers the draws it is given in turn (each taken modulo n).
func seq(draws ...int) Rand {
	return func(n int) int {
		d := draws[0]
		draws = draws[1:]
		return d % n
	}
}

// noDraw is a Rand for orders that must draw nothing.
func noDraw(t *testing.T) Rand {
	return func(int) int { t.Fatal("drew a random number"); return 0 }
}

// TestPlan: each rule of docs/routing.md about the order of tries, one row each.
func TestPlan(t *testing.T) {
	a, b, c := Target{Weight: 1}, Target{Weight: 1}, Target{Weight: 1}
	for _, tc := range []struct {
		name     string
		targets  []Target
		cooling  []bool
		rnd      Rand
		attempts int
		want     []int
	}{
		{"one target, one try", []Target{a}, nil, nil, 0, []int{0}},
		{"one target with retries tries it again", []Target{a}, nil, nil, 2, []int{0, 0, 0}},
		{"a cooling single target is still tried", []Target{a}, []bool{true}, nil, 0, []int{0}},
		// Rule 3: the same priority before the next priority.
		{"same priority first", []Target{{Priority: 1}, a, b}, nil, seq(0), 2, []int{1, 2, 0}},
		{"priority order whatever the spec order", []Target{{Priority: 2}, {Priority: 0}, {Priority: 1}}, nil, nil, 2, []int{1, 2, 0}},
		// Rule 3: a cooling target is skipped while another can be tried...
		{"cooling skipped", []Target{a, b, c}, []bool{true, false, false}, seq(0, 0), 1, []int{1, 2}},
		{"cooling lower priority skipped for the next priority", []Target{a, {Priority: 1}}, []bool{true, false}, nil, 0, []int{1}},
		{"cooling target skipped on every try while another is usable", []Target{a, b}, []bool{true, false}, seq(0), 2, []int{1, 1, 1}},
		// ... and when every target is cooling the call still tries them, in plan order.
		{"all cooling tried in order", []Target{{Priority: 1}, a}, []bool{true, true}, nil, 1, []int{1, 0}},
		// More attempts than targets: round after round, in the same order.
		{"rounds", []Target{a, {Priority: 1}}, nil, nil, 3, []int{0, 1, 0, 1}},
		// Weighted order: a draw of 0 in [0, 4) falls on the first target (weight 1), a draw of 1 on the second (weight 3).
		{"weighted draw lands on the light target", []Target{{Weight: 1}, {Weight: 3}}, nil, seq(0), 1, []int{0, 1}},
		{"weighted draw lands on the heavy target", []Target{{Weight: 1}, {Weight: 3}}, nil, seq(1), 1, []int{1, 0}},
		{"weighted draw, last unit of the heavy one", []Target{{Weight: 1}, {Weight: 3}}, nil, seq(3), 1, []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := tc.rnd
			if rnd == nil {
				rnd = noDraw(t)
			}
			if got := Plan(tc.targets, tc.cooling, rnd, tc.attempts); !slices.Equal(got, tc.want) {
				t.Errorf("Plan = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPickSkipsATargetThatWentCoolingDuringTheCall: the cooldown is read before every try, so a target that went
// out during this call is not tried again while another can be.
func TestPickSkipsATargetThatWentCoolingDuringTheCall(t *testing.T) {
	order := []int{0, 1}
	state := []State{{Tried: 1}, {Tried: 1}}
	if got := Pick(order, state); got != 0 {
		t.Fatalf("with both tried once, Pick = %d, want 0 (plan order)", got)
	}
	state[0].Cooling = true
	if got := Pick(order, state); got != 1 {
		t.Fatalf("with target 0 gone cooling, Pick = %d, want 1", got)
	}
}

// TestOrderShares: the first target of a priority is each target in proportion to its weight.
func TestOrderShares(t *testing.T) {
	targets := []Target{{Weight: 1}, {Weight: 3}, {Weight: 6}, {Weight: 5, Priority: 1}}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 100_000
	var first [4]int
	var buf [MaxTargets]int
	for range n {
		o := Order(targets, r.IntN, &buf)
		first[o[0]]++
		if o[3] != 3 {
			t.Fatalf("order %v: the priority-1 target is not last", o)
		}
	}
	for i, want := range []float64{0.1, 0.3, 0.6, 0} {
		if got := float64(first[i]) / n; got < want-0.01 || got > want+0.01 {
			t.Errorf("target %d first in %.3f of orders, want %.2f", i, got, want)
		}
	}
}

// TestOrderSharesAmongUsable: with one target cooling, the others share the calls in proportion to their weights
// (the first usable target of a weighted order), as the rule "share among the usable targets" says.
func TestOrderSharesAmongUsable(t *testing.T) {
	targets := []Target{{Weight: 5}, {Weight: 1}, {Weight: 3}}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 100_000
	var first [3]int
	var buf [MaxTargets]int
	state := []State{{Cooling: true}, {}, {}}
	for range n {
		first[Pick(Order(targets, r.IntN, &buf), state)]++
	}
	if first[0] != 0 {
		t.Fatalf("the cooling target was picked %d times", first[0])
	}
	if got := float64(first[1]) / n; got < 0.24 || got > 0.26 {
		t.Errorf("weight 1 of 4 usable picked in %.3f of calls, want 0.25", got)
	}
}

// TestNewPolicy: the defaults of docs/routing.md.
func TestNewPolicy(t *testing.T) {
	three := int32(3)
	for _, tc := range []struct {
		name         string
		targets      int
		attempts     *int32
		onStatus     []int32
		wantAttempts int
		wantFail     []int
		wantNotFail  []int
	}{
		{"one target makes one try", 1, nil, nil, 0, []int{429, 500, 502, 503, 504}, []int{400, 401, 404, 501}},
		{"two targets, one retry", 2, nil, nil, 1, nil, nil},
		{"attempts default at most 2", 5, nil, nil, 2, nil, nil},
		{"attempts set", 1, &three, nil, 3, nil, nil},
		{"onStatus set replaces the default", 2, nil, []int32{408, 503}, 1, []int{408, 503}, []int{429, 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(tc.targets, tc.attempts, tc.onStatus, 0, 0)
			if p.Attempts != tc.wantAttempts || p.Failures != DefaultFailures || p.Cooldown != DefaultCooldown {
				t.Errorf("policy %+v, want attempts %d, failures %d, cooldown %s", p, tc.wantAttempts, DefaultFailures, DefaultCooldown)
			}
			for _, s := range tc.wantFail {
				if !p.Fail.Has(s) {
					t.Errorf("%d does not fail a try", s)
				}
			}
			for _, s := range tc.wantNotFail {
				if p.Fail.Has(s) {
					t.Errorf("%d fails a try", s)
				}
			}
		})
	}
	if p := NewPolicy(2, nil, nil, 1, 5*time.Second); p.Failures != 1 || p.Cooldown != 5*time.Second {
		t.Errorf("cooldown set: %+v", p)
	}
}

// TestStatusSet: every status of 400..599 in and out, and nothing outside that range.
func TestStatusSet(t *testing.T) {
	var s StatusSet
	for st := 400; st < 600; st += 7 {
		s.Add(st)
	}
	s.Add(399)
	s.Add(600)
	for st := 300; st < 700; st++ {
		want := st >= 400 && st < 600 && (st-400)%7 == 0
		if s.Has(st) != want {
			t.Errorf("Has(%d) = %v, want %v", st, s.Has(st), want)
		}
	}
}
