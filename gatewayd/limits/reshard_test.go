package limits

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisClusterReshardUnderLoad moves every slot of one primary to another (redis-cli --cluster reshard, one
// key at a time) while two replicas' stores run checks in 16 workspaces. go-redis follows MOVED and ASK; a script
// whose workspace is half moved answers TRYAGAIN, which the store sends again. It fails when a check fails, or is
// lost or counted twice: every workspace's counter must equal the checks admitted in it.
func TestRedisClusterReshardUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a third of a cluster's slots")
	}
	d := redistest.StartDeployment(t, redistest.Cluster)
	stores := []*Redis{NewRedis(d.Client(), RedisOptions{}), NewRedis(d.Client(), RedisOptions{})}
	const workspaces = 16
	var plans [2][workspaces]*Plan
	var keys [workspaces][]BucketKey
	for w := range workspaces {
		var ls []Limit
		for _, g := range []string{"root", "mid", "leaf"} {
			l := lim(g, "s", Request, Day, 1<<40)
			l.Key.Namespace = fmt.Sprintf("workspace-%d", w)
			ls = append(ls, l)
			keys[w] = append(keys[w], l.Key)
		}
		for i, r := range stores {
			plans[i][w] = bindTo(t, r, ls...)
		}
	}
	ctx := context.Background()
	from := d.PrimaryOf(ctx, stores[0].pairKey(keys[0][0]))
	var to *redistest.Server
	for w := 1; w < workspaces && to == nil; w++ {
		if p := d.PrimaryOf(ctx, stores[0].pairKey(keys[w][0])); p != from {
			to = p
		}
	}
	if to == nil {
		t.Fatal("every workspace lives on one primary")
	}
	id := func(s *redistest.Server) string {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		v, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	var admitted [workspaces]atomic.Int64
	var failed atomic.Int64
	var errMu sync.Mutex
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w := (g + i) % workspaces
				res, err := stores[g%2].Admit(ctx, plans[g%2][w], t0)
				switch {
				case err != nil:
					failed.Add(1)
					msg := err.Error()
					if len(msg) > 80 {
						msg = msg[:80]
					}
					errMu.Lock()
					errs[msg]++
					errMu.Unlock()
				case res.Allowed:
					admitted[w].Add(1)
				default:
					t.Errorf("workspace %d refused a call", w)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cmd := exec.Command("redis-cli", "--cluster", "reshard", from.Addr(), "--cluster-from", id(from), "--cluster-to", id(to),
		"--cluster-slots", "16384", "--cluster-yes", "--cluster-pipeline", "1")
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out[max(0, len(out)-2000):])
	}
	if moved := movedSlots(string(out)); moved < 5000 {
		t.Fatalf("resharding moved %d slots, want all of one primary's", moved)
	}
	if p := d.PrimaryOf(ctx, stores[0].pairKey(keys[0][0])); p != to {
		t.Fatalf("workspace 0 is on %s after the resharding, want %s", p.Addr(), to.Addr())
	}
	var total int64
	for w := range workspaces {
		for _, k := range keys[w] {
			n, err := stores[0].Count(ctx, k, t0)
			if err != nil {
				t.Fatal(err)
			}
			// A failed check may have charged (its answer lost), so a counter may exceed what was admitted by
			// the failures, never fall short.
			if n < admitted[w].Load() || n > admitted[w].Load()+failed.Load() {
				t.Errorf("workspace %d, %s: counter %d, %d admitted (%d calls failed)", w, k.Group, n, admitted[w].Load(), failed.Load())
			}
		}
		total += admitted[w].Load()
	}
	if failed.Load() > 0 {
		t.Errorf("%d checks failed while slots moved, want none: %v", failed.Load(), errs)
	}
	t.Logf("resharding moved %d slots in %v under load: %d checks admitted, %d failed %v",
		movedSlots(string(out)), took.Round(time.Millisecond), total, failed.Load(), errs)
}

// movedSlots counts the slots redis-cli says it moved ("Moving slot N from A to B: ...").
func movedSlots(out string) int {
	slots := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "Moving slot "); ok && strings.Contains(line, " to ") {
			slots[strings.Fields(rest)[0]] = true
		}
	}
	return len(slots)
}
