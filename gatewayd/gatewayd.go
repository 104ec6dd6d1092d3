// Package gatewayd assembles modelgate's data plane: the snapshot loader (reload), the model-call handlers
// (inference, over the forwarding core in upstream, and the EndpointSlice watch of discovery for model
// deployments behind a Service), the /v1 management API (rest), billing, health and metrics,
// on one mux and one server with a graceful stop. It owns wiring and lifecycle only; each concern lives in its
// own package (docs/architecture.md). Everything it serves comes from the snapshot that the reload package keeps
// current; the only other thing it reads from Kubernetes is the upstreams' key Secrets.
//
// Use NewWithState then ListenAndServe for a blocking server over the durable state, as cmd/gatewayd and the local
// stack do, or New then Serve on a listener of your own and wait on Ready, as the tests do.
package gatewayd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/stats"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/concurrency"
	"github.com/modelgate/modelgate/gatewayd/cooldown"
	"github.com/modelgate/modelgate/gatewayd/dashboard"
	"github.com/modelgate/modelgate/gatewayd/discovery"
	"github.com/modelgate/modelgate/gatewayd/failover"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/inference"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/podlogs"
	// The provider kinds an Endpoint target may name register themselves (provider.Register).
	"github.com/modelgate/modelgate/api/tracing"
	_ "github.com/modelgate/modelgate/gatewayd/provider/anthropic"
	_ "github.com/modelgate/modelgate/gatewayd/provider/azure"
	_ "github.com/modelgate/modelgate/gatewayd/provider/bedrock"
	_ "github.com/modelgate/modelgate/gatewayd/provider/gemini"
	_ "github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/reload"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/rest/sandboxes"
	"github.com/modelgate/modelgate/gatewayd/rest/targets"
	"github.com/modelgate/modelgate/gatewayd/sessions"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/gatewayd/wake"
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
	// MaxBodyBytes caps the bodies of model calls (the OpenAI, predict and run_remote routes); DefaultMaxBodyBytes
	// when zero. The other route families have caps of their own (docs/security.md "Request bodies").
	MaxBodyBytes int64
	// BodyReadTimeout bounds the read of a request body on every route (gatewayd/ingress: docs/security.md
	// "Request bodies"); ingress.DefaultBodyReadTimeout (a minute) when zero. A sandbox upload, once its signature
	// is checked, has until its URL expires.
	BodyReadTimeout time.Duration
	// MaxInFlightBytesPerKey caps the body bytes of one federated key's model calls held at once; a call past it
	// answers 429. inference.DefaultMaxInFlightBytesPerKey when zero.
	MaxInFlightBytesPerKey int64
	// SecretTTL is how long an upstream key read from its Secret is reused; DefaultSecretTTL when zero.
	SecretTTL time.Duration
	// Store keeps the limit counters; an in-memory store when nil.
	Store limits.Store
	// ManagementLimits counts the management API's rate limits (shared by every replica on Redis, set by
	// NewWithState); this process's memory when nil.
	ManagementLimits limits.Windows
	// Clock drives the limit windows; the real clock when nil. Tests pass a fake one.
	Clock clock.PassiveClock
	// Transport reaches the upstreams; upstream.NewTransport() when nil.
	Transport http.RoundTripper
	// MissHold bounds how long a call that names a key, slug, model, deployment or chain this replica does not
	// serve waits for it to load the snapshots published before the call, in case another replica answered that
	// object's write a moment ago (docs/limits.md "Read-your-writes on every replica"); reload.DefaultMissHold when
	// zero, no hold when negative.
	MissHold time.Duration
	// ReadYourWritesTimeout bounds how long a management write waits for this replica to load the snapshot that
	// contains it; the management API's default when zero.
	ReadYourWritesTimeout time.Duration
	// DisableManagementAPI leaves the /v1 management routes unmounted, for a pure data-plane replica.
	DisableManagementAPI bool
	// MetricsListener, when set, serves /metrics (every series of the process) apart from Addr, so the address
	// customers reach never shows other workspaces' series. Run listens on MetricsAddr for it.
	MetricsListener net.Listener
	// MetricsAddr is where Run serves /metrics; none when empty.
	MetricsAddr string
	// Registry receives gatewayd's metrics and is served at /metrics; a new registry with the Go and process
	// collectors when nil.
	Registry *prometheus.Registry
	// KeyUse keeps when each workspace key was last used (GET /v1/api_keys last_used_at); in memory when nil.
	KeyUse keyuse.Store
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
	// ShutdownDrain is how long a stop keeps serving before it closes its listener: /readyz fails at once and
	// every answer carries Connection: close, so the Service stops sending new connections and clients leave
	// their kept-alive ones after their next answer, instead of finding them closed under a request. Zero closes
	// the listener at once. ShutdownDrain plus ShutdownGrace must stay below terminationGracePeriodSeconds.
	ShutdownDrain time.Duration
	// Logger reports what background work (billing writes) cannot do; discarded when zero.
	Logger logr.Logger
	// HoldTimeout bounds how long a predict call waits for a deployment with no ready address to start (less
	// when its startupTimeoutSeconds is shorter); inference.DefaultHoldTimeout when zero.
	HoldTimeout time.Duration
	// WakeMinInterval spaces two wake requests of one deployment; wake.DefaultMinInterval when zero.
	WakeMinInterval time.Duration
	// Async keeps async inference requests. When set, gatewayd serves the async routes and runs their
	// dispatcher and result webhooks (gatewayd/async). Off when nil.
	Async queue.Store
	// AsyncConfig tunes async inference; defaults when zero.
	AsyncConfig async.Config
	// DisableDashboard leaves the operator dashboard (/dashboard/) unmounted, and session cookies unaccepted. The
	// dashboard is off too when DisableManagementAPI is set, since it only calls the management API.
	DisableDashboard bool
	// DashboardSessionSecrets is the key ring that seals dashboard session cookies (dashboard.SessionOptions);
	// one random secret for this process when empty, so sessions end at a restart and do not span replicas.
	DashboardSessionSecrets [][]byte
	// DashboardSessions keeps which dashboard sessions are live, so signing out ends a session on every replica
	// that shares it (the durable state's, set by NewWithState); this process's memory when nil.
	DashboardSessions sessions.Store
	// Sandboxes configures the sandbox image routes (upload signing key, base URL, image reference guard).
	Sandboxes sandboxes.Options
	// PeersService is gatewayd's metrics Service: the logs route reads the request log of every ready endpoint
	// on its metrics port (api/stats.Replicas), so it shows the calls of every replica. Only this replica's
	// when empty.
	PeersService types.NamespacedName
	// Tracer traces model calls, their tries, async requests and their webhooks (gatewayd/tracing); no traces
	// when nil.
	Tracer *tracing.Tracer
}

