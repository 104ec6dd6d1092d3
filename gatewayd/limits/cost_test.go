package limits

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// costReplica is one gatewayd's view of the counters: its store and the plans of two sibling groups of a
// CASCADING tree, bound to it. done makes a settle reach the counters (a Redis replica's queued settles).
type costReplica struct {
	store Store
	plans [2]*Plan
	done  func() error
}

// costChain is the plan of leaf under root: a COST MONTH limit on each (the leaf's 700,000 micro-USD, the root's
// 1,000,000 shared by both leaves) and a TOKEN MONTH limit that never binds.
func costChain(leaf string) []Limit {
	return []Limit{
		lim(leaf, "s", Cost, Month, 700_000), lim(leaf, "s", Token, Month, 1<<40),
		lim("root", "s", Cost, Month, 1_000_000), lim("root", "s", Token, Month, 1<<40),
	}
}

func newCostReplica(t *testing.T, s Store, done func() error) *costReplica {
	return &costReplica{store: s, plans: [2]*Plan{bindTo(t, s, costChain("leaf-a")...), bindTo(t, s, costChain("leaf-b")...)}, done: done}
}

// costCall is one call of the concurrent run: whether it was admitted, what it cost, and the ticks (of one
// counter shared by every call) at which its check began and its charge had reached the counters.
type costCall struct {
	plan        int
	admitted    bool
	cost        int64
	start, done int64
}

// TestCostLimitConcurrentBound sends 1,000 concurrent calls of 1 to 10,000 micro-USD each against COST MONTH
// limits (two sibling leaves under one root, CASCADING), through two replicas sharing one redis-server and
// through the embedded store. A call is admitted while its counters are below their thresholds and charged its
// cost after its answer, all-or-nothing up the chain. It checks, as docs/limits.md ("Overshoot of TOKEN and
// COST") states:
//   - the bound: for every admitted call, the costs already charged when its check began were below the threshold,
//     so the spend past a threshold is at most the costs of the calls admitted while it was still below;
//   - the counters are exactly the sum of the charges: each leaf's is the costs of its admitted calls, the
//     root's the costs of both leaves' (every charge reached every level of the chain or none);
//   - once the calls are over, the next check is refused.
func TestCostLimitConcurrentBound(t *testing.T) {
	now := time.Date(2027, 1, 31, 23, 0, 0, 0, time.UTC)
	t.Run("redis, two replicas", func(t *testing.T) {
		srv := redistest.Start(t)
		var replicas []*costReplica
		for range 2 {
			r := NewRedis(srv.Client(), RedisOptions{})
			replicas = append(replicas, newCostReplica(t, r, r.Flush))
		}
		runCostCalls(t, replicas, now)
	})
	t.Run("embedded", func(t *testing.T) {
		e := openEmbedded(t, filepath.Join(t.TempDir(), "state.db"), &fakeNow{now}, -1)
		defer func() { _ = closeEmbedded(e) }()
		runCostCalls(t, []*costReplica{newCostReplica(t, e, func() error { return nil })}, now)
	})
}

func runCostCalls(t *testing.T, replicas []*costReplica, now time.Time) {
	const n = 1000
	ctx := context.Background()
	calls := make([]costCall, n)
	var tick atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	// At most 64 calls in flight at once, as 64 clients calling in a loop would keep: the run then crosses the
	// thresholds while calls are still being admitted, rather than checking all of them before any is charged.
	slots := make(chan struct{}, 64)
	for i := range calls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			rep := replicas[i%len(replicas)]
			c := &calls[i]
			c.plan, c.cost = rng.IntN(2), 1+rng.Int64N(10_000)
			p := rep.plans[c.plan]
			<-release
			slots <- struct{}{}
			defer func() { <-slots }()
			c.start = tick.Add(1)
			res, err := rep.store.Admit(ctx, p, now)
			if err != nil {
				t.Error(err)
				return
			}
			if !res.Allowed {
				return
			}
			c.admitted = true
			// The answer takes a moment, during which other calls are checked.
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			if err := rep.store.Settle(ctx, p, Charge{Tokens: 10, Cost: c.cost}, now); err != nil {
				t.Error(err)
			}
			if err := rep.done(); err != nil {
				t.Error(err)
			}
			c.done = tick.Add(1)
		}(i)
	}
	close(release)
	wg.Wait()

	var sums [2]int64
	// overshootBound is the costs not yet charged when the last admitted call's check began: every call admitted
	// while the spend was below the threshold and not charged by then, which is what the spend may pass it by.
	admitted, overshootBound, lastStart := 0, int64(0), int64(0)
	for _, c := range calls {
		if c.admitted {
			admitted++
			sums[c.plan] += c.cost
		}
	}
	thresholds := [2]int64{700_000, 1_000_000}
	for i, c := range calls {
		if !c.admitted {
			continue
		}
		// The costs surely counted when c's check began: the calls charged before it, on its leaf and on the root.
		var leaf, root, inFlight int64
		for _, o := range calls {
			if !o.admitted {
				continue
			}
			if o.done < c.start {
				root += o.cost
				if o.plan == c.plan {
					leaf += o.cost
				}
			} else {
				inFlight += o.cost
			}
		}
		if leaf >= thresholds[0] || root >= thresholds[1] {
			t.Errorf("call %d was admitted with %d on its leaf and %d on the root already charged, at or past the thresholds %v", i, leaf, root, thresholds)
		}
		if c.start > lastStart {
			lastStart, overshootBound = c.start, inFlight
		}
	}
	for i, leaf := range []string{"leaf-a", "leaf-b"} {
		got, err := replicas[0].store.Count(ctx, BucketKey{Namespace: "ns", Group: leaf, Slug: "s", Type: Cost, Unit: Month}, now)
		if err != nil {
			t.Fatal(err)
		}
		if got != sums[i] {
			t.Errorf("COST MONTH of %s = %d, want %d, the sum of its admitted calls' costs", leaf, got, sums[i])
		}
	}
	root, err := replicas[0].store.Count(ctx, BucketKey{Namespace: "ns", Group: "root", Slug: "s", Type: Cost, Unit: Month}, now)
	if err != nil {
		t.Fatal(err)
	}
	if root != sums[0]+sums[1] {
		t.Errorf("COST MONTH of the root = %d, want %d, the sum of both leaves' admitted costs", root, sums[0]+sums[1])
	}
	if root < thresholds[1] {
		t.Fatalf("the calls spent %d of the root's %d: the run never reached the threshold", root, thresholds[1])
	}
	if root-thresholds[1] > overshootBound {
		t.Errorf("the root's spend is %d past its threshold, more than the %d of the calls in flight at the last admission", root-thresholds[1], overshootBound)
	}
	for _, rep := range replicas {
		for _, p := range rep.plans {
			if res, err := rep.store.Admit(ctx, p, now); err != nil || res.Allowed {
				t.Errorf("a call after the budget was spent: %+v %v, want refused", res, err)
			}
		}
	}
	perReplica := make([]int, len(replicas))
	for i, c := range calls {
		if c.admitted {
			perReplica[i%len(replicas)]++
		}
	}
	t.Logf("%d of %d calls admitted (per replica %v); spent %d of 1,000,000 (past it by %d; in flight at the last admission %d)", admitted, len(calls), perReplica, root, root-thresholds[1], overshootBound)
}
