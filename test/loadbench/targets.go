package loadbench

import (
	"context"
	"fmt"
	stdlog "log"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	gwupstream "github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/test/upstream"
)

// Slugs of the load workspace: one routed to the zero-delay upstream, one to the paced one; and two Endpoints of
// two targets on the zero-delay upstream (docs/routing.md): twoSlug weighted 3 to 1, failoverSlug whose first
// target refuses every connection, so each of its calls makes a failed try before the one that answers.
const (
	plainSlug    = "bench/plain"
	streamSlug   = "bench/stream"
	twoSlug      = "bench/two"
	failoverSlug = "bench/failover"
)

// upstreams are the two fake OpenAI upstreams every target reaches.
type upstreams struct {
	plain, paced *upstream.Server
	// plainProxy and pacedProxy are the bare reverse proxies in front of them.
	plainProxy, pacedProxy string
	closers                []func()
}

// forget drops the requests the fakes recorded, which would otherwise grow the harness's heap, and the garbage
// collector's work for every target, round after round.
func (u *upstreams) forget() {
	u.plain.Reset()
	u.paced.Reset()
}

func (u *upstreams) close() {
	for i := len(u.closers) - 1; i >= 0; i-- {
		u.closers[i]()
	}
}

// startUpstreams starts the zero-delay and the paced upstream, and a bare httputil.ReverseProxy in front of each.
func startUpstreams(cfg Config) (*upstreams, error) {
	u := &upstreams{
		plain: upstream.New(upstream.Options{CompletionTokens: completionTokens}),
		paced: upstream.New(upstream.Options{CompletionTokens: completionTokens, StreamDeltas: cfg.StreamDeltas, StreamDelay: cfg.StreamDelay,
			StampChunks: true}),
	}
	u.closers = append(u.closers, u.plain.Close, u.paced.Close)
	var err error
	if u.plainProxy, err = u.startProxy(cfg.Log, u.plain.URL); err != nil {
		u.close()
		return nil, err
	}
	if u.pacedProxy, err = u.startProxy(cfg.Log, u.paced.URL); err != nil {
		u.close()
		return nil, err
	}
	return u, nil
}

