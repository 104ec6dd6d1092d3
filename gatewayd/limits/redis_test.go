package limits

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

func newRedis(t testing.TB, opts RedisOptions) (*Redis, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return NewRedis(srv.Client(), opts), srv
}

// onEachRedis runs fn on a store over each deployment gatewayd runs on (standalone, Sentinel, Cluster); d's
// Client gives fn another replica's client.
func onEachRedis(t *testing.T, opts RedisOptions, fn func(t *testing.T, r *Redis, d *redistest.Deployment)) {
	redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { fn(t, NewRedis(d.Client(), opts), d) })
}

func bindTo(t testing.TB, s Store, ls ...Limit) *Plan {
	t.Helper()
	p := &Plan{Limits: ls}
	if err := s.Bind(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRedisMatchesMemory drives the Redis store and the in-memory store with the same random calls and
// requires the same decisions, retry times and counts: the Lua script is the memory algorithm, not an
// approximation of it.
func TestRedisMatchesMemory(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		m := NewMemory()
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		plans := walkPlans(t, m, r, rng)
		// Microsecond steps: the script works in microseconds, so retry times compare exactly. The walk crosses
		// the end of a day and of a month.
		now := time.Date(2026, 3, 31, 23, 58, 0, 0, time.UTC)
		var refused, allowed int
		for step := range 3000 {
			// Forward only: see docs/limits.md ("Clocks") for how the stores differ when a clock steps back.
			now = now.Add(time.Duration(rng.IntN(80_000)) * time.Microsecond)
			pp := plans[rng.IntN(len(plans))]
			if rng.IntN(3) == 0 {
				c := Charge{Tokens: int64(rng.IntN(6)), Cost: int64(rng.IntN(3)) * int64(rng.IntN(40))}
				_ = m.Settle(ctx, pp[0], c, now)
				if err := r.Settle(ctx, pp[1], c, now); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, _ := m.Admit(ctx, pp[0], now)
			got, err := r.Admit(ctx, pp[1], now)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("step %d at %s: redis %+v, memory %+v", step, now.Format(time.RFC3339Nano), got, want)
			}
			if got.Allowed {
				allowed++
			} else {
				refused++
			}
		}
		t.Logf("The walk admitted %d and refused %d calls", allowed, refused)
		if refused < 100 || allowed < 100 {
			t.Fatalf("the walk admitted %d and refused %d calls: too few of one kind to compare", allowed, refused)
		}
		for _, pp := range plans {
			for _, l := range pp[0].Limits {
				got, err := r.Count(ctx, l.Key, now)
				if err != nil {
					t.Fatal(err)
				}
				if want := m.Usage(l.Key, now); got != want {
					t.Errorf("count of %+v: redis %d, memory %d", l.Key, got, want)
				}
			}
		}
	})
}

// walkPlans binds six three-level plans sharing their upper two levels, as siblings of a CASCADING tree do, to
// both stores, with thresholds low enough for a random walk to hit them.
func walkPlans(t *testing.T, m *Memory, r *Redis, rng *rand.Rand) [][2]*Plan {
	var plans [][2]*Plan
	for i := range 6 {
		var ls []Limit
		for level, g := range []string{fmt.Sprintf("leaf%d", i%3), "mid", "root"} {
			for _, typ := range []Type{Request, Token, Cost} {
				for u, base := range []int{Second: 5, Minute: 200, Day: 1000, Month: 1500} {
					if typ != Request {
						base *= 5
					}
					if typ == Cost && !Unit(u).Calendar() {
						continue
					}
					l := lim(g, "s", typ, Unit(u), int64(base+rng.IntN(base)+level*base))
					// Two workspaces, so a cluster's batches span namespaces (and nodes).
					l.Key.Namespace = fmt.Sprintf("ns%d", i%2)
					ls = append(ls, l)
				}
			}
		}
		rng.Shuffle(len(ls), func(a, b int) { ls[a], ls[b] = ls[b], ls[a] })
		plans = append(plans, [2]*Plan{bindTo(t, m, ls...), bindTo(t, r, ls...)})
	}
	return plans
}

