// Package cooldown keeps, on this gatewayd replica, the state of every Endpoint target that calls tried: its
// consecutive failed tries, until when it is out of rotation, and its tries of the last hour by outcome
// (docs/routing.md "Cooldown"). The state is per replica, as Envoy's outlier detection is: each replica sees its
// own tries and takes a failing target out on its own. It is kept under the target's view.Target.Key, so a
// snapshot reload keeps it. It also owns the series modelgate_upstream_tries_total and
// modelgate_upstream_target_up.
package cooldown

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is how one try ended.
type Outcome int

// Outcomes of a try. Every one but OK and Canceled is a failed try.
const (
	// OK: the upstream answered with a status that does not fail a try (2xx, or a 400 the client gets as it is).
	OK Outcome = iota
	// Status: the upstream answered a status of the Endpoint's retry.onStatus.
	Status
	// Unreachable: a refused or reset connection, or an answer that could not be read (a redirect, say).
	Unreachable
	// Timeout: no answer byte within the timeout.
	Timeout
	// Credentials: the target's key could not be read.
	Credentials
	// Canceled: the client left before the answer; the target is not blamed.
	Canceled
	// NumOutcomes is the number of outcomes.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"ok", "status", "unreachable", "timeout", "credentials", "canceled"}

func (o Outcome) String() string { return outcomeNames[o] }

// Failed reports whether the outcome fails the try.
func (o Outcome) Failed() bool { return o != OK && o != Canceled }

// Registry is the state of the targets of this replica.
type Registry struct {
	// targets is read on every call without a lock or an allocation, and copied under mu to add a target: a
	// target is added once, on its first try on this replica.
	targets atomic.Pointer[map[string]*Target]
	mu      sync.Mutex
	tries   *prometheus.CounterVec
	now     func() time.Time
}

// New returns a Registry whose series are registered on reg; now is the clock the gauge reads (time.Now when nil).
func New(reg prometheus.Registerer, now func() time.Time) (*Registry, error) {
	if now == nil {
		now = time.Now
	}
	r := &Registry{now: now, tries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelgate_upstream_tries_total",
		Help: "Tries of Endpoint targets by workspace, slug, target name and outcome (ok, status, unreachable, timeout, credentials, canceled); a client call makes one or more.",
	}, []string{"workspace", "slug", "target", "outcome"})}
	if err := reg.Register(r.tries); err != nil {
		return nil, err
	}
	if err := reg.Register(upCollector{r}); err != nil {
		return nil, err
	}
	return r, nil
}

// Name is where a target is: its key, and the labels of its series.
type Name struct {
	Key                         string
	Workspace, Slug, TargetName string
}

