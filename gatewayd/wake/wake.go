// Package wake asks the manager to start a model deployment that has no ready address, for the calls gatewayd
// holds meanwhile and for the wake route. gatewayd's only write is a merge patch of one annotation,
// gateway.modelgate.io/wake-requested-at, on the ModelDeployment; the manager reacts by scaling the deployment to
// at least one replica. However many calls are held for one deployment, they share one patch: a caller that finds
// a patch in flight waits for its result, and one within MinInterval of the last patch reuses that patch's
// result. The Waker also runs the cold-start clock, from the first wake of a deployment with no ready address to
// its first ready address, and exports it as modelgate_cold_start_seconds.
package wake

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Defaults of Options.
const (
	// DefaultMinInterval spaces two patches of one deployment. Held calls re-ask after it, so a wake the manager
	// lost (or undid) is asked again while callers still wait, at one patch per interval at most.
	DefaultMinInterval = 30 * time.Second
	// DefaultPatchTimeout bounds one patch.
	DefaultPatchTimeout = 10 * time.Second
	// DefaultColdStartBound is how long the cold-start clock runs for a deployment that sets no startup timeout.
	DefaultColdStartBound = 15 * time.Minute
)

// Target is a deployment to wake.
type Target struct {
	// Namespace is the workspace, and Deployment the ModelDeployment's name (its deployment_id).
	Namespace, Deployment string
	// Model labels the metrics.
	Model string
	// Service and PortName locate the deployment's ready addresses, for the cold-start clock; no clock runs when
	// Service is empty.
	Service, PortName string
	// StartupTimeout bounds the cold-start clock; DefaultColdStartBound when zero.
	StartupTimeout time.Duration
}

// Addresses tells when a Service has a ready address (gatewayd/discovery).
type Addresses interface {
	// Ready returns how many ready addresses the Service has on the port.
	Ready(namespace, service, portName string) int
	// WaitReady blocks until the Service has a ready address on the port, or ctx is done.
	WaitReady(ctx context.Context, namespace, service, portName string) error
}

// Options configure a Waker. Client is required.
type Options struct {
	// Client patches ModelDeployments; it needs nothing but patch on modeldeployments.
	Client client.Client
	// Addresses runs the cold-start clock; none runs when nil.
	Addresses Addresses
	// Metrics receive the wake requests and cold starts; none when nil.
	Metrics *Metrics
	// Clock stamps the annotation and times cold starts; the real clock when nil.
	Clock clock.PassiveClock
	// MinInterval spaces two patches of one deployment; DefaultMinInterval when zero.
	MinInterval time.Duration
	// PatchTimeout bounds one patch; DefaultPatchTimeout when zero.
	PatchTimeout time.Duration
	// Logger reports failed patches; discarded when zero.
	Logger logr.Logger
}

// Waker coalesces wake requests per deployment. Its zero value is not usable: call New, and Run for the
// lifetime of the process.
type Waker struct {
	opts Options

	mu      sync.Mutex
	entries map[key]*entry
	// base parents the patches and cold-start clocks, which outlive the call that began them; Run cancels it.
	base   context.Context
	cancel context.CancelFunc
}

type key struct{ namespace, deployment string }

// entry is the wake state of one deployment.
type entry struct {
	// inflight is the patch being made, nil when none.
	inflight *patch
	// last is the most recent patch begun, nil before the first.
	last *patch
	// clock is true while a cold-start clock runs.
	clock bool
}

// patch is one wake patch; err is its result once done is closed.
type patch struct {
	at   time.Time
	done chan struct{}
	err  error
}

// New returns a Waker.
func New(opts Options) *Waker {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.PatchTimeout <= 0 {
		opts.PatchTimeout = DefaultPatchTimeout
	}
	base, cancel := context.WithCancel(context.Background())
	return &Waker{opts: opts, entries: map[key]*entry{}, base: base, cancel: cancel}
}

// Run blocks until ctx is done, then stops the cold-start clocks and any patch still running.
func (w *Waker) Run(ctx context.Context) {
	<-ctx.Done()
	w.cancel()
}

// Wake asks for t to be started and returns the result of the patch that asks for it: a patch of its own, the
// one in flight, or the last one when it began less than MinInterval ago. ctx bounds only the wait: a patch
// outlives the caller that began it, so a caller that leaves costs no second patch.
func (w *Waker) Wake(ctx context.Context, t Target) error {
	p := w.ask(t)
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ask is Wake without the wait, for a held call, which waits for an address rather than for the patch.
func (w *Waker) Ask(t Target) { w.ask(t) }

// ask returns the patch that asks for t: the one in flight, the last one within MinInterval, or a new one.
func (w *Waker) ask(t Target) *patch {
	now := w.opts.Clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	k := key{t.Namespace, t.Deployment}
	e := w.entries[k]
	if e == nil {
		e = &entry{}
		w.entries[k] = e
	}
	w.startClockLocked(e, t, now)
	if e.inflight != nil {
		return e.inflight
	}
	if e.last != nil && now.Sub(e.last.at) < w.opts.MinInterval {
		return e.last
	}
	p := &patch{at: now, done: make(chan struct{})}
	e.inflight, e.last = p, p
	go w.send(e, t, p)
	return p
}

// send makes patch p of t and publishes its result.
func (w *Waker) send(e *entry, t Target, p *patch) {
	ctx, cancel := context.WithTimeout(w.base, w.opts.PatchTimeout)
	defer cancel()
	err := Patch(ctx, w.opts.Client, t.Namespace, t.Deployment, p.at)
	result := "ok"
	if err != nil {
		result = "error"
		w.opts.Logger.Error(err, "Failed to request a wake", "namespace", t.Namespace, "deployment", t.Deployment)
	}
	if m := w.opts.Metrics; m != nil {
		m.requests.WithLabelValues(t.Namespace, t.Model, result).Inc()
	}
	w.mu.Lock()
	p.err = err
	e.inflight = nil
	w.mu.Unlock()
	close(p.done)
}

// startClockLocked starts the cold-start clock of t at now, unless one runs or t has a ready address already
// (a wake of a running deployment is no cold start).
func (w *Waker) startClockLocked(e *entry, t Target, now time.Time) {
	a := w.opts.Addresses
	if e.clock || a == nil || t.Service == "" || a.Ready(t.Namespace, t.Service, t.PortName) > 0 {
		return
	}
	e.clock = true
	bound := t.StartupTimeout
	if bound <= 0 {
		bound = DefaultColdStartBound
	}
	go func() {
		ctx, cancel := context.WithTimeout(w.base, bound)
		defer cancel()
		err := a.WaitReady(ctx, t.Namespace, t.Service, t.PortName)
		if err == nil && w.opts.Metrics != nil {
			w.opts.Metrics.coldStart.WithLabelValues(t.Namespace, t.Model).Observe(w.opts.Clock.Since(now).Seconds())
		}
		w.mu.Lock()
		e.clock = false
		w.mu.Unlock()
	}()
}

// Patch writes the wake annotation, stamped at, on the ModelDeployment namespace/name: a merge patch of
// metadata.annotations and nothing else, which is all gatewayd's RBAC lets it write there for this.
func Patch(ctx context.Context, c client.Client, namespace, name string, at time.Time) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		gatewayv1.AnnotationWakeRequestedAt: at.UTC().Format(time.RFC3339Nano),
	}}})
	if err != nil {
		return err
	}
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Patch(ctx, md, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("failed to patch %s on ModelDeployment %s/%s: %w", gatewayv1.AnnotationWakeRequestedAt, namespace, name, err)
	}
	return nil
}
