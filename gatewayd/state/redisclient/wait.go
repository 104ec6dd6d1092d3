package redisclient

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// DefaultWaitTimeout bounds a WAIT when --redis-wait-timeout is not given. A replica on the same network
// acknowledges in well under a millisecond; the bound is what a call pays when one does not.
const DefaultWaitTimeout = 100 * time.Millisecond

// Wait makes the writes that accept an async request or record billing events wait until Replicas replicas
// acknowledge them (Redis's WAIT), so that a failover right after the answer does not lose them. WAIT waits for
// the writes of the connection that sends it, so Write runs the write and the WAIT on one connection of the
// primary that took the write: the one primary of standalone Redis and Sentinel, the primary of the key's slot on
// a cluster. When fewer replicas acknowledge within Timeout the write stays (a primary cannot take it back) and
// the call succeeds: it is counted in modelgate_redis_wait_short_total and logged, and is as durable as it was
// without WAIT (docs/decisions.md, "Redis Cluster and Sentinel"). A nil *Wait, or one of 0 replicas, waits for
// nothing.
type Wait struct {
	// Replicas is how many replicas must acknowledge a write.
	Replicas int
	// Timeout bounds each WAIT.
	Timeout time.Duration

	short *prometheus.CounterVec
	log   logr.Logger

	mu sync.Mutex
	// logged is when a short WAIT was last logged, and unlogged how many were counted since.
	logged   time.Time
	unlogged int
}

// waitLogEvery spaces the log lines of short WAITs: a replica that is down makes every write short.
const waitLogEvery = 10 * time.Second

// NewWait returns the Wait of replicas replicas within timeout (DefaultWaitTimeout when zero), which logs to log;
// nil when replicas is 0.
func NewWait(replicas int, timeout time.Duration, log logr.Logger) *Wait {
	if replicas <= 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	return &Wait{Replicas: replicas, Timeout: timeout, log: log,
		short: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelgate_redis_wait_short_total",
			Help: "Writes (by what they stored) whose WAIT saw fewer replicas acknowledge than --redis-wait-replicas within --redis-wait-timeout; the write stayed and the call succeeded.",
		}, []string{"write"}),
	}
}

// Collector is the counter of short WAITs, for gatewayd's registry; nil when w waits for nothing.
func (w *Wait) Collector() prometheus.Collector {
	if w == nil {
		return nil
	}
	return w.short
}

// Shorts is how many writes of what have seen a short WAIT.
func (w *Wait) Shorts(what string) float64 {
	if w == nil {
		return 0
	}
	var m dto.Metric
	if err := w.short.WithLabelValues(what).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Write runs write, then WAIT on the same connection of the primary that owns key (what names the write in the
// metric and the log). Without w, write runs on c as any call. The error is write's, or WAIT's when the
// connection failed under it: then the write may be on the dead primary only, and the caller answers as for a
// failed write. A WAIT that answers fewer replicas is no error.
func (w *Wait) Write(ctx context.Context, c redis.UniversalClient, key, what string, write func(redis.Cmdable) error) error {
	if w == nil || w.Replicas <= 0 {
		return write(c)
	}
	node, err := primaryFor(ctx, c, key)
	if err != nil {
		return err
	}
	conn := node.Conn()
	defer conn.Close()
	if err := write(conn); err != nil {
		if cc, ok := c.(*redis.ClusterClient); ok && movedOrAsk(err) {
			// The slot moved since the client last read the slot map: the cluster client follows MOVED and
			// ASK, but on a connection of its choosing, where a WAIT would wait for nothing. The write goes
			// through it unwaited, and counts as short.
			cc.ReloadState(ctx)
			if err := write(c); err != nil {
				return err
			}
			w.count(ctx, what, 0, "the key's slot moved")
			return nil
		}
		return err
	}
	n, err := conn.Wait(ctx, w.Replicas, w.Timeout).Result()
	if err != nil {
		return fmt.Errorf("failed to wait for %d replicas to take the write: %w", w.Replicas, err)
	}
	if int(n) < w.Replicas {
		w.count(ctx, what, int(n), "")
	}
	return nil
}

// primaryFor is the client of the primary that takes key's writes.
func primaryFor(ctx context.Context, c redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("no primary serves %s: %w", key, err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("redisclient: cannot WAIT through a %T", c)
}

func movedOrAsk(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || strings.Contains(err.Error(), "EXECABORT")
}

// count counts one short WAIT of what and logs it, at most once per waitLogEvery.
func (w *Wait) count(ctx context.Context, what string, acked int, why string) {
	w.short.WithLabelValues(what).Inc()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unlogged++
	if time.Since(w.logged) < waitLogEvery {
		return
	}
	log := w.log
	if log.GetSink() == nil {
		log = logr.FromContextOrDiscard(ctx)
	}
	kv := []any{"write", what, "acknowledged", acked, "replicas", w.Replicas, "timeout", w.Timeout.String(), "shortSinceLastLog", w.unlogged}
	if why != "" {
		kv = append(kv, "reason", why)
	}
	log.Info("Fewer Redis replicas acknowledged a write than asked; the write stays on the primary", kv...)
	w.logged, w.unlogged = time.Now(), 0
}