// Gateway is a configured data plane.
type Gateway struct {
	opts Options
	// draining is set once a stop began and ShutdownDrain runs (drain).
	draining atomic.Bool
	loader   *reload.Loader
	secrets  *upstream.Secrets
	mux      *ingress.Routes
	// handler is what the server serves: mux, behind the dashboard's session cookies when the dashboard is on,
	// under the body policy of gatewayd/ingress.
	handler http.Handler
	billing *billing.Recorder
	// cooldown is the state of the Endpoint targets that calls tried on this replica; targets answers it, merged
	// with every other replica's.
	cooldown *cooldown.Registry
	targets  *targets.Cluster
	// addrs are the ready addresses of the Services that model deployments run behind.
	addrs *discovery.Watcher
	// waker asks the manager to start deployments that calls wait for.
	waker *wake.Waker
	// inference serves the model calls; its federated models list answers beside the management API's.
	inference *inference.Handler
	// lists serves the management API's list routes; nil when the management API is off.
	lists cache.Cache
	// managementRoutes are the patterns mounted behind the management wrapper (mountV1).
	managementRoutes []string
	// keyUse records workspace keys' last uses; workspaceKeys authenticates workspace keys on every route and
	// records through it, heldKeys too, holding a miss (reload.Loader.CatchUp) for the routes that take only
	// workspace keys.
	keyUse                  *keyuse.Recorder
	workspaceKeys, heldKeys auth.Lookup
	// calls counts the calls in flight per model deployment, served to the autoscaler on the metrics listener.
	calls *concurrency.Tracker
	// requests is this replica's log of the calls it made per deployment (requestLogs reads every replica's),
	// and pods reads deployments' pod logs: the
	// sources of the logs route beyond Events.
	requests    *requestlog.Log
	requestLogs *requestlog.Cluster
	pods        podlogs.Reader
	// async serves async inference; nil when Options.Async is.
	async *async.Service
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
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = ingress.DefaultBodyReadTimeout
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
	if opts.KeyUse == nil {
		opts.KeyUse = keyuse.NewMemory()
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
	if opts.MissHold != 0 {
		loader.SetMissHold(opts.MissHold)
	}
	m, err := inference.NewMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		opts:    opts,
		loader:  loader,
		secrets: upstream.NewSecrets(cs, opts.SecretTTL),
		calls:   concurrency.New(opts.Clock, 0),
		mux:     ingress.NewRoutes(),
		addrs:   discovery.New(cs, opts.Namespaces),
		keyUse:  keyuse.NewRecorder(opts.KeyUse, opts.Clock.Now, opts.Logger.WithName("keyuse")),
		// The host name of a pod is its name: the replica a request line names.
		requests: requestlog.New(hostname(), 0, 0),
		pods:     podlogs.New(cs),
	}
	g.requestLogs = &requestlog.Cluster{Local: g.requests, Peers: peers(cs, opts.PeersService)}
	g.workspaceKeys = auth.ViewLookup(loader.View).Recording(g.keyUse)
	g.heldKeys = g.workspaceKeys.Holding(loader.View, loader.CatchUp)
	if g.waker, err = newWaker(opts, g.addrs); err != nil {
		return nil, err
	}
	g.routes()
	if opts.Billing != nil {
		log := opts.Logger.WithName("billing")
		g.billing = billing.NewRecorder(opts.Billing, billing.RecorderOptions{
			Spool:   opts.BillingSpool,
			OnError: func(err error) { log.Error(err, "Billing events not written yet") },
		})
	}
	up := upstream.New(upstream.Options{Transport: opts.Transport, Secrets: g.secrets, Timeout: opts.UpstreamTimeout})
	if g.cooldown, err = cooldown.New(opts.Registry, opts.Clock.Now); err != nil {
		return nil, err
	}
	// The cooldown records tries on gatewayd's clock (failover.Options.Now), so the state is read on it too.
	g.targets = targets.New(targets.Options{View: loader.View, Cooldown: g.cooldown, Replica: hostname(), Now: opts.Clock.Now,
		Peers: g.requestLogs.Peers})
	calls := inference.New(inference.Options{
		View:                   loader.View,
		Limits:                 opts.Store,
		Clock:                  opts.Clock,
		Upstream:               up,
		Endpoints:              failover.New(failover.Options{Upstream: up, Cooldown: g.cooldown, Now: opts.Clock.Now, Tracer: opts.Tracer}),
		Metrics:                m,
		MaxBodyBytes:           opts.MaxBodyBytes,
		Billing:                g.billing,
		MaxInFlightBytesPerKey: opts.MaxInFlightBytesPerKey,
		BodyReadTimeout:        opts.BodyReadTimeout,
		Concurrency:            g.calls,
		Addresses:              g.addrs,
		Waker:                  g.waker,
		HoldTimeout:            opts.HoldTimeout,
		ViewChanged:            loader.Changed,
		WorkspaceKeys:          g.workspaceKeys,
		CatchUp:                loader.CatchUp,
		RequestLog:             g.requests,
		Tracer:                 opts.Tracer,
	})
	calls.Register(g.mux)
	calls.RegisterChains(g.mux)
	g.inference = calls
	if opts.Async != nil {
		if g.async, err = async.New(async.Options{
			Config: opts.AsyncConfig, View: loader.View, CatchUp: loader.CatchUp, Store: opts.Async, Limits: opts.Store, Upstream: up,
			Addresses: g.addrs, Calls: g.calls, Waker: g.waker, Secret: g.secrets.Get, Clock: opts.Clock, Registry: opts.Registry,
			RequestLog: g.requests, Tracer: opts.Tracer,
			Logger: opts.Logger.WithName("async"),
		}); err != nil {
			return nil, err
		}
		g.async.Register(g.mux)
		g.async.RegisterChains(g.mux)
	}
	if err := g.mountV1(); err != nil {
		return nil, err
	}
	var handler http.Handler = g.mux
	if !opts.DisableDashboard && !opts.DisableManagementAPI {
		sessions, err := dashboard.NewSessions(dashboard.SessionOptions{
			Secrets: opts.DashboardSessionSecrets, Lookup: g.heldKeys, Now: opts.Clock.Now, Store: opts.DashboardSessions,
			Limits: opts.ManagementLimits, Logger: opts.Logger.WithName("dashboard"),
		})
		if err != nil {
			return nil, err
		}
		g.mux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
		sessions.Register(g.mux)
		handler = sessions.Wrap(g.mux)
	}
	// Outermost, so the body policy holds for every route, the dashboard's session check and 404s included.
	g.handler = ingress.Guard(handler, opts.BodyReadTimeout)
	return g, nil
}

