// Package tryplan is the pure half of routing one call across an Endpoint's targets (docs/routing.md): the
// retry policy, the order in which a call tries the targets (Order: by priority, then weighted at random within
// a priority) and the choice of each next try (Pick: a usable target before a cooling one, one not tried yet
// before one tried, then that order). It takes the cooldown state and the random source as arguments and holds
// none, so every rule is a table test; gatewayd/failover runs the tries and gatewayd/cooldown keeps the state.
package tryplan

import "time"

// Defaults of an Endpoint that sets no retry or cooldown (docs/routing.md).
const (
	// MaxDefaultAttempts caps the default number of further tries: the number of targets minus one.
	MaxDefaultAttempts = 2
	DefaultFailures    = 3
	DefaultCooldown    = 30 * time.Second
)

// DefaultOnStatus are the statuses that fail a try when an Endpoint names none.
var DefaultOnStatus = []int32{429, 500, 502, 503, 504}

// Policy is an Endpoint's retry and cooldown policy, its defaults resolved.
type Policy struct {
	// Attempts is the number of further tries after the first.
	Attempts int
	// Fail holds the statuses that fail a try.
	Fail StatusSet
	// Failures is the number of consecutive failed tries that take a target out of rotation, for Cooldown.
	Failures int
	Cooldown time.Duration
}

// NewPolicy resolves an Endpoint's policy: attempts nil means the number of targets minus one, at most
// MaxDefaultAttempts; empty onStatus means DefaultOnStatus; failures and cooldown 0 mean their defaults.
func NewPolicy(targets int, attempts *int32, onStatus []int32, failures int32, cooldown time.Duration) Policy {
	p := Policy{Attempts: min(max(targets-1, 0), MaxDefaultAttempts), Failures: int(failures), Cooldown: cooldown}
	if attempts != nil {
		p.Attempts = int(*attempts)
	}
	if len(onStatus) == 0 {
		onStatus = DefaultOnStatus
	}
	for _, s := range onStatus {
		p.Fail.Add(int(s))
	}
	if p.Failures <= 0 {
		p.Failures = DefaultFailures
	}
	if p.Cooldown <= 0 {
		p.Cooldown = DefaultCooldown
	}
	return p
}

// StatusSet is a set of error statuses, 400 to 599.
type StatusSet [4]uint64

// Add puts status in the set; a status outside 400..599 is ignored.
func (s *StatusSet) Add(status int) {
	if i := status - 400; i >= 0 && i < 200 {
		s[i/64] |= 1 << (i % 64)
	}
}

// Has reports whether status is in the set.
func (s *StatusSet) Has(status int) bool {
	i := status - 400
	return i >= 0 && i < 200 && s[i/64]&(1<<(i%64)) != 0
}

// Target is what the plan reads of one target.
type Target struct {
	// Weight is the target's share of calls among the usable targets of its priority, at least 1.
	Weight int
	// Priority: lower first.
	Priority int
}

// MaxTargets bounds an Endpoint's targets; an Order fits in an array of this size, on the caller's stack.
const MaxTargets = 16

// Rand draws a number in [0, n), n > 0.
type Rand func(n int) int

// Order is the order in which a call considers the targets: ascending priority, and within one priority a
// weighted random permutation (each next place drawn among the targets left in proportion to their weight, so the
// first usable target of a priority is any one of them in proportion to its weight, whichever others are cooling).
// It writes the indices of targets into out and returns them; a single target draws nothing.
func Order(targets []Target, rnd Rand, out *[MaxTargets]int) []int {
	n := min(len(targets), MaxTargets)
	order := out[:n]
	for i := range order {
		order[i] = i
	}
	if n < 2 {
		return order
	}
	// Insertion sort by priority, stable: at most 16 targets.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && targets[order[j]].Priority < targets[order[j-1]].Priority; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for start := 0; start < n; {
		end := start + 1
		for end < n && targets[order[end]].Priority == targets[order[start]].Priority {
			end++
		}
		weighted(targets, order[start:end], rnd)
		start = end
	}
	return order
}

// weighted permutes group in place: each place in turn is drawn among the targets left, in proportion to weight.
func weighted(targets []Target, group []int, rnd Rand) {
	total := 0
	for _, i := range group {
		total += weightOf(targets[i])
	}
	for k := 0; k < len(group)-1; k++ {
		r := rnd(total)
		j := k
		for ; j < len(group)-1; j++ {
			r -= weightOf(targets[group[j]])
			if r < 0 {
				break
			}
		}
		group[k], group[j] = group[j], group[k]
		total -= weightOf(targets[group[k]])
	}
}

func weightOf(t Target) int { return max(t.Weight, 1) }

// State is what Pick knows of one target at the moment of a try.
type State struct {
	// Cooling: the target is out of rotation.
	Cooling bool
	// Tried is the number of tries this call made on the target.
	Tried int
}

// Pick chooses the target of the next try: among the targets of order, the first by (not cooling before cooling,
// fewer tries of this call before more, place in order). So a failed try moves on to the other usable targets of
// the same priority, then to the next priority; a target that is cooling is skipped while any other can be tried,
// a target that went cooling during this call included; and when every target is cooling the call still tries
// them in order, so a cooldown alone never fails a call. state is indexed like the Endpoint's targets.
func Pick(order []int, state []State) int {
	best := -1
	for _, i := range order {
		if best < 0 || better(state[i], state[best]) {
			best = i
		}
	}
	return best
}

// better reports whether a comes before b; equal states keep the earlier place in order.
func better(a, b State) bool {
	if a.Cooling != b.Cooling {
		return !a.Cooling
	}
	return a.Tried < b.Tried
}

// Plan is the tries a call makes when every one of them fails and no target changes state during the call: the
// target of each try in turn, 1 + attempts of them. It is what Pick gives try after try, for tests and for the
// documentation's examples; gatewayd/failover asks Pick before each try with the state of that moment.
func Plan(targets []Target, cooling []bool, rnd Rand, attempts int) []int {
	var buf [MaxTargets]int
	order := Order(targets, rnd, &buf)
	state := make([]State, len(targets))
	for i := range state {
		state[i].Cooling = i < len(cooling) && cooling[i]
	}
	tries := make([]int, 0, 1+attempts)
	for range 1 + attempts {
		i := Pick(order, state)
		tries = append(tries, i)
		state[i].Tried++
	}
	return tries
}
