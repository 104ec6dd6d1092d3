// Package gatewayd is modelgate's data plane: it authenticates federated and workspace keys, enforces the
// group limits, forwards OpenAI-compatible and predict calls to their upstreams (streaming without buffering),
// settles token usage and exports Prometheus metrics. Everything it decides comes from the snapshot that the
// reload package keeps current; the only other thing it reads from Kubernetes is the upstreams' key Secrets.
//
// Use Run for a blocking server, or New then Serve on a listener of your own and wait on Ready, as the tests
// and the local stack do.
package gatewayd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/reload"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Defaults of Options.
const (
	DefaultAddr            = ":8080"
	DefaultUpstreamTimeout = 60 * time.Second
	DefaultMaxBodyBytes    = 32 << 20
	DefaultSecretTTL       = 30 * time.Second
	// DefaultShutdownGrace leaves room, inside the chart's 60 s terminationGracePeriodSeconds, for the state
	// store's final flush after the last call ends.
	DefaultShutdownGrace = 45 * time.Second
)

// Options configure a Gateway. Only RESTConfig is required.
type Options struct {
	// Addr is the listen address of Run; DefaultAddr when empty.
	Addr string
	// RESTConfig reaches the Kubernetes API for snapshots and upstream Secrets.
	RESTConfig *rest.Config
	// Namespaces are the workspaces served; empty means all.
	Namespaces []string
	// UpstreamTimeout bounds an upstream call when its Endpoint sets none: a non-streamed call as a whole; a
	// streamed one until its response headers and then each gap between two chunks, so long streams that keep
	// flowing are not cut. DefaultUpstreamTimeout when zero.
	UpstreamTimeout time.Duration
	// MaxBodyBytes caps request bodies; DefaultMaxBodyBytes when zero.
	MaxBodyBytes int64
	// SecretTTL is how long an upstream key read from its Secret is reused; DefaultSecretTTL when zero.
	SecretTTL time.Duration
	// Store keeps the limit counters; an in-memory store when nil.
	Store limits.Store
	// Clock drives the limit windows; the real clock when nil. Tests pass a fake one.
	Clock clock.PassiveClock
	// Transport reaches the upstreams; NewUpstreamTransport() when nil.
	Transport http.RoundTripper
	// ReadYourWritesTimeout bounds how long a management write waits for this replica to load the snapshot that
	// contains it; the management API's default when zero.
	ReadYourWritesTimeout time.Duration
	// DisableManagementAPI leaves the /v1 management routes unmounted, for a pure data-plane replica.
	DisableManagementAPI bool
	// Registry receives gatewayd's metrics and is served at /metrics; a new registry with the Go and process
	// collectors when nil.
	Registry *prometheus.Registry
	// Billing stores billing events. When set, gatewayd records one per call made with a federated key, serves
	// GET /v1/gateway/events and delivers the events to each Workspace's billing webhook. Off when nil.
	Billing billing.Store
	// BillingDelivery tunes the webhook delivery; defaults when zero.
	BillingDelivery billing.DelivererOptions
	// BillingSpool is the file that keeps billing events the Billing store refuses at shutdown, written back at the
	// next start (see billing.RecorderOptions). Events still refused at shutdown are lost when it is empty.
	BillingSpool string
	// ShutdownGrace is how long a stop waits for calls in flight (streams included) before it cuts them;
	// DefaultShutdownGrace when zero. Keep it below the pod's terminationGracePeriodSeconds.
	ShutdownGrace time.Duration
	// Logger reports what background work (billing writes) cannot do; discarded when zero.
	Logger logr.Logger
}

// Gateway is a configured data plane.
type Gateway struct {
	opts    Options
	loader  *reload.Loader
	secrets *secretCache
	client  *http.Client
	metrics *metrics
	mux     *http.ServeMux
	billing *billing.Recorder
}

