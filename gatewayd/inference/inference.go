// Package inference serves model calls: the OpenAI-compatible routes for federated and workspace keys, and for
// workspace keys the predict, wake and run_remote routes of gatewayd/route's families. A call handler
// authenticates (gatewayd/auth), resolves the call to an upstream target through the view (gatewayd/route), admits
// it against the limits, forwards it with gatewayd/upstream, settles tokens, and records metrics and the billing
// event; a wake only asks the manager to start the deployment (gatewayd/wake) and forwards nothing. It maps every
// refusal and upstream failure onto the one envelope of gatewayd/httperr; the forwarding core itself never writes
// an error answer.
package inference

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/concurrency"
	"github.com/modelgate/modelgate/gatewayd/failover"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/gatewayd/wake"
)

// Options configure the handlers. Every field but Billing is required.
type Options struct {
	// View returns the view in force at the time of a call.
	View func() *view.View
	// Limits keeps the limit counters.
	Limits limits.Store
	// Clock drives the limit windows and event timestamps.
	Clock clock.PassiveClock
	// Upstream forwards calls to model deployments.
	Upstream *upstream.Client
	// Endpoints runs the tries of a call to an Endpoint's targets.
	Endpoints *failover.Caller
	// Metrics receive the series of every call.
	Metrics *Metrics
	// MaxBodyBytes caps request bodies.
	MaxBodyBytes int64
	// BodyReadTimeout is gatewayd's read deadline of a request body (ingress.Guard sets it on every route); a held
	// call's body gets the hold's timeout on top. ingress.DefaultBodyReadTimeout when zero.
	BodyReadTimeout time.Duration
	// MaxInFlightBytesPerKey caps the body bytes one key holds in memory at once (a call without Content-Length
	// reserves MaxBodyBytes); a call past it answers 429. DefaultMaxInFlightBytesPerKey when zero.
	MaxInFlightBytesPerKey int64
	// Billing records one event per call made with a federated key; off when nil.
	Billing *billing.Recorder
	// WorkspaceKeys authenticates workspace keys (gatewayd records their last use through it);
	// auth.ViewLookup(View) when nil.
	WorkspaceKeys auth.Lookup
	// Concurrency counts the calls in flight to each deployment, held ones included, for the autoscaler; nothing
	// is counted when nil.
	Concurrency *concurrency.Tracker
	// Addresses picks the ready addresses of model deployments served by a Service; such deployments answer 503
	// model_not_ready when nil.
	Addresses route.Addresses
	// Waker asks for a deployment with no ready address to be started, for held calls and the wake routes; no
	// wake is asked when nil (held calls still wait).
	Waker *wake.Waker
	// HoldTimeout bounds how long a call waits for a deployment to start (less when the deployment's
	// startupTimeoutSeconds is shorter); DefaultHoldTimeout when zero.
	HoldTimeout time.Duration
	// ViewChanged returns a channel closed at the next swap of the view (reload.Loader.Changed). A held predict
	// call that names an environment resolves it again at each swap, so a promotion while it waits moves it to
	// the deployment promoted. Nil: a held call stays on the deployment it resolved first.
	ViewChanged func() <-chan struct{}
	// CatchUp holds a call that names a key, slug, model, deployment or chain the view does not serve until this
	// replica serves every snapshot published before the call, then looks once more (reload.Loader.CatchUp); a
	// miss stands at once when nil.
	CatchUp auth.CatchUp
	// RequestLog records each predict call that reached a deployment, for the logs route (the async dispatcher
	// writes its attempts there too); off when nil.
	RequestLog *requestlog.Log
	// Tracer gives each OpenAI call a server span, under the client's traceparent; no spans when nil.
	Tracer *tracing.Tracer
}

// Handler serves the model-call routes.
type Handler struct {
	opts     Options
	inflight *inflight
	// lookup authenticates workspace keys (Options.WorkspaceKeys, or the view in force), made once so a call
	// allocates no closure for it; heldLookup is lookup that holds a miss for Options.CatchUp. The OpenAI routes,
	// which take either kind of key, hold a miss of both kinds themselves with lookup.
	lookup, heldLookup auth.Lookup
}

// Defaults of Options.
const (
	DefaultMaxInFlightBytesPerKey = 128 << 20
)

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = ingress.DefaultBodyReadTimeout
	}
	if opts.HoldTimeout <= 0 {
		opts.HoldTimeout = DefaultHoldTimeout
	}
	if opts.MaxInFlightBytesPerKey <= 0 {
		opts.MaxInFlightBytesPerKey = DefaultMaxInFlightBytesPerKey
	}
	lookup := opts.WorkspaceKeys
	if lookup == nil {
		lookup = auth.ViewLookup(opts.View)
	}
	return &Handler{opts: opts, inflight: newInflight(opts.MaxInFlightBytesPerKey), lookup: lookup,
		heldLookup: lookup.Holding(opts.View, opts.CatchUp)}
}

// Register adds the model-call routes to mux.
func (h *Handler) Register(mux ingress.Mux) {
	for _, suffix := range []string{"/chat/completions", "/completions", "/embeddings"} {
		mux.Handle("POST /v1"+suffix, h.openAI(suffix))
	}
	mux.Handle("POST /v1/messages", h.messagesRoute())
	route.Predict.Register(mux, h.predict)
	route.Wake.Register(mux, h.wake)
}

// RegisterChains adds the run_remote routes to mux.
func (h *Handler) RegisterChains(mux ingress.Mux) {
	route.RunRemote.Register(mux, h.runRemote)
}
