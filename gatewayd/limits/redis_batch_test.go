package limits

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisPipelineExact: concurrent checks and settles share pipelines, yet every check stays atomic: 1,000
// concurrent calls on a two-level chain with a REQUEST limit of 300 admit exactly 300, and once flushed the
// TOKEN counters hold exactly the tokens of the admitted calls.
func TestRedisPipelineExact(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		ctx := context.Background()
		p := bindTo(t, r,
			lim("leaf", "s", Request, Minute, 1000), lim("leaf", "s", Token, Day, 1<<40),
			lim("root", "s", Request, Minute, 300), lim("root", "s", Token, Minute, 1<<40))
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				res, err := r.Admit(ctx, p, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
					if err := r.Settle(ctx, p, Charge{Tokens: 7}, t0); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := admitted.Load(); got != 300 {
			t.Fatalf("admitted %d of 1000 concurrent calls, want exactly 300", got)
		}
		for _, c := range []struct {
			l    Limit
			want int64
		}{{p.Limits[0], 300}, {p.Limits[1], 2100}, {p.Limits[2], 300}, {p.Limits[3], 2100}} {
			if n, err := r.Count(ctx, c.l.Key, t0); err != nil || n != c.want {
				t.Errorf("count of %+v: %d (%v), want %d", c.l.Key, n, err, c.want)
			}
		}
	})
}

// TestRedisSettleBeforeNextAdmit: a settle is queued, not sent, when Settle returns, but a check queued after
// it runs after it, so a caller never sees its own tokens missing.
func TestRedisSettleBeforeNextAdmit(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		ctx := context.Background()
		p := bindTo(t, r, lim("g", "s", Token, Minute, 10))
		for i := range 50 {
			now := t0.Add(time.Duration(i) * time.Minute * 2)
			if res, err := r.Admit(ctx, p, now); err != nil || !res.Allowed {
				t.Fatalf("round %d: first admit %+v %v", i, res, err)
			}
			if err := r.Settle(ctx, p, Charge{Tokens: 10}, now); err != nil {
				t.Fatal(err)
			}
			if res, err := r.Admit(ctx, p, now); err != nil || res.Allowed {
				t.Fatalf("round %d: admit after exhausting the limit: %+v %v, want refused", i, res, err)
			}
		}
	})
}

// TestRedisCloseFlushesSettles: Close charges every settle queued before it, so a graceful stop loses no
// tokens.
func TestRedisCloseFlushesSettles(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		ctx := context.Background()
		p := bindTo(t, r, lim("a", "s", Token, Day, 1<<40), lim("b", "s", Token, Second, 1<<40))
		var wg sync.WaitGroup
		for i := range 500 {
			wg.Go(func() {
				if err := r.Settle(ctx, p, Charge{Tokens: int64(i%5 + 1)}, t0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		// A second store reads what the first one wrote, as another replica would.
		other := NewRedis(d.Client(), RedisOptions{})
		for _, l := range p.Limits {
			if n, err := other.Count(ctx, l.Key, t0); err != nil || n != 1500 {
				t.Errorf("count of %+v after Close: %d (%v), want 1500", l.Key, n, err)
			}
		}
	})
}

// TestRedisSettleOutage: settles queued while Redis is down are reported by Flush as ErrUnavailable, block
// nothing, and settles work again once Redis is back.
func TestRedisSettleOutage(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	r := NewRedis(client, RedisOptions{})
	ctx := context.Background()
	l := lim("g", "s", Token, Day, 1<<40)
	p := bindTo(t, r, l)
	if err := r.Settle(ctx, p, Charge{Tokens: 5}, t0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatalf("flush before the outage: %v", err)
	}
	srv.Kill()
	for range 20 {
		if err := r.Settle(ctx, p, Charge{Tokens: 3}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("flush with Redis down: %v, want ErrUnavailable", err)
	}
	if _, err := r.Admit(ctx, p, t0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("admit with Redis down: %v, want ErrUnavailable", err)
	}
	srv.Restart()
	var before int64
	var err error
	for range 500 { // the pool may hand out a dead connection or two first
		if before, err = r.Count(ctx, l.Key, t0); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("count after Redis came back: %v", err)
	}
	if err := r.Settle(ctx, p, Charge{Tokens: 4}, t0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatalf("flush after Redis came back: %v", err)
	}
	if n, err := r.Count(ctx, l.Key, t0); err != nil || n != before+4 {
		t.Fatalf("count after a settle with Redis back: %d (%v), want %d", n, err, before+4)
	}
}

// TestRedisSettleLeavesWithoutACheck: settles wait for a check to carry them, but not forever: with no check and
// no Flush, another replica sees the tokens after about settleDelay.
func TestRedisSettleLeavesWithoutACheck(t *testing.T) {
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, d *redistest.Deployment) {
		other := NewRedis(d.Client(), RedisOptions{})
		ctx := context.Background()
		l := lim("g", "s", Token, Minute, 1<<40)
		p := bindTo(t, r, l)
		for round := 1; round <= 3; round++ {
			if err := r.Settle(ctx, p, Charge{Tokens: 5}, t0); err != nil {
				t.Fatal(err)
			}
			var n int64
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				var err error
				if n, err = other.Count(ctx, l.Key, t0); err != nil {
					t.Fatal(err)
				}
				if n == int64(5*round) {
					break
				}
			}
			if n != int64(5*round) {
				t.Fatalf("round %d: another replica counts %d tokens, want %d", round, n, 5*round)
			}
		}
	})
}

// BenchmarkRedisBatch measures one script call inside Redis (redis-µs/script, from INFO commandstats) carrying
// one check of an 18-counter plan, a settle and a check, or four checks of that plan, so the difference between
// the first and the last gives what a further check in the same batch costs.
func BenchmarkRedisBatch(b *testing.B) {
	for _, tc := range []struct {
		name  string
		items func(h *redisHandle, now time.Time) []*item
	}{
		{"check", func(h *redisHandle, now time.Time) []*item {
			return []*item{{kind: "a", times: timesAt(now), keys: h.keys, args: h.admit}}
		}},
		{"settle+check", func(h *redisHandle, now time.Time) []*item {
			return []*item{
				{kind: "s", times: settleTimes(now, Charge{Tokens: 5}), keys: h.settleKeys, args: h.settle},
				{kind: "a", times: timesAt(now), keys: h.keys, args: h.admit},
			}
		}},
		{"4-checks", func(h *redisHandle, now time.Time) []*item {
			var items []*item
			for range 4 {
				items = append(items, &item{kind: "a", times: timesAt(now), keys: h.keys, args: h.admit})
			}
			return items
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, _ := newRedis(b, RedisOptions{})
			h := bindTo(b, r, chain5("")[:18]...).Handle.(*redisHandle)
			ctx := context.Background()
			r.client.ConfigResetStat(ctx)
			for i := 0; b.Loop(); i++ {
				items := tc.items(h, t0.Add(time.Duration(i)*100*time.Microsecond))
				for j, a := range r.run(ctx, items) {
					if a.err != nil || items[j].kind == "a" && a.out[0] >= 0 {
						b.Fatal("refused or failed:", a.out, a.err)
					}
				}
			}
			b.ReportMetric(serverMicros(b, r.client, b.N), "redis-µs/script")
		})
	}
}
