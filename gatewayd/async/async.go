// Package async serves async inference (docs/rest-api.md "Async inference"): the async_predict, async_request
// and async_queue_status routes under the model route prefixes, a dispatcher per deployment that claims queued
// requests and calls the model through the same route step and forwarding core as a sync predict call, and the
// delivery of results to each request's webhook, signed with the Workspace's asyncWebhook secret by the
// one webhook sender (gatewayd/stdwebhook). Requests live in a queue.Store (bbolt or Redis, opened by gatewayd/state), so an
// accepted request survives a crash, a restart and the loss of a replica.
package async

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/api/netguard"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/gatewayd/wake"
)

// Defaults of Options.
const (
	DefaultLease             = 30 * time.Second
	DefaultPoll              = 100 * time.Millisecond
	DefaultSweepEvery        = time.Second
	DefaultRetention         = 72 * time.Hour
	DefaultWebhookTimeout    = 10 * time.Second
	DefaultWebhookMinBackoff = time.Second
	DefaultWebhookMaxBackoff = 10 * time.Minute
	// DefaultWebhookAttempts spans about two and a half hours with the default backoff.
	DefaultWebhookAttempts = 12
	// StatusCallsPerSecond bounds GET of async_request (status polling) per key (docs/rest-api.md "Async
	// inference").
	StatusCallsPerSecond = 20
	// CancelCallsPerSecond bounds DELETE of async_request per key, in a budget of its own, so status polls never
	// use up a cancel's room.
	CancelCallsPerSecond = 20
	// DefaultPredictPerSecond bounds async_predict calls per key over a rolling second (docs/security.md):
	// 12,000 a minute.
	DefaultPredictPerSecond = 200
	// DefaultMaxQueuedPerKey bounds the requests of one key QUEUED or IN_PROGRESS at once (docs/security.md).
	DefaultMaxQueuedPerKey = 1000
)

// Addresses picks and counts the ready addresses of a Service's EndpointSlices (gatewayd/discovery).
type Addresses interface {
	route.Addresses
	// Ready counts the ready addresses of namespace/service on the port named portName.
	Ready(namespace, service, portName string) int
}

// Waker asks for a deployment to be woken, without waiting (gatewayd/wake.Waker).
type Waker interface {
	Ask(t wake.Target)
}

// Calls counts the calls in flight to each deployment (gatewayd/concurrency): the sync ones, which go before
// async ones, and the async ones this replica runs, which are demand for the autoscaler as sync calls are.
type Calls interface {
	// SyncInFlight is the number of sync calls in flight to a deployment on this replica.
	SyncInFlight(namespace, deploymentID string) int
	// BeginQueued counts one async call to a deployment until done is called.
	BeginQueued(namespace, deploymentID string) (done func())
}

// Config is what cmd/gatewayd's flags set.
type Config struct {
	// AllowInternalWebhooks lets webhook_endpoint aim at loopback, private and link-local addresses, and use http
	// to loopback and internal address literals: for a development stack, or a cluster whose receivers are
	// internal (netguard.CheckURL).
	AllowInternalWebhooks bool
	// Retention is how long a request is kept after it ended; DefaultRetention when zero.
	Retention time.Duration
	// Lease, Poll and SweepEvery tune the dispatcher; the defaults when zero.
	Lease, Poll, SweepEvery time.Duration
	// Webhook delivery: timeout of one POST, backoff between attempts (doubling), attempts before giving up;
	// the defaults when zero.
	WebhookTimeout, WebhookMinBackoff, WebhookMaxBackoff time.Duration
	WebhookAttempts                                      int
	// PredictPerSecond bounds async_predict calls per key (DefaultPredictPerSecond when zero); MaxQueuedPerKey
	// bounds a key's requests QUEUED or IN_PROGRESS (DefaultMaxQueuedPerKey when zero). Past either, 429.
	PredictPerSecond, MaxQueuedPerKey int
}

// Options configure a Service. View, Store, Limits and Upstream are required.
type Options struct {
	Config
	View     func() *view.View
	Store    queue.Store
	Limits   limits.Store
	Upstream *upstream.Client
	// CatchUp holds a call that names a key, model, deployment or chain the view does not serve until this replica
	// serves every snapshot published before the call, then looks once more (reload.Loader.CatchUp); a miss stands
	// at once when nil.
	CatchUp auth.CatchUp
	// Addresses serves deployments behind a Service; they never dispatch when nil.
	Addresses Addresses
	// Waker asks the manager to start a deployment with queued requests and no ready address (gatewayd/wake);
	// such requests wait for an address without asking when nil.
	Waker Waker
	// Calls counts calls per deployment; nothing is counted, and sync calls take no slot, when nil.
	Calls Calls
	// RequestLog records each attempt that called a deployment, in that deployment's log (the logs route), under
	// the request's id; off when nil.
	RequestLog *requestlog.Log
	// Tracer traces each request's acceptance, its wait in the queue, its dispatch and its webhook delivery; no
	// spans when nil.
	Tracer *tracing.Tracer
	// Secret reads a Secret entry of a workspace (the asyncWebhook signing secret).
	Secret func(ctx context.Context, namespace string, ref *snapshot.SecretRef) (string, error)
	// Clock gives the time of every transition; the real clock when nil. Tests pass a fake one.
	Clock clock.PassiveClock
	// Registry receives the metrics; none when nil.
	Registry prometheus.Registerer
	// Owner names this replica on leases; hostname-pid-random when empty.
	Owner string
	// WebhookClient sends the webhooks; a netguard client (internal addresses per AllowInternalWebhooks) when nil.
	WebhookClient *http.Client
	Logger        logr.Logger
}