// startProxy serves the cheapest thing a user could put in the path instead of gatewayd: a reverse proxy with no
// auth and no limits, on the same upstream transport gatewayd uses, so that the comparison is of the proxies and
// not of their connection pools.
func (u *upstreams) startProxy(log logr.Logger, target string) (string, error) {
	to, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("failed to parse upstream URL %q: %w", target, err)
	}
	p := httputil.NewSingleHostReverseProxy(to)
	// The default FlushInterval already passes text/event-stream through unbuffered.
	p.Transport = gwupstream.NewTransport()
	// A broken stream shows up as a violation; the proxy's log says what broke it.
	p.ErrorLog = stdlog.New(logWriter{log.WithName("bare proxy")}, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to listen for the bare proxy: %w", err)
	}
	// Full duplex keeps net/http from closing the request body when the answer's headers go out. Without it,
	// the transport's last read of that body (a check that nothing follows Content-Length) can land after the
	// close and tear down the upstream connection mid-stream: about 1 stream in 1,000 was cut. gatewayd never
	// races this way: it reads inference bodies whole, and /predict's body reader keeps its EOF.
	full := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: full, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	u.closers = append(u.closers, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// logWriter passes each line a standard logger writes to log.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// completionTokens is what both upstreams report as completion tokens.
const completionTokens = 16

// expect is what the upstreams report for the harness's request.
func expect(cfg Config) Expect {
	return Expect{PromptTokens: 5, CompletionTokens: completionTokens, StreamChunks: cfg.StreamDeltas + 2, StreamDelay: cfg.StreamDelay,
		// The zero-delay upstream answers three deltas' worth of text (upstream.Options.StreamDeltas's default).
		PlainContent: `"` + strings.Repeat("tok ", 3) + `"`}
}

// loadWorkspace is the workspace every gatewayd target serves: a 3-level CASCADING tree (root, team, leaf) whose
// every level declares REQUEST and TOKEN rate limits per SECOND and MINUTE and REQUEST and TOKEN usage limits per
// DAY on both slugs, all far too high to trigger, and one federated key on the leaf.
type loadWorkspace struct {
	ns, key string
	// invokeKey is a WORKSPACE_INVOKE key for the predict route of predictModel.
	invokeKey string
}

// predictModel is the model of the predict target: its production deployment is a url deployment at the
// zero-delay upstream with predict path /chat/completions, so a predict call carries the same body to the same
// server as the OpenAI target's call, and its answer (with its usage) comes back unchanged.
const predictModel = "bench-model"

const unlimited = int64(1) << 50

func benchModels() []gatewayv1.ModelConfig {
	var rate, usage []gatewayv1.Limit
	for _, typ := range []gatewayv1.LimitType{gatewayv1.LimitTypeRequest, gatewayv1.LimitTypeToken} {
		for _, unit := range []gatewayv1.LimitUnit{gatewayv1.UnitSecond, gatewayv1.UnitMinute} {
			rate = append(rate, gatewayv1.Limit{Type: typ, Unit: unit, Threshold: unlimited})
		}
		usage = append(usage, gatewayv1.Limit{Type: typ, Unit: gatewayv1.UnitDay, Threshold: unlimited})
	}
	var out []gatewayv1.ModelConfig
	for _, slug := range []string{plainSlug, streamSlug, twoSlug, failoverSlug} {
		out = append(out, gatewayv1.ModelConfig{Slug: slug, RateLimits: rate, UsageLimits: usage})
	}
	return out
}

// publishLoadWorkspace publishes the load workspace's snapshot straight into a fresh namespace, through the
// real snapshot ConfigMaps. No custom resource lives there, so the manager never rewrites it.
func publishLoadWorkspace(ctx context.Context, cs kubernetes.Interface, u *upstreams) (*loadWorkspace, error) {
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "loadbench-load")
	if err != nil {
		return nil, err
	}
	s := gatewaytest.Snapshot(ns, gatewayv1.EnforcementCascading, []gatewaytest.Group{
		{ID: "root", Models: benchModels()},
		{ID: "team", Parent: "root", Models: benchModels()},
		{ID: "leaf", Parent: "team", Models: benchModels()},
	})
	key, rec := gatewaytest.NewKey("leaf-key", "leaf")
	s.APIKeys = []snapshot.APIKey{rec}
	// The refusing target never leaves the rotation, so every call of failoverSlug pays for its refused try.
	never := &snapshot.Cooldown{Failures: math.MaxInt32}
	s.Endpoints = []snapshot.Endpoint{
		{ID: "plain", Slug: plainSlug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: u.plain.BaseURL()}}},
		{ID: "stream", Slug: streamSlug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: u.paced.BaseURL()}}},
		{ID: "two", Slug: twoSlug, Targets: []snapshot.Target{
			{Name: "a", Provider: "OPENAI", BaseURL: u.plain.BaseURL(), Weight: 3},
			{Name: "b", Provider: "OPENAI", BaseURL: u.plain.BaseURL(), Weight: 1}}},
		{ID: "failover", Slug: failoverSlug, Cooldown: never, Targets: []snapshot.Target{
			{Name: "refusing", Provider: "OPENAI", BaseURL: refusedBaseURL},
			{Name: "answering", Provider: "OPENAI", BaseURL: u.plain.BaseURL(), Priority: 1}}},
	}
	invokeKey, invokeRec := gatewaytest.NewWorkspaceKey("bench-invoke", "WORKSPACE_INVOKE")
	s.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{invokeRec}
	s.Models = []snapshot.ServedModel{{ID: predictModel, Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "bench-v1"}}}}
	s.Deployments = []snapshot.Deployment{{ID: "bench-v1", ModelID: predictModel, Kind: snapshot.DeploymentURL, URL: u.plain.BaseURL(),
		PredictPath: "/chat/completions", Active: true, Ready: true}}
	if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
		return nil, err
	}
	return &loadWorkspace{ns: ns, key: key, invokeKey: invokeKey}, nil
}

// refusedBaseURL is a loopback base URL that refuses every connection: port 1 (tcpmux), on which nothing listens
// here. A port freed by the harness could be taken by another test's server meanwhile.
const refusedBaseURL = "http://127.0.0.1:1/v1"