// TestRedisBatchMatchesOneByOne: many calls in one script call give the answers and leave the counts of the
// same calls sent one at a time, which TestRedisMatchesMemory compares with the memory store. Two stores on
// one Redis, under different prefixes, run the same random walk: one call per script call, and batches of 1 to
// 150 calls (more than maxBatch, so some span several script calls in one pipeline). Windows move on between
// the calls of a batch, and one call in ten carries a time up to 150 ms earlier, as calls queued by concurrent
// handlers do.
func TestRedisBatchMatchesOneByOne(t *testing.T) {
	onEachRedis(t, RedisOptions{Prefix: "one"}, func(t *testing.T, one *Redis, d *redistest.Deployment) {
		testBatchMatchesOneByOne(t, one, NewRedis(d.Client(), RedisOptions{Prefix: "batched"}))
	})
}

func testBatchMatchesOneByOne(t *testing.T, one, batched *Redis) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	m := NewMemory()
	var plans [][2]*Plan
	for _, pp := range walkPlans(t, m, one, rng) {
		plans = append(plans, [2]*Plan{pp[1], bindTo(t, batched, pp[0].Limits...)})
	}
	now := time.Date(2026, 3, 14, 23, 59, 0, 0, time.UTC)
	var refused, allowed, batches int
	for step := 0; step < 4000; batches++ {
		var ones, items []*item
		for range 1 + rng.IntN(150) {
			step++
			now = now.Add(time.Duration(rng.IntN(40_000)) * time.Microsecond)
			at := now
			if rng.IntN(10) == 0 {
				at = now.Add(-time.Duration(rng.IntN(150_000)) * time.Microsecond)
			}
			pp := plans[rng.IntN(len(plans))]
			for i, p := range pp {
				h := p.Handle.(*redisHandle)
				it := &item{ns: h.ns, kind: "a", times: timesAt(at), keys: h.keys, args: h.admit}
				if n := int64(step % 6); step%3 == 0 && n > 0 {
					it = &item{ns: h.ns, kind: "s", times: settleTimes(at, Charge{Tokens: n, Cost: 3 * n}), keys: h.settleKeys, args: h.settle}
				}
				if i == 0 {
					ones = append(ones, it)
				} else {
					items = append(items, it)
				}
			}
		}
		got := batched.run(ctx, items)
		for i, it := range ones {
			want := one.run(ctx, []*item{it})[0]
			if want.err != nil || got[i].err != nil {
				t.Fatalf("batch %d, call %d: %v, %v", batches, i, want.err, got[i].err)
			}
			if got[i] != want {
				t.Fatalf("batch %d, call %d of %d (%s): batched %v, one by one %v", batches, i, len(items), it.kind, got[i].out, want.out)
			}
			if it.kind == "a" && want.out[0] < 0 {
				allowed++
			} else if it.kind == "a" {
				refused++
			}
		}
	}
	t.Logf("%d batches admitted %d and refused %d calls", batches, allowed, refused)
	if refused < 100 || allowed < 100 {
		t.Fatalf("the walk admitted %d and refused %d calls: too few of one kind to compare", allowed, refused)
	}
	for _, pp := range plans {
		for i, l := range pp[0].Limits {
			want, err1 := one.Count(ctx, l.Key, now)
			got, err2 := batched.Count(ctx, pp[1].Limits[i].Key, now)
			if err1 != nil || err2 != nil || got != want {
				t.Errorf("count of %+v: batched %d (%v), one by one %d (%v)", l.Key, got, err2, want, err1)
			}
		}
	}
}

