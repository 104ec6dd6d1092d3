package reload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// churned is a snapshot serving live groups from first on, each limited on two slugs.
func churned(first, live int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Namespace: ns}
	for i := first; i < first+live; i++ {
		g := snapshot.Group{ID: fmt.Sprintf("g-%05d", i), Mode: "INDEPENDENT", Depth: 1}
		for _, slug := range []string{"demo/a", "demo/b"} {
			g.Models = append(g.Models, snapshot.Model{Slug: slug,
				RateLimits:  []snapshot.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 100, SourceGroup: g.ID}},
				UsageLimits: []snapshot.Limit{{Type: "TOKEN", Unit: "DAY", Threshold: 1000, SourceGroup: g.ID}}})
		}
		s.Groups = append(s.Groups, g)
	}
	return s
}

// TestChurnKeepsCounterCellsFlat churns groups through 300 snapshots (one group leaves and one arrives per load)
// and checks that the in-memory store holds the cells of the served groups only, while a group that stays keeps
// its counts (docs/limits.md).
func TestChurnKeepsCounterCellsFlat(t *testing.T) {
	ctx := context.Background()
	l, s := newLoader(t)
	m := l.store.(*limits.Memory)
	const live, slugs = 10, 2
	now := time.Now()
	for round := range 300 {
		payload, sum, err := snapshot.Encode(churned(round, live))
		if err != nil {
			t.Fatal(err)
		}
		s.index(int64(round+1), sum, 0, payload)
		l.Sync(ctx, ns)
		if got := l.servedVersion(t); got != int64(round+1) {
			t.Fatalf("round %d: serving version %d (load errors %v)", round, got, l.errorsOf())
		}
		if got := m.Cells(); got != live*slugs {
			t.Fatalf("round %d: the store holds %d cells, want %d (the served groups' only)", round, got, live*slugs)
		}
		// The newest group is charged once per load; it stays served for the next nine loads and keeps its count.
		newest := fmt.Sprintf("g-%05d", round+live-1)
		plan := l.View().Namespace(ns).Groups[newest].Models["demo/a"].Plan
		if res, err := m.Admit(ctx, plan, now); err != nil || !res.Allowed {
			t.Fatalf("round %d: admit %v %v", round, res, err)
		}
		if round >= live-1 {
			oldest := fmt.Sprintf("g-%05d", round)
			k := limits.BucketKey{Namespace: ns, Group: oldest, Slug: "demo/a", Type: limits.Request, Unit: limits.Minute}
			if got := m.Usage(k, now); got != 1 {
				t.Fatalf("round %d: group %s, served throughout, counts %d calls, want 1", round, oldest, got)
			}
		}
	}
}