func (g *Gateway) routes() {
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { httperr.WriteOK(w) })
	g.mux.HandleFunc("GET /readyz", g.readyz)
	g.mux.HandleFunc("/", unrouted(g.mux.ServeMux))
}

// Routes are the patterns of every route gatewayd serves on Addr, in order of registration.
func (g *Gateway) Routes() []string { return g.mux.Patterns() }

// Ready is closed once the first good snapshot of every served namespace is loaded.
func (g *Gateway) Ready() <-chan struct{} { return g.loader.Ready() }

// View returns the runtime view in force, for the management API and tests.
func (g *Gateway) View() *view.View { return g.loader.View() }

// readyz answers GET /readyz in the envelope of every answer: 200 {"ok": true} once the first snapshot of every
// served namespace is loaded, 503 unavailable before that and while a stop drains. Probes read the status only.
func (g *Gateway) readyz(w http.ResponseWriter, _ *http.Request) {
	if g.draining.Load() {
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Stopping: draining connections.", nil)
		return
	}
	select {
	case <-g.loader.Ready():
		httperr.WriteOK(w)
	default:
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Waiting for the first snapshot of every served namespace.", nil)
	}
}

// NewWithState opens the durable state that cfg chooses and builds a Gateway over it: the wiring of cmd/gatewayd,
// which the local stack runs too. Close the State once Serve has returned, so nothing charges it any more.
func NewWithState(ctx context.Context, opts Options, cfg state.Config) (*Gateway, *state.State, error) {
	st, err := state.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	opts.Store, opts.Billing, opts.BillingSpool, opts.KeyUse, opts.Async = st.Limits(), st.Billing(), st.Spool(), st.KeyUse(), st.Async()
	opts.DashboardSessions, opts.ManagementLimits = st.Sessions(), st.ManagementLimits()
	g, err := New(opts)
	if err != nil {
		return nil, nil, errors.Join(err, st.Close())
	}
	for _, c := range st.Collectors() {
		if err := g.opts.Registry.Register(c); err != nil {
			return nil, nil, errors.Join(err, st.Close())
		}
	}
	return g, st, nil
}

