package limits

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// windowStart is 10.5 s into a minute, so a MINUTE window has 49.5 s left and a SECOND one 0.5 s.
var windowStart = time.Date(2026, 1, 1, 10, 0, 10, 500_000_000, time.UTC)

// expectWindow takes n calls of bucket at now through ws, all admitted, then one more, refused with wait.
func expectWindow(t *testing.T, ws []Windows, bucket string, n int, size time.Duration, now time.Time, wait time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if ok, _ := ws[i%len(ws)].Take(ctx, bucket, n, size, now); !ok {
			t.Fatalf("%s: call %d of %d refused", bucket, i+1, n)
		}
	}
	if ok, got := ws[n%len(ws)].Take(ctx, bucket, n, size, now); ok || got != wait {
		t.Fatalf("%s: call %d: ok=%v wait=%v, want refused with %v (until the window ends)", bucket, n+1, ok, got, wait)
	}
}

// testWindows checks one or more Windows that share their counts: each bucket its own, the answer the time left
// in the window, the next window empty.
func testWindows(t *testing.T, ws ...Windows) {
	ctx := context.Background()
	expectWindow(t, ws, "k1 retry", 10, time.Minute, windowStart, 49500*time.Millisecond)
	expectWindow(t, ws, "k2 retry", 10, time.Minute, windowStart, 49500*time.Millisecond)
	expectWindow(t, ws, "k1 logs", 30, time.Second, windowStart.Add(400*time.Millisecond), 100*time.Millisecond)
	if ok, _ := ws[0].Take(ctx, "k1 retry", 10, time.Minute, windowStart.Add(49499*time.Millisecond)); ok {
		t.Fatal("the last millisecond of the minute admits an 11th call")
	}
	expectWindow(t, ws, "k1 retry", 10, time.Minute, windowStart.Add(49500*time.Millisecond), time.Minute)

	// Full reads the count and counts nothing: every replica sees the full window, and asking leaves room.
	last := ws[len(ws)-1]
	if full, wait := last.Full(ctx, "k2 retry", 10, time.Minute, windowStart); !full || wait != 49500*time.Millisecond {
		t.Fatalf("Full of a window holding its 10 calls: %v, %v; want full, 49.5s", full, wait)
	}
	for range 3 {
		if full, _ := ws[0].Full(ctx, "k4 asked", 1, time.Minute, windowStart); full {
			t.Fatal("Full of an empty window: full")
		}
	}
	if ok, _ := last.Take(ctx, "k4 asked", 1, time.Minute, windowStart); !ok {
		t.Fatal("Full counted a call")
	}
	if full, _ := ws[0].Full(ctx, "k4 asked", 1, time.Minute, windowStart); !full {
		t.Fatal("Full of a window holding its one call: not full")
	}
	if full, _ := ws[0].Full(ctx, "k4 asked", 2, time.Minute, windowStart); full {
		t.Fatal("Full of a window holding one of two calls: full")
	}
}

func TestMemoryWindows(t *testing.T) {
	m := NewMemoryWindows()
	testWindows(t, m)
	if ok, _ := m.Take(context.Background(), "k3", 1, time.Second, windowStart.Add(2*time.Minute)); !ok || len(m.buckets) != 1 {
		t.Fatalf("after two idle minutes: ok=%v, %d buckets held, want the one just used", ok, len(m.buckets))
	}
}

// TestRedisWindowsShareOneCount: two RedisWindows on two clients (two replicas) alternate calls and together admit
// each limit once; a window's counter expires a few seconds after the window ends.
func TestRedisWindowsShareOneCount(t *testing.T) {
	redistest.Each(t, func(t *testing.T, d *redistest.Deployment) {
		a := NewRedisWindows(d.Client(), "", logr.Discard())
		b := NewRedisWindows(d.Client(), "", logr.Discard())
		testWindows(t, a, b)
		key := "mg:win:k2 retry:" + strconv.FormatInt(windowStart.Truncate(time.Minute).UnixMilli(), 10)
		ttl, err := d.Client().PTTL(context.Background(), key).Result()
		if max := 49500*time.Millisecond + windowSkew; err != nil || ttl <= max-time.Second || ttl > max {
			t.Fatalf("counter %s: TTL %v (%v), want about %v (the time left in the window plus the skew allowance)", key, ttl, err, max)
		}
	})
}

// TestRedisWindowsFallBackToMemory: with Redis down, calls are counted in the replica's memory (still limited),
// and once Redis answers again they are shared again, without a new client.
func TestRedisWindowsFallBackToMemory(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	r := NewRedisWindows(client, "", logr.Discard())
	other := NewRedisWindows(srv.Client(), "", logr.Discard())
	srv.Kill()
	expectWindow(t, []Windows{r}, "down", 5, time.Second, windowStart, 500*time.Millisecond)
	srv.Restart()
	ctx := context.Background()
	var ok bool
	for range 500 { // the pool may hand out a dead connection or two first
		if ok, _ = r.Take(ctx, "up", 1, time.Minute, windowStart); ok && !r.degraded.Load() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.degraded.Load() {
		t.Fatal("Redis came back but the windows still count in memory")
	}
	if ok, _ := other.Take(ctx, "up", 1, time.Minute, windowStart); ok {
		t.Fatal("another replica admitted a call the recovered replica counted in Redis")
	}
}
