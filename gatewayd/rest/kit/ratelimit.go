package kit

import (
	"strings"
	"sync"
	"time"
)

// ManagementLimit is the management rate limit of a route pattern (SPEC.md "Management API rate limits"): per
// API key and per route, n calls per window. Model deployment activate/deactivate get 20 per minute, retry 10
// per minute, logs 30 per second, and every other /v1 route 100 per second.
func ManagementLimit(pattern string) (n int, window time.Duration) {
	_, path, _ := strings.Cut(pattern, " ")
	if path == "" {
		path = pattern
	}
	if strings.HasPrefix(path, "/v1/models/") && strings.Contains(path, "/deployments/") {
		switch {
		case strings.HasSuffix(path, "/activate"), strings.HasSuffix(path, "/deactivate"):
			return 20, time.Minute
		case strings.HasSuffix(path, "/retry"):
			return 10, time.Minute
		case strings.HasSuffix(path, "/logs"):
			return 30, time.Second
		}
	}
	return 100, time.Second
}

// fixedWindowLimiter counts calls per (key prefix, route pattern) in fixed windows aligned to the clock (whole
// seconds or minutes). A fixed window can admit up to twice the limit across a window boundary; that is the
// documented trade for O(1) memory per bucket and an exact, simple retry_after.
type fixedWindowLimiter struct {
	mu        sync.Mutex
	buckets   map[bucketKey]*window
	lastSweep time.Time
}

type bucketKey struct{ prefix, pattern string }

type window struct {
	start time.Time
	count int
}

func newFixedWindowLimiter() *fixedWindowLimiter {
	return &fixedWindowLimiter{buckets: map[bucketKey]*window{}}
}

// allow counts one call. When the call is over the limit it returns limited and the whole seconds (at least 1)
// until the window frees.
func (l *fixedWindowLimiter) allow(prefix, pattern string, now time.Time) (retryAfter int, limited bool) {
	n, size := ManagementLimit(pattern)
	start := now.Truncate(size)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	k := bucketKey{prefix, pattern}
	b := l.buckets[k]
	if b == nil || !b.start.Equal(start) {
		b = &window{start: start}
		l.buckets[k] = b
	}
	if b.count >= n {
		wait := start.Add(size).Sub(now)
		secs := int((wait + time.Second - 1) / time.Second)
		return max(secs, 1), true
	}
	b.count++
	return 0, false
}

// sweep drops buckets whose window is over, at most once a minute, so idle keys do not accumulate.
func (l *fixedWindowLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if _, size := ManagementLimit(k.pattern); !now.Before(b.start.Add(size)) {
			delete(l.buckets, k)
		}
	}
}
