// Package concurrency counts the calls this gatewayd replica has in flight to each model deployment, and the most
// it had at once over a recent window, for the manager's autoscaler. Begin is on the hot path of every deployment
// call: a lock-free map look-up and two atomic operations. Stats, read every 2 s by the autoscaler over the
// internal stats endpoint (api/stats), rolls the peak window.
package concurrency

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/modelgate/modelgate/api/stats"
)

// DefaultWindow is the span of a peak: the autoscaler's read interval, so a burst between two reads is seen by
// at least one of them.
const DefaultWindow = 2 * time.Second

// Tracker counts calls in flight per deployment. The zero value is not usable; a nil *Tracker counts nothing,
// so handlers built without one need no check.
type Tracker struct {
	clock  clock.PassiveClock
	window time.Duration
	// counters holds a *counter per key. Entries are never removed: there is one per deployment ever called
	// (deployments the snapshot resolved, so callers cannot mint keys), and idle ones are left out of Stats.
	counters sync.Map

	// mu serialises window rolls; rolledAt is when the current window started.
	mu       sync.Mutex
	rolledAt time.Time
}

type key struct{ namespace, deployment string }

type counter struct {
	// inFlight counts every call in flight, sync counts the sync ones among them.
	inFlight, sync atomic.Int64
	// cur is the peak since the current window started, prev the peak of the window before.
	cur, prev atomic.Int64
}

// New returns a Tracker whose peaks span window (DefaultWindow when zero), timed by clk (the real clock when nil).
func New(clk clock.PassiveClock, window time.Duration) *Tracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return &Tracker{clock: clk, window: window, rolledAt: clk.Now()}
}

// Begin counts one sync call to a deployment, its body already in hand, until done is called, once.
func (t *Tracker) Begin(namespace, deploymentID string) (done func()) {
	c := t.BeginCall(namespace, deploymentID)
	c.InHand()
	return c.Done
}

// Call is one sync call counted by BeginCall. Its methods are safe for concurrent use; on a nil *Call they do
// nothing.
type Call struct {
	c *counter
	// state is callDemand, then callInHand once InHand is called, then callDone.
	state atomic.Int32
}

const (
	callDemand int32 = iota
	callInHand
	callDone
)

// BeginCall counts one sync call to a deployment as demand (in flight, for the autoscaler) at once, and among the
// sync calls that take the deployment's async slots (SyncInFlight) only from InHand on: once its body is in hand,
// so a client that trickles its body holds no slot of the async queue (docs/security.md "Request bodies").
func (t *Tracker) BeginCall(namespace, deploymentID string) *Call {
	if t == nil {
		return nil
	}
	c := &Call{c: t.counter(namespace, deploymentID)}
	c.c.add(1)
	return c
}

// InHand marks the call's body as received: from now until Done it takes an async slot. A second call, or one
// after Done, does nothing.
func (c *Call) InHand() {
	if c != nil && c.state.CompareAndSwap(callDemand, callInHand) {
		c.c.sync.Add(1)
	}
}

// Done ends the call's count; later calls do nothing.
func (c *Call) Done() {
	if c == nil {
		return
	}
	switch c.state.Swap(callDone) {
	case callInHand:
		c.c.sync.Add(-1)
		c.c.inFlight.Add(-1)
	case callDemand:
		c.c.inFlight.Add(-1)
	}
}

// BeginQueued counts one async call (gatewayd/async's dispatcher) until done is called, once: demand for the
// autoscaler like a sync call, but not among the sync calls that take async slots.
func (t *Tracker) BeginQueued(namespace, deploymentID string) (done func()) {
	if t == nil {
		return func() {}
	}
	c := t.counter(namespace, deploymentID)
	c.add(1)
	return func() { c.inFlight.Add(-1) }
}

// SyncInFlight is the number of sync calls in flight to a deployment.
func (t *Tracker) SyncInFlight(namespace, deploymentID string) int {
	if t == nil {
		return 0
	}
	if v, ok := t.counters.Load(key{namespace, deploymentID}); ok {
		return int(v.(*counter).sync.Load())
	}
	return 0
}

func (t *Tracker) counter(namespace, deploymentID string) *counter {
	k := key{namespace, deploymentID}
	v, ok := t.counters.Load(k)
	if !ok {
		v, _ = t.counters.LoadOrStore(k, &counter{})
	}
	return v.(*counter)
}

// add counts n more calls in flight and raises the window's peak to the new count.
func (c *counter) add(n int64) {
	in := c.inFlight.Add(n)
	for {
		p := c.cur.Load()
		if in <= p || c.cur.CompareAndSwap(p, in) {
			return
		}
	}
}

// Stats reports every deployment with calls in flight or a recent peak, sorted. A read a window or more after
// the last roll rolls the window, so several readers (two manager replicas, a person with curl) do not shorten
// it for each other.
func (t *Tracker) Stats() stats.Stats {
	if t == nil {
		return stats.Stats{Deployments: []stats.Deployment{}}
	}
	out := stats.Stats{WindowSeconds: t.window.Seconds(), Deployments: []stats.Deployment{}}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	elapsed := now.Sub(t.rolledAt)
	roll := elapsed >= t.window
	t.counters.Range(func(k, v any) bool {
		c := v.(*counter)
		in := c.inFlight.Load()
		if roll {
			// The new window starts with what is in flight now; the one that ended becomes the previous, unless
			// nobody read for two windows, when it is older than a peak may be.
			last := c.cur.Swap(in)
			if elapsed >= 2*t.window {
				last = in
			}
			c.prev.Store(last)
		}
		peak := max(c.cur.Load(), c.prev.Load(), in)
		if in > 0 || peak > 0 {
			key := k.(key)
			out.Deployments = append(out.Deployments, stats.Deployment{Namespace: key.namespace, DeploymentID: key.deployment, InFlight: in, Peak: peak})
		}
		return true
	})
	if roll {
		t.rolledAt = now
	}
	slices.SortFunc(out.Deployments, func(a, b stats.Deployment) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.DeploymentID, b.DeploymentID))
	})
	return out
}

// Register mounts ServeHTTP at GET stats.Path on mux. Mount it only on the internal metrics listener.
func (t *Tracker) Register(mux *http.ServeMux) { mux.Handle("GET "+stats.Path, t) }

// ServeHTTP answers GET stats.Path with Stats as JSON. Mount it only on the internal metrics listener: it names
// the deployments of every workspace.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(t.Stats())
}