// startGatewayd serves the load workspace on state with every other default of cmd/gatewayd (metrics, billing
// events, the management API), and returns its target of the plain and stream slugs and a function that stops
// it; tr traces its calls (nil: none). The target's Charged reads the root group's TOKEN DAY counters of its slugs, which every call of the tree
// settles into, and its Billed the billing events of its slugs (bySlugs gives a target of other slugs).
func startGatewayd(ctx context.Context, name string, rc *rest.Config, ws *loadWorkspace, st *state, tr *tracing.Tracer) (*Target, func(), error) {
	g, err := gatewayd.New(gatewayd.Options{RESTConfig: rc, Namespaces: []string{ws.ns}, Store: st.limits, Billing: st.billing, Tracer: tr})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create gatewayd %s: %w", name, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen for gatewayd %s: %w", name, err)
	}
	stop, err := gatewaytest.Start(ctx, g, ln, 2*time.Minute)
	if err != nil {
		return nil, nil, fmt.Errorf("gatewayd %s: %w", name, err)
	}
	return bySlugs(name, "http://"+ln.Addr().String()+"/v1/chat/completions", ws, st, plainSlug, streamSlug), stop, nil
}

// bySlugs is a target of a gatewayd at url that calls model, and streamModel for streams, whose accounting
// reads those slugs' counters and billing events only.
func bySlugs(name, url string, ws *loadWorkspace, st *state, model, streamModel string) *Target {
	store := st.limits
	root := limits.BucketKey{Namespace: ws.ns, Group: "root", Type: limits.Token, Unit: limits.Day}
	slugs := []string{model}
	if streamModel != model {
		slugs = append(slugs, streamModel)
	}
	return &Target{
		Name: name, URL: url, Auth: "Api-Key " + ws.key,
		Model: model, StreamModel: streamModel,
		Charged: func(ctx context.Context) (int64, error) {
			var sum int64
			for _, slug := range slugs {
				k := root
				k.Slug = slug
				n, err := store.Count(ctx, k, time.Now())
				if err != nil {
					return 0, err
				}
				sum += n
			}
			return sum, nil
		},
		Billed: func(ctx context.Context) (int64, error) {
			var sum int64
			q := billing.Query{Limit: 1000}
			for {
				events, next, err := st.billing.List(ctx, ws.ns, q)
				if err != nil {
					return 0, err
				}
				for _, e := range events {
					if slices.Contains(slugs, e.ModelSlug) {
						sum += e.Tokens.InputTokens + e.Tokens.OutputTokens
					}
				}
				if next == "" {
					return sum, nil
				}
				q.Cursor = next
			}
		},
	}
}

// directTarget calls the upstreams without anything in between.
func directTarget(u *upstreams) (plain, stream *Target) {
	return &Target{Name: "direct", URL: u.plain.BaseURL() + "/chat/completions", Auth: "Bearer direct", Model: "echo", StreamModel: "echo"},
		&Target{Name: "direct", URL: u.paced.BaseURL() + "/chat/completions", Auth: "Bearer direct", Model: "echo", StreamModel: "echo"}
}

// proxyTarget calls the upstreams through the bare reverse proxies.
func proxyTarget(u *upstreams) (plain, stream *Target) {
	return &Target{Name: "bare proxy", URL: u.plainProxy + "/v1/chat/completions", Auth: "Bearer proxy", Model: "echo", StreamModel: "echo"},
		&Target{Name: "bare proxy", URL: u.pacedProxy + "/v1/chat/completions", Auth: "Bearer proxy", Model: "echo", StreamModel: "echo"}
}

// predictTarget calls gatewayd's /production/predict route of predictModel with a workspace key: auth, authz,
// the route step, the request log and the streamed forward, with no limits and no token accounting (predict has
// neither).
func predictTarget(gw *Target, ws *loadWorkspace) *Target {
	base := strings.TrimSuffix(gw.URL, "/v1/chat/completions")
	return &Target{Name: "gatewayd /production/predict", URL: base + "/models/" + predictModel + "/production/predict",
		Auth: "Api-Key " + ws.invokeKey, Model: "echo", StreamModel: "echo"}
}