// ListenAndServe listens on Addr (and MetricsAddr) and serves until ctx is done.
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.opts.Addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", g.opts.Addr, err)
	}
	if g.opts.MetricsAddr != "" && g.opts.MetricsListener == nil {
		if g.opts.MetricsListener, err = net.Listen("tcp", g.opts.MetricsAddr); err != nil {
			_ = ln.Close()
			return fmt.Errorf("failed to listen on %s for metrics: %w", g.opts.MetricsAddr, err)
		}
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
	go func() {
		if err := g.addrs.Run(ctx); err != nil {
			log.Error(err, "The EndpointSlice watch stopped: deployments behind a Service answer 503 until a restart")
		}
	}()
	go g.waker.Run(ctx)
	if g.lists != nil {
		// Informers start on a list route's first call and are kept from then on.
		go func() {
			if err := g.lists.Start(ctx); err != nil {
				log.Error(err, "The management API's list cache stopped")
			}
		}()
	}

	// Calls in flight outlive ctx: a stop (SIGTERM) lets them finish, streams included, for up to ShutdownGrace,
	// and only then cuts them. Had they inherited ctx, every call would be cancelled the moment the stop began.
	callCtx, cutCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer cutCalls()
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// A client that holds an idle keep-alive connection open costs a goroutine and a socket; bodies have
		// their own read deadline (ingress.Guard, Options.BodyReadTimeout), since uploads may legitimately be long.
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return callCtx },
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	if g.opts.MetricsListener != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", g.metricsHandler())
		// Internal too: the autoscaler's view of every workspace's calls in flight (api/stats), this replica's
		// request log, which the logs route of every replica reads, and its Endpoint targets' state, which the
		// targets route of every replica reads.
		g.calls.Register(mux)
		mux.Handle("GET "+requestlog.Path, g.requests)
		mux.Handle("GET "+targets.Path, g.targets)
		mux.HandleFunc("/", unrouted(mux))
		msrv := &http.Server{Handler: ingress.Guard(mux, g.opts.BodyReadTimeout), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = msrv.Serve(g.opts.MetricsListener) }()
		defer msrv.Close()
		log.Info("Serving metrics", "addr", g.opts.MetricsListener.Addr().String())
	}
	if g.billing != nil {
		go billing.NewDeliverer(g.opts.Billing, g.billingTargets, g.opts.BillingDelivery).Run(ctx)
	}
	asyncDone := make(chan struct{})
	if g.async != nil {
		go func() { defer close(asyncDone); g.async.Run(ctx) }()
	} else {
		close(asyncDone)
	}
	log.Info("Serving", "addr", ln.Addr().String(), "namespaces", g.opts.Namespaces)

	var err error
	select {
	case <-ctx.Done():
		g.drain(log, serveDone)
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
	// Async workers put the requests they ran back in the queue before the store closes.
	<-asyncDone
	return err
}