// Target returns the state of the target of name, made on its first try.
func (r *Registry) Target(name Name) *Target {
	if t := r.Lookup(name.Key); t != nil {
		return t
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.all()
	if t := old[name.Key]; t != nil {
		return t
	}
	t := &Target{name: name}
	for o := range NumOutcomes {
		t.counters[o] = r.tries.WithLabelValues(name.Workspace, name.Slug, name.TargetName, Outcome(o).String())
	}
	next := make(map[string]*Target, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name.Key] = t
	r.targets.Store(&next)
	return t
}

// Lookup returns the state of the target of key, nil when no call tried it on this replica.
func (r *Registry) Lookup(key string) *Target { return r.all()[key] }

func (r *Registry) all() map[string]*Target {
	if m := r.targets.Load(); m != nil {
		return *m
	}
	return nil
}

// Target is the state of one target. Its methods are safe for concurrent use, and a try's record is a few
// atomic operations.
type Target struct {
	name Name
	// failures counts consecutive failed tries since the last success or the last time the target went out.
	failures atomic.Int32
	// until is when the target is back in rotation, in Unix nanoseconds; 0 or past when it is in.
	until    atomic.Int64
	counters [NumOutcomes]prometheus.Counter
	ledger   ledger
}

// Cooling reports whether the target is out of rotation at now.
func (t *Target) Cooling(now time.Time) bool { return now.UnixNano() < t.until.Load() }

// Until is when the target is back in rotation; zero when it has not been out.
func (t *Target) Until() time.Time {
	if u := t.until.Load(); u > 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// Failures is the number of consecutive failed tries since the last success or the last time it went out.
func (t *Target) Failures() int { return int(t.failures.Load()) }

// Policy is when a target goes out of rotation.
type Policy struct {
	// Failures consecutive failed tries take it out for Duration.
	Failures int
	Duration time.Duration
}

// Record counts one try that ended at now. A failed try that makes Failures in a row takes the target out for
// the policy's duration; retryAfter, an upstream 429's Retry-After, takes it out at least that long at once. A
// successful try brings it back at once (a try made while it was out, because every target was out, that
// succeeded).
func (t *Target) Record(o Outcome, now time.Time, p Policy, retryAfter time.Duration) {
	t.counters[o].Inc()
	t.ledger.add(o, now)
	switch {
	case o == OK:
		// Written only when set: every call of a busy target lands here, and a store each time would move the
		// cache line between the cores that serve its calls.
		if t.failures.Load() != 0 {
			t.failures.Store(0)
		}
		if t.until.Load() != 0 {
			t.until.Store(0)
		}
		return
	case !o.Failed():
		return
	}
	var out time.Duration
	if int(t.failures.Add(1)) >= p.Failures {
		t.failures.Store(0)
		out = p.Duration
	}
	out = max(out, retryAfter)
	if out <= 0 {
		return
	}
	until := now.Add(out).UnixNano()
	for {
		cur := t.until.Load()
		if cur >= until || t.until.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Recent is the target's tries in the hour before now, by outcome.
func (t *Target) Recent(now time.Time) [NumOutcomes]int64 { return t.ledger.sum(now) }

// ledger counts tries per minute over the last hour.
type ledger struct {
	minutes [60]minute
}

type minute struct {
	// at is the Unix minute the counts belong to.
	at     atomic.Int64
	counts [NumOutcomes]atomic.Int64
}

func (l *ledger) add(o Outcome, now time.Time) {
	m := now.Unix() / 60
	b := &l.minutes[m%60]
	if at := b.at.Load(); at != m {
		// The slot holds an older minute: the first try of this minute clears it. Two tries racing here may lose
		// a count between them; the ledger is a display figure, the counters are exact.
		if b.at.CompareAndSwap(at, m) {
			for i := range b.counts {
				b.counts[i].Store(0)
			}
		}
	}
	b.counts[o].Add(1)
}

func (l *ledger) sum(now time.Time) [NumOutcomes]int64 {
	var out [NumOutcomes]int64
	m := now.Unix() / 60
	for i := range l.minutes {
		b := &l.minutes[i]
		if at := b.at.Load(); at > m-60 && at <= m {
			for o := range out {
				out[o] += b.counts[o].Load()
			}
		}
	}
	return out
}

// Counts names the NumOutcomes of Recent.
func Counts(c [NumOutcomes]int64) map[string]int64 {
	out := make(map[string]int64, NumOutcomes)
	for o, n := range c {
		out[Outcome(o).String()] = n
	}
	return out
}

// upCollector gives modelgate_upstream_target_up at each scrape: 1 while a target is in rotation, 0 while it is
// cooling down, for every target a call tried on this replica.
type upCollector struct{ r *Registry }

var upDesc = prometheus.NewDesc("modelgate_upstream_target_up",
	"1 while an Endpoint target is in rotation on this replica, 0 while it is cooling down, by workspace, slug and target name.",
	[]string{"workspace", "slug", "target"}, nil)

func (c upCollector) Describe(ch chan<- *prometheus.Desc) { ch <- upDesc }

func (c upCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.r.now()
	for _, t := range c.r.all() {
		up := 1.0
		if t.Cooling(now) {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, t.name.Workspace, t.name.Slug, t.name.TargetName)
	}
}