// Service is the async inference of one gatewayd.
type Service struct {
	opts Options
	// lookup authenticates workspace keys in the view in force, holding a miss for Options.CatchUp.
	lookup  auth.Lookup
	metrics *metrics
	wakeCh  chan struct{}
	plans   sync.Map // namespace/key prefix/route -> *limits.Plan of that route's per-key limit (status, cancel, async_predict)

	mu     sync.Mutex
	paused map[string]pause // queue -> backoff after a 429 or 503
	// runCtx is Run's context, for runs started by a handler; nil before Run and once it stops (under mu).
	runCtx context.Context
	wg     sync.WaitGroup
}

type pause struct {
	until time.Time
	wait  time.Duration
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.View == nil || opts.Store == nil || opts.Limits == nil || opts.Upstream == nil {
		return nil, fmt.Errorf("async: View, Store, Limits and Upstream are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), ids.New(ids.AsyncOwner))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.Lease, DefaultLease)
	def(&opts.Poll, DefaultPoll)
	def(&opts.SweepEvery, DefaultSweepEvery)
	def(&opts.Retention, DefaultRetention)
	def(&opts.WebhookTimeout, DefaultWebhookTimeout)
	def(&opts.WebhookMinBackoff, DefaultWebhookMinBackoff)
	def(&opts.WebhookMaxBackoff, DefaultWebhookMaxBackoff)
	if opts.WebhookAttempts <= 0 {
		opts.WebhookAttempts = DefaultWebhookAttempts
	}
	if opts.PredictPerSecond <= 0 {
		opts.PredictPerSecond = DefaultPredictPerSecond
	}
	if opts.MaxQueuedPerKey <= 0 {
		opts.MaxQueuedPerKey = DefaultMaxQueuedPerKey
	}
	if opts.WebhookClient == nil {
		opts.WebhookClient = netguard.Client(opts.AllowInternalWebhooks)
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	return &Service{opts: opts, lookup: auth.ViewLookup(opts.View).Holding(opts.View, opts.CatchUp), metrics: m,
		wakeCh: make(chan struct{}, 1), paused: map[string]pause{}}, nil
}

// Run dispatches queued requests, sweeps the store and delivers webhooks until ctx is done, then puts the
// requests it was running back in the queue and returns.
func (s *Service) Run(ctx context.Context) {
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	var loops sync.WaitGroup
	for _, loop := range []func(context.Context){s.dispatchLoop, s.sweepLoop, s.webhookLoop} {
		loops.Add(1)
		go func() { defer loops.Done(); loop(ctx) }()
	}
	loops.Wait()
	s.mu.Lock()
	s.runCtx = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// enqueue stores r and reports whether it was claimed at once to run here: when the store can (queue.Direct),
// the deployment has a free slot and nothing waits in its queue, acceptance and claim are one write, and the
// run starts without waiting for the dispatcher.
func (s *Service) enqueue(ctx context.Context, r *queue.Request, d *snapshot.Deployment) (bool, error) {
	direct, ok := s.opts.Store.(queue.Direct)
	now := r.CreatedAt
	if !ok || s.isPaused(r.Queue(), now) {
		return false, s.opts.Store.Enqueue(ctx, r)
	}
	free := s.slots(r.Namespace, d)
	if free <= 0 {
		return false, s.opts.Store.Enqueue(ctx, r)
	}
	s.mu.Lock()
	runCtx := s.runCtx
	if runCtx != nil {
		s.wg.Add(1) // before the write, so a stop cannot pass wg.Wait between the claim and the run
	}
	s.mu.Unlock()
	if runCtx == nil {
		return false, s.opts.Store.Enqueue(ctx, r)
	}
	claimed, err := direct.EnqueueClaimed(ctx, r, s.opts.Owner, now, s.opts.Lease, free)
	if err != nil || !claimed {
		s.wg.Done()
		return false, err
	}
	s.metrics.timeInQueue.WithLabelValues(r.Namespace, r.DeploymentID).Observe(0)
	go s.run(runCtx, r.Namespace, *d, r)
	return true, nil
}

// wake makes the dispatcher look at the queues now rather than at its next tick.
func (s *Service) wake() {
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}