// New builds a Gateway without starting anything.
func New(opts Options) (*Gateway, error) {
	if opts.RESTConfig == nil {
		return nil, errors.New("gatewayd needs a RESTConfig to reach the Kubernetes API")
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.SecretTTL <= 0 {
		opts.SecretTTL = DefaultSecretTTL
	}
	if opts.Store == nil {
		opts.Store = limits.NewMemory()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Transport == nil {
		opts.Transport = NewUpstreamTransport()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cs, err := kubernetes.NewForConfig(opts.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("failed to build the Kubernetes client: %w", err)
	}
	loader, err := reload.New(cs, opts.Namespaces, opts.Store, opts.Registry)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		opts:    opts,
		loader:  loader,
		secrets: newSecretCache(cs, opts.SecretTTL),
		// No client-wide timeout: deadlines are per call, and streams may legitimately run long.
		client:  &http.Client{Transport: opts.Transport},
		metrics: m,
		mux:     http.NewServeMux(),
	}
	g.routes()
	if opts.Billing != nil {
		log := opts.Logger.WithName("billing")
		g.billing = billing.NewRecorder(opts.Billing, billing.RecorderOptions{
			Spool:   opts.BillingSpool,
			OnError: func(err error) { log.Error(err, "Billing events not written yet") },
		})
		g.mux.Handle("GET /v1/gateway/events", billing.Handler(opts.Billing, g.billingCaller))
	}
	if !opts.DisableManagementAPI {
		if err := g.mountManagement(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *Gateway) routes() {
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	g.mux.HandleFunc("GET /readyz", g.readyz)
	g.mux.Handle("GET /metrics", promhttp.HandlerFor(g.opts.Registry, promhttp.HandlerOpts{Registry: g.opts.Registry}))
	for _, suffix := range []string{"/chat/completions", "/completions", "/embeddings"} {
		g.mux.Handle("POST /v1"+suffix, g.inference(suffix))
	}
	g.mux.HandleFunc("POST /models/{model_id}/production/predict", g.predict)
}

// Ready is closed once the first good snapshot of every served namespace is loaded.
func (g *Gateway) Ready() <-chan struct{} { return g.loader.Ready() }

// View returns the runtime view in force, for the management API and tests.
func (g *Gateway) View() *view.View { return g.loader.View() }

func (g *Gateway) readyz(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-g.loader.Ready():
		_, _ = w.Write([]byte("ok"))
	default:
		http.Error(w, "waiting for the first snapshot of every served namespace", http.StatusServiceUnavailable)
	}
}

// Run listens on opts.Addr and serves until ctx is done.
func Run(ctx context.Context, opts Options) error {
	g, err := New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", g.opts.Addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", g.opts.Addr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve watches snapshots and serves on ln until ctx is done, then shuts down gracefully.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	log := logr.FromContextOrDiscard(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loaderDone := make(chan error, 1)
	go func() { loaderDone <- g.loader.Run(ctx) }()

	// Calls in flight outlive ctx: a stop (SIGTERM) lets them finish, streams included, for up to ShutdownGrace,
	// and only then cuts them. Had they inherited ctx, every call would be cancelled the moment the stop began.
	callCtx, cutCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer cutCalls()
	srv := &http.Server{
		Handler:           g.mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return callCtx },
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	if g.billing != nil {
		go billing.NewDeliverer(g.opts.Billing, g.billingTargets, g.opts.BillingDelivery).Run(ctx)
	}
	log.Info("Serving", "addr", ln.Addr().String(), "namespaces", g.opts.Namespaces)

	var err error
	select {
	case <-ctx.Done():
	case err = <-loaderDone:
		if err != nil {
			err = fmt.Errorf("snapshot watch stopped: %w", err)
		}
	case err = <-serveDone:
		err = fmt.Errorf("server stopped: %w", err)
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ShutdownGrace)
	defer stop()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		log.Info("Calls still running after the shutdown grace period are cut", "grace", g.opts.ShutdownGrace.String())
		cutCalls()
		_ = srv.Close()
		if err == nil {
			err = fmt.Errorf("failed to shut down within %s: %w", g.opts.ShutdownGrace, serr)
		}
	}
	if g.billing != nil {
		// The calls are done: write their events before the store closes.
		g.billing.Close()
	}
	cancel()
	return err
}

// UpstreamIdleConnsPerHost is how many idle connections gatewayd keeps to each upstream. Go's default of 2 makes
// every call beyond the second concurrent one to an upstream open a new connection and leave it in TIME_WAIT,
// which costs a handshake per call and, under load, can exhaust the ephemeral ports of the pod.
const UpstreamIdleConnsPerHost = 256

// NewUpstreamTransport is gatewayd's transport to the upstreams: http.DefaultTransport's dialer, proxy, TLS and
// timeouts, with UpstreamIdleConnsPerHost idle connections kept per upstream.
func NewUpstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = UpstreamIdleConnsPerHost
	t.MaxIdleConns = 4 * UpstreamIdleConnsPerHost
	return t
}
