package limits

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
)

// Windows counts calls per bucket in fixed windows aligned to the clock (whole seconds, whole minutes): the
// counter of the management API's rate limits (docs/rest-api.md "Management rate limits"). It stands apart from
// Store, whose sub-slotted rolling windows and plans serve the gateway limits: a management limit is one bucket
// per call, and its answer is the time until the window ends.
type Windows interface {
	// Take counts one call of bucket in the window of length size that holds now, unless n calls are counted
	// there already: then it counts nothing and answers false with the time left until that window ends.
	Take(ctx context.Context, bucket string, n int, size time.Duration, now time.Time) (ok bool, wait time.Duration)
	// Full reports whether n calls of bucket are counted in the window of length size that holds now, and then
	// the time left until that window ends; it counts nothing. A limit on failures (the dashboard's failed
	// logins) asks it before a try and Takes only a failed one.
	Full(ctx context.Context, bucket string, n int, size time.Duration, now time.Time) (full bool, wait time.Duration)
}

// windowAt is the window of length size that holds now: its start and its end.
func windowAt(now time.Time, size time.Duration) (start, end time.Time) {
	start = now.Truncate(size)
	return start, start.Add(size)
}

// MemoryWindows is Windows in this process's memory: with several replicas each counts its own calls.
type MemoryWindows struct {
	mu        sync.Mutex
	buckets   map[string]*fixedWindow
	lastSweep time.Time
}

type fixedWindow struct {
	end   time.Time
	count int
}

// NewMemoryWindows returns empty in-memory windows.
func NewMemoryWindows() *MemoryWindows {
	return &MemoryWindows{buckets: map[string]*fixedWindow{}}
}

// Take implements Windows.
func (m *MemoryWindows) Take(_ context.Context, bucket string, n int, size time.Duration, now time.Time) (bool, time.Duration) {
	_, end := windowAt(now, size)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	w := m.buckets[bucket]
	if w == nil || !w.end.Equal(end) {
		w = &fixedWindow{end: end}
		m.buckets[bucket] = w
	}
	if w.count >= n {
		return false, end.Sub(now)
	}
	w.count++
	return true, 0
}

// Full implements Windows.
func (m *MemoryWindows) Full(_ context.Context, bucket string, n int, size time.Duration, now time.Time) (bool, time.Duration) {
	_, end := windowAt(now, size)
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.buckets[bucket]; w != nil && w.end.Equal(end) && w.count >= n {
		return true, end.Sub(now)
	}
	return false, 0
}

// sweep drops the windows that are over, at most once a minute, so idle buckets do not accumulate.
func (m *MemoryWindows) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < time.Minute {
		return
	}
	m.lastSweep = now
	for k, w := range m.buckets {
		if !now.Before(w.end) {
			delete(m.buckets, k)
		}
	}
}

// windowSkew keeps a Redis window's counter this long past the window's end, so a replica whose clock is behind
// still finds it while its own clock says the window runs.
const windowSkew = 5 * time.Second

// RedisWindows is Windows shared by every replica through one Redis: a call is one round trip (INCR and PEXPIREAT
// pipelined) on the counter <prefix>:win:<bucket>:<window start in Unix ms>, which expires windowSkew after
// the window ends. A refused call counts too, past n, which changes no answer: the counter only refuses more.
//
// While Redis cannot be reached, the calls are counted in this replica's memory (the fallback), logged once when
// that starts and once when Redis answers again: a management limit guards gatewayd and the API server, not a
// customer's contract, so it degrades to the per-replica count rather than close the API or drop the limit.
type RedisWindows struct {
	client   redis.UniversalClient
	prefix   string
	log      logr.Logger
	fallback *MemoryWindows
	degraded atomic.Bool
}

// NewRedisWindows returns windows over client, their keys under prefix ("mg" when empty); log receives the
// fallback's start and end.
func NewRedisWindows(client redis.UniversalClient, prefix string, log logr.Logger) *RedisWindows {
	if prefix == "" {
		prefix = "mg"
	}
	return &RedisWindows{client: client, prefix: prefix, log: log, fallback: NewMemoryWindows()}
}

// key is the counter of bucket in the window that starts at start.
func (r *RedisWindows) key(bucket string, start time.Time) string {
	return r.prefix + ":win:" + bucket + ":" + strconv.FormatInt(start.UnixMilli(), 10)
}

// Take implements Windows.
func (r *RedisWindows) Take(ctx context.Context, bucket string, n int, size time.Duration, now time.Time) (bool, time.Duration) {
	start, end := windowAt(now, size)
	key := r.key(bucket, start)
	var count *redis.IntCmd
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		count = p.Incr(ctx, key)
		p.PExpire(ctx, key, end.Sub(now)+windowSkew)
		return nil
	})
	if err != nil {
		r.unanswered(err)
		return r.fallback.Take(ctx, bucket, n, size, now)
	}
	r.answered()
	if count.Val() > int64(n) {
		return false, end.Sub(now)
	}
	return true, 0
}

// Full implements Windows: one GET of the counter.
func (r *RedisWindows) Full(ctx context.Context, bucket string, n int, size time.Duration, now time.Time) (bool, time.Duration) {
	start, end := windowAt(now, size)
	count, err := r.client.Get(ctx, r.key(bucket, start)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		r.unanswered(err)
		return r.fallback.Full(ctx, bucket, n, size, now)
	}
	r.answered()
	if count >= int64(n) {
		return true, end.Sub(now)
	}
	return false, 0
}

// unanswered logs the start of the fallback to this replica's memory.
func (r *RedisWindows) unanswered(err error) {
	if !r.degraded.Swap(true) {
		r.log.Error(err, "Redis does not answer: management and dashboard login limits are counted in this replica's memory until it does")
	}
}

// answered logs the end of the fallback.
func (r *RedisWindows) answered() {
	if r.degraded.Swap(false) {
		r.log.Info("Redis answers again: management and dashboard login limits are shared by every replica again")
	}
}