// TestRedisConcurrentExact: 1,000 concurrent calls through two clients (two replicas) against a REQUEST DAY
// limit of 100 admit exactly 100.
func TestRedisConcurrentExact(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r1 *Redis, d *redistest.Deployment) {
		r2 := NewRedis(d.Client(), RedisOptions{})
		l := lim("g", "s", Request, Day, 100)
		plans := []*Plan{bindTo(t, r1, l), bindTo(t, r2, l)}
		stores := []*Redis{r1, r2}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 1000 {
			wg.Go(func() {
				res, err := stores[i%2].Admit(context.Background(), plans[i%2], t0)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 100 {
			t.Fatalf("admitted %d of 1000 concurrent calls, want exactly 100", got)
		}
		if n, _ := r1.Count(context.Background(), l.Key, t0); n != 100 {
			t.Fatalf("count %d, want 100", n)
		}
	})
}

// TestRedisCascadingSiblingsShareParent: sibling leaves with their own large limits hammer a parent pool of
// 50; together they get exactly 50, and a refused call charges no leaf.
func TestRedisCascadingSiblingsShareParent(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		parent := lim("parent", "s", Request, Minute, 50)
		var plans []*Plan
		for i := range 4 {
			plans = append(plans, bindTo(t, r, lim(fmt.Sprintf("leaf%d", i), "s", Request, Minute, 1000), parent, lim("root", "s", Request, Minute, 1000)))
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 400 {
			wg.Go(func() {
				if res, err := r.Admit(context.Background(), plans[i%4], t0); err == nil && res.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 50 {
			t.Fatalf("siblings admitted %d, want exactly the parent's 50", got)
		}
		var leaves int64
		for i := range 4 {
			n, _ := r.Count(context.Background(), plans[i].Limits[0].Key, t0)
			leaves += n
		}
		if root, _ := r.Count(context.Background(), plans[0].Limits[2].Key, t0); leaves != 50 || root != 50 {
			t.Fatalf("leaves charged %d and root %d, want 50 each: refused calls must charge nothing", leaves, root)
		}
	})
}

// TestRedisKeysExpire: every key the scripts write carries a TTL, so abandoned buckets free themselves.
func TestRedisKeysExpire(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		p := bindTo(t, r, chain5("")...)
		ctx := context.Background()
		if res, err := r.Admit(ctx, p, t0); err != nil || !res.Allowed {
			t.Fatalf("admit: %+v %v", res, err)
		}
		if err := r.Settle(ctx, p, Charge{Tokens: 10}, t0); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		c := d.Client()
		keys, err := redistest.Keys(ctx, c, "mg:*")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 5 {
			t.Fatalf("%d keys written, want 5: one hash per level holding its six counters", len(keys))
		}
		for _, k := range keys {
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 {
				t.Errorf("key %s has TTL %v (%v), want one", k, ttl, err)
			}
			// A level with DAY counters lives two days, so a rolling charge must not have cut that short.
			if ttl < 47*time.Hour {
				t.Errorf("key %s has TTL %v, want the two days of its DAY counters", k, ttl)
			}
		}
		// The header starts with the UTC day and its REQUEST and TOKEN counts, little-endian 64-bit integers.
		head, err := c.GetRange(ctx, r.pairKey(p.Limits[2].Key), 0, 23).Result()
		if err != nil || len(head) != 24 {
			t.Fatalf("header of the first level: %q %v", head, err)
		}
		got := []uint64{binary.LittleEndian.Uint64([]byte(head[0:8])), binary.LittleEndian.Uint64([]byte(head[8:16])), binary.LittleEndian.Uint64([]byte(head[16:24]))}
		if want := []uint64{uint64(t0.UnixNano() / nanosPerDay), 1, 10}; !slices.Equal(got, want) {
			t.Errorf("DAY counters of the first level are %v, want day, requests, tokens %v", got, want)
		}

		// A MINUTE window that moves to a new sub-slot while holding counts writes its ring, which expires on its own
		// one window plus one sub-slot plus a second later.
		if res, err := r.Admit(ctx, p, t0.Add(7*time.Second)); err != nil || !res.Allowed {
			t.Fatalf("admit in the next MINUTE sub-slot: %+v %v", res, err)
		}
		ringKey := r.pairKey(p.Limits[1].Key) + "#1"
		if ttl, err := c.PTTL(ctx, ringKey).Result(); err != nil || ttl <= 0 || ttl > 67*time.Second {
			t.Errorf("ring %s has TTL %v (%v), want at most 67s", ringKey, ttl, err)
		}
	})
}

// TestRedisFailsClosedAndRecovers: with Redis down, Admit returns ErrUnavailable (or admits with FailOpen);
// when Redis comes back on the same address, the same store works again without being rebuilt.
func TestRedisFailsClosedAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	closed := NewRedis(client, RedisOptions{})
	open := NewRedis(client, RedisOptions{FailOpen: true})
	l := lim("g", "s", Request, Day, 1000)
	pc, po := bindTo(t, closed, l), bindTo(t, open, l)
	ctx := context.Background()
	if res, err := closed.Admit(ctx, pc, t0); err != nil || !res.Allowed {
		t.Fatalf("admit before the outage: %+v %v", res, err)
	}
	srv.Kill()
	if _, err := closed.Admit(ctx, pc, t0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fail-closed admit with Redis down: err %v, want ErrUnavailable", err)
	}
	if res, err := open.Admit(ctx, po, t0); err != nil || !res.Allowed {
		t.Fatalf("fail-open admit with Redis down: %+v %v, want admitted", res, err)
	}
	srv.Restart()
	var err error
	var res Result
	for range 500 { // the pool may hand out a dead connection or two first
		if res, err = closed.Admit(ctx, pc, t0); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !res.Allowed {
		t.Fatalf("admit after Redis came back: %+v %v", res, err)
	}
}

// serverMicros is the time Redis spent in scripts since the last CONFIG RESETSTAT, divided by ops.
func serverMicros(b *testing.B, c redis.UniversalClient, ops int) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f / float64(ops)
				}
			}
		}
	}
	return 0
}