// drain keeps serving for ShutdownDrain with readiness failed and keep-alive off (closeWhileDraining), so that a
// rolling update moves every client to other replicas before this one closes its listener.
func (g *Gateway) drain(log logr.Logger, serveDone <-chan error) {
	if g.opts.ShutdownDrain <= 0 {
		return
	}
	g.draining.Store(true)
	log.Info("Draining before the stop", "for", g.opts.ShutdownDrain.String())
	select {
	case <-time.After(g.opts.ShutdownDrain):
	case <-serveDone:
	}
}

// Handler is the handler Serve serves its customer-side listener with, for a harness that serves it through
// another HTTP server to compare servers side by side (docs/decisions.md "gatewayd's HTTP server and garbage
// collector"). It answers only while Serve runs, which keeps the snapshot and everything else it reads current.
func (g *Gateway) Handler() http.Handler { return g.closeWhileDraining(g.handler) }

// closeWhileDraining answers with Connection: close once a stop began, so the client closes the connection after
// this answer rather than reusing it while the server closes it (a request caught in that race fails).
func (g *Gateway) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// billingTargets are the billing webhooks of the served workspaces, with their signing secrets read lazily.
func (g *Gateway) billingTargets() map[string]billing.Target {
	v := g.loader.View()
	out := map[string]billing.Target{}
	for _, name := range v.Namespaces() {
		n := v.Namespace(name)
		if n == nil || n.Snapshot == nil || n.Snapshot.Workspace.BillingWebhook == nil {
			continue
		}
		hook := n.Snapshot.Workspace.BillingWebhook
		ref := hook.Secret
		out[name] = billing.Target{URL: hook.URL, Secret: func(ctx context.Context) (string, error) {
			return g.secrets.Get(ctx, name, &ref)
		}}
	}
	return out
}

// newWaker builds the Waker of held calls and the wake routes, over a client that only patches ModelDeployments.
func newWaker(opts Options, addrs *discovery.Watcher) (*wake.Waker, error) {
	scheme := runtime.NewScheme()
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("failed to build the wake client's scheme: %w", err)
	}
	c, err := client.New(opts.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to build the wake client: %w", err)
	}
	m, err := wake.NewMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	return wake.New(wake.Options{Client: c, Addresses: addrs, Metrics: m, MinInterval: opts.WakeMinInterval,
		Logger: opts.Logger.WithName("wake")}), nil
}

// peers lists the metrics listeners of every gatewayd replica behind svc, from its EndpointSlices; nil when svc
// is empty.
func peers(cs kubernetes.Interface, svc types.NamespacedName) func(context.Context) ([]string, error) {
	if svc.Name == "" {
		return nil
	}
	return func(ctx context.Context) ([]string, error) {
		list, err := cs.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil {
			return nil, fmt.Errorf("failed to list the EndpointSlices of Service %s: %w", svc, err)
		}
		return stats.Replicas(list.Items), nil
	}
}
