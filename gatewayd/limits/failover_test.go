package limits

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisFailoverUnderLoad kills (SIGKILL) the primary that holds a workspace's counters while two replicas
// run calls against a REQUEST DAY limit, on Sentinel and on Cluster, and keeps calling until the limit refuses.
// It fails when the store does not serve again after the replica took over. It reports what the failover cost:
// the calls that failed (503 limits_unavailable: the store fails closed), how long calls failed, and how far the
// limit over-admitted (charges the old primary acknowledged but had not replicated are lost with it). Run it
// with -v for the figures (docs/limits.md, "Failover").
func TestRedisFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a primary and waits for the failover")
	}
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			d := redistest.StartDeployment(t, mode)
			const threshold = 3000
			l := lim("g", "s", Request, Day, threshold)
			stores := []*Redis{NewRedis(d.Client(), RedisOptions{}), NewRedis(d.Client(), RedisOptions{})}
			plans := []*Plan{bindTo(t, stores[0], l), bindTo(t, stores[1], l)}
			primary := d.PrimaryOf(context.Background(), stores[0].pairKey(l.Key))

			var admitted, refused, failed atomic.Int64
			var mu sync.Mutex
			var firstFail, lastFail time.Time
			var killOnce sync.Once
			var lag int64
			var lagErr error
			deadline := time.Now().Add(60 * time.Second)
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for time.Now().Before(deadline) && refused.Load() < 50 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						res, err := stores[w%2].Admit(ctx, plans[w%2], t0)
						cancel()
						switch {
						case err != nil:
							failed.Add(1)
							now := time.Now()
							mu.Lock()
							if firstFail.IsZero() {
								firstFail = now
							}
							lastFail = now
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
						case res.Allowed:
							if admitted.Add(1) == threshold/3 {
								killOnce.Do(func() {
									lag, lagErr = d.ReplicationLag(context.Background(), primary)
									primary.Kill()
								})
							}
						default:
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			count, err := stores[0].Count(context.Background(), l.Key, t0)
			if err != nil {
				t.Fatalf("the store does not serve after the failover: %v", err)
			}
			if refused.Load() < 50 {
				t.Fatalf("the limit never refused again after the failover: %d admitted, %d failed", admitted.Load(), failed.Load())
			}
			t.Logf("%s: %d calls failed over %v; %d admitted for a limit of %d (over-admitted %d), counter at %d, %d refused; "+
				"replica %d bytes behind at the kill (%v)",
				mode, failed.Load(), lastFail.Sub(firstFail).Round(time.Millisecond), admitted.Load(), threshold,
				admitted.Load()-threshold, count, refused.Load(), lag, lagErr)
		})
	}
}

// BenchmarkRedisAdmitDeployments runs the 30-counter chain check on each deployment: one caller at a time (one
// round trip per check on each), and 32 callers over 8 workspaces (on a cluster, their checks split into one
// script call per workspace, sent to the three primaries in one pipeline).
func BenchmarkRedisAdmitDeployments(b *testing.B) {
	for _, mode := range redistest.Modes {
		b.Run(mode+"/serial", func(b *testing.B) {
			r := NewRedis(redistest.StartDeployment(b, mode).Client(), RedisOptions{})
			p := bindTo(b, r, chain5("")...)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if res, err := r.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); err != nil || !res.Allowed {
					b.Fatal("refused or failed:", err)
				}
			}
		})
		b.Run(mode+"/parallel-8-workspaces", func(b *testing.B) {
			r := NewRedis(redistest.StartDeployment(b, mode).Client(), RedisOptions{})
			var plans []*Plan
			for w := range 8 {
				ls := chain5("")
				for i := range ls {
					ls[i].Key.Namespace = fmt.Sprintf("workspace-%d", w)
				}
				plans = append(plans, bindTo(b, r, ls...))
			}
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
			b.ResetTimer() // the deployment's start is not a check
			b.RunParallel(func(pb *testing.PB) {
				p := plans[next.Add(1)%8]
				for pb.Next() {
					if res, err := r.Admit(ctx, p, time.Now()); err != nil || !res.Allowed {
						b.Error("refused or failed:", err)
						return
					}
				}
			})
		})
	}
}