func benchRedisAdmit(b *testing.B, ls []Limit) {
	r, _ := newRedis(b, RedisOptions{})
	p := bindTo(b, r, ls...)
	ctx := context.Background()
	r.client.ConfigResetStat(ctx)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if res, err := r.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); err != nil || !res.Allowed {
			b.Fatal("refused", err)
		}
	}
	b.ReportMetric(serverMicros(b, r.client, b.N), "redis-µs/op")
}

// BenchmarkRedisAdmit compares one bucket against a five-level chain with one limit per level and against the
// full chain of 30 limits (REQUEST and TOKEN on SECOND, MINUTE and DAY at every level). redis-µs/op is the
// time Redis spent in the script, from INFO commandstats; the rest is the round trip.
func BenchmarkRedisAdmit(b *testing.B) {
	b.Run("single-bucket", func(b *testing.B) { benchRedisAdmit(b, chain1()[:1]) })
	b.Run("chain5-one-limit-per-level", func(b *testing.B) { benchRedisAdmit(b, chain1()) })
	b.Run("chain5-30-limits", func(b *testing.B) { benchRedisAdmit(b, chain5("")) })
}

func chain1() []Limit {
	var chain []Limit
	for level := range 5 {
		chain = append(chain, lim(fmt.Sprintf("g%d", level), "demo/echo", Request, Minute, 1<<60))
	}
	return chain
}

// BenchmarkRedisAdmitChainRatio interleaves, call by call, a single-bucket check and a five-level chain check
// on the same Redis, so machine noise hits both alike, and reports the ratio of their mean latencies.
func BenchmarkRedisAdmitChainRatio(b *testing.B) {
	for _, tc := range []struct {
		name  string
		chain []Limit
	}{{"one-limit-per-level", chain1()}, {"30-limits", chain5("")}} {
		b.Run(tc.name, func(b *testing.B) {
			r, _ := newRedis(b, RedisOptions{})
			single := bindTo(b, r, lim("single", "demo/echo", Request, Minute, 1<<60))
			chain := bindTo(b, r, tc.chain...)
			ctx := context.Background()
			var ts, tc time.Duration
			for i := 0; b.Loop(); i++ {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				start := time.Now()
				_, err1 := r.Admit(ctx, single, now)
				mid := time.Now()
				_, err2 := r.Admit(ctx, chain, now)
				ts, tc = ts+mid.Sub(start), tc+time.Since(mid)
				if err1 != nil || err2 != nil {
					b.Fatal(err1, err2)
				}
			}
			b.ReportMetric(float64(tc)/float64(ts), "chain/single")
			b.ReportMetric(float64(ts.Microseconds())/float64(b.N), "single-µs")
			b.ReportMetric(float64(tc.Microseconds())/float64(b.N), "chain-µs")
		})
	}
}

