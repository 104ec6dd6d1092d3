package loadbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/limits"
)

// benchLimiter times one all-or-nothing check over a 5-level CASCADING chain in the in-memory store: REQUEST and
// TOKEN limits per SECOND, MINUTE and DAY at every level (30 buckets in 5 cells), the clock moving 1 ms per call
// so windows really advance. It mirrors BenchmarkCheck5LevelChain of gatewayd/limits, so the table carries the
// figure of the gatewayd issue next to the load figures.
func benchLimiter() testing.BenchmarkResult {
	m := limits.NewMemory()
	p := &limits.Plan{}
	for level := 5; level >= 1; level-- {
		for _, typ := range []limits.Type{limits.Request, limits.Token} {
			for _, unit := range []limits.Unit{limits.Second, limits.Minute, limits.Day} {
				g := fmt.Sprintf("level%d", level)
				p.Limits = append(p.Limits, limits.Limit{
					Key:       limits.BucketKey{Namespace: "bench", Group: g, Slug: plainSlug, Type: typ, Unit: unit},
					Threshold: 1 << 60, SourceGroup: g,
				})
			}
		}
	}
	if err := m.Bind(p); err != nil {
		panic(fmt.Sprintf("failed to bind the limiter plan: %v", err))
	}
	ctx := context.Background()
	now := time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if r, _ := m.Admit(ctx, p, now.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
				b.Fatal("refused")
			}
		}
	})
}