// BenchmarkRedisAdmitParallel checks and settles a three-level plan with all six limits per level (18 counters)
// from 32 goroutines, as gatewayd does under load; the queue lets concurrent calls share pipelines.
func BenchmarkRedisAdmitParallel(b *testing.B) {
	r, _ := newRedis(b, RedisOptions{})
	p := bindTo(b, r, chain5("")[:18]...)
	ctx := context.Background()
	r.client.ConfigResetStat(ctx)
	b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			if res, err := r.Admit(ctx, p, now); err != nil || !res.Allowed {
				b.Error("refused", err)
				return
			}
			if err := r.Settle(ctx, p, Charge{Tokens: 10}, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := r.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(serverMicros(b, r.client, b.N), "redis-µs/op")
}

// TestRedisClusterSpreadsWorkspaces: on a cluster each workspace's counters share its namespace's hash slot, so
// 1,000 workspaces spread over the three primaries, each holding its third within ±20%.
func TestRedisClusterSpreadsWorkspaces(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.Cluster)
	r := NewRedis(d.Client(), RedisOptions{})
	ctx := context.Background()
	const workspaces = 1000
	for i := range workspaces {
		group, tier := lim("g", "s", Request, Day, 10), lim(TierGroup, "key", Request, Minute, 10)
		group.Key.Namespace, tier.Key.Namespace = fmt.Sprintf("workspace-%d", i), fmt.Sprintf("workspace-%d", i)
		if res, err := r.Admit(ctx, bindTo(t, r, group, tier), t0); err != nil || !res.Allowed {
			t.Fatalf("workspace %d: %+v %v", i, res, err)
		}
	}
	var mu sync.Mutex
	var sizes []int64
	err := d.Client().(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		size, err := n.DBSize(ctx).Result()
		mu.Lock()
		sizes = append(sizes, size)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keys per primary: %v", sizes)
	var total int64
	for _, n := range sizes {
		total += n
	}
	if len(sizes) != 3 || total != 2*workspaces {
		t.Fatalf("%d primaries hold %d keys, want 3 holding %d (two pairs per workspace)", len(sizes), total, 2*workspaces)
	}
	for _, n := range sizes {
		if share := float64(n) / float64(total); share < 0.8/3 || share > 1.2/3 {
			t.Errorf("a primary holds %d of %d keys (%.1f%%), want a third within ±20%%", n, total, 100*share)
		}
	}
}

// TestRedisPlanStaysInOneWorkspace: a plan whose limits span namespaces is refused when bound, since one script
// charges it in one hash slot.
func TestRedisPlanStaysInOneWorkspace(t *testing.T) {
	r := NewRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), RedisOptions{})
	other := lim("g", "s", Request, Day, 10)
	other.Key.Namespace = "other"
	if err := r.Bind(&Plan{Limits: []Limit{lim("g", "s", Request, Day, 10), other}}); err == nil {
		t.Fatal("a plan over two namespaces was bound")
	}
}

// TestRedisClusterSendsAgainOnlyWhatNoScriptRefused: a node that never ran the script refuses its batch with
// NOSCRIPT while another node runs its own; only the refused batch is sent again, so the other charges once.
func TestRedisClusterSendsAgainOnlyWhatNoScriptRefused(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.Cluster)
	c := d.Client().(*redis.ClusterClient)
	r := NewRedis(c, RedisOptions{})
	ctx := context.Background()
	// Two workspaces whose counters live on two primaries.
	var plans []*Plan
	var nodes []string
	for i := 0; len(plans) < 2 && i < 100; i++ {
		l := lim("g", "s", Request, Day, 10)
		l.Key.Namespace = fmt.Sprintf("ns%d", i)
		node, err := c.MasterForKey(ctx, r.pairKey(l.Key))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(nodes, node.Options().Addr) {
			nodes = append(nodes, node.Options().Addr)
			plans = append(plans, bindTo(t, r, l))
		}
	}
	if len(plans) != 2 {
		t.Fatal("no two workspaces on two primaries")
	}
	// The first primary learns the script; the second has never seen it.
	if res, err := r.Admit(ctx, plans[0], t0); err != nil || !res.Allowed {
		t.Fatalf("admit: %+v %v", res, err)
	}
	var items []*item
	for _, p := range plans {
		h := p.Handle.(*redisHandle)
		items = append(items, &item{ns: h.ns, kind: "a", times: timesAt(t0), keys: h.keys, args: h.admit})
	}
	for i, a := range r.run(ctx, items) {
		if a.err != nil || a.out[0] >= 0 {
			t.Fatalf("call %d: %v %v", i, a.out, a.err)
		}
	}
	for i, want := range []int64{2, 1} {
		if n, err := r.Count(ctx, plans[i].Limits[0].Key, t0); err != nil || n != want {
			t.Errorf("workspace %d counts %d calls (%v), want %d", i, n, err, want)
		}
	}
}
