package gatewayd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/test/chart/helmtest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/upstream"
)

var (
	cfg *rest.Config
	cs  kubernetes.Interface
	// kube starts envtest on first use, so unit tests and fuzzing in this package do not pay for it.
	kube = kubetest.Lazy{OnStart: func(e *kubetest.Env) { cfg, cs = e.Config, e.Clientset }}

	// gatewaydRBAC is gatewayd's client configuration in these suites: envtest's API server as the chart's gatewayd
	// ServiceAccount, so a model route that needs a verb the chart lacks fails here as on a real install. The
	// Secrets the suites' Endpoints name are granted by name, as an install grants them (gatewayd.upstreamSecretNames,
	// docs/rbac.md), so that a refusal the tests expect comes from gatewayd's own checks, not from RBAC.
	gatewaydRBAC = helmtest.Once{Component: "gatewayd", Args: []string{"--set", "gatewayd.upstreamSecretNames={upstream,plain,minted,bound,deleted,billing-webhook,gemini,bedrock}"}}
)

// asGatewayd is gatewayd's client configuration (gatewaydRBAC), on the package's envtest.
func asGatewayd(t *testing.T) *rest.Config {
	t.Helper()
	kube.Start(t)
	return gatewaydRBAC.Config(t, cfg)
}

func TestMain(m *testing.M) { kube.Main(m) }

const (
	slug         = "demo/echo"
	upstreamKey  = "sk-upstream-secret"
	loadDeadline = 30 * time.Second
)

// t0 is a Monday 10:00 UTC, far from midnight, so DAY windows only roll when a test moves the clock.
var t0 = time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)

// fixture is one namespace served by its own gatewayd, with a fake upstream and a fake clock.
type fixture struct {
	t   *testing.T
	ns  string
	url string
	// metricsURL is gatewayd's metrics listener, apart from url.
	metricsURL string
	gw         *gatewayd.Gateway
	store      *limits.Memory
	clock      *clocktesting.FakePassiveClock
	upstream   *upstream.Server
	snap       *snapshot.Snapshot
	version    int64
	// keys maps a group id to the plaintext of its key.
	keys map[string]string
	// limits is the store gatewayd runs with: store, or fixtureOpts.store when set.
	limits limits.Store
	// stop begins gatewayd's shutdown, as SIGTERM does in cmd/gatewayd; stopped is closed when Serve returns.
	stop    context.CancelFunc
	stopped chan struct{}
}

type fixtureOpts struct {
	mode     gatewayv1.LimitEnforcement
	groups   []gatewaytest.Group
	upstream upstream.Options
	// endpoints beyond the default one for slug.
	endpoints []snapshot.Endpoint
	workspace []snapshot.WorkspaceAPIKey
	// maxInFlightBytes is gatewayd's MaxInFlightBytesPerKey; its default when zero.
	maxInFlightBytes int64
	// bodyReadTimeout is gatewayd's BodyReadTimeout; its default when zero.
	bodyReadTimeout time.Duration
	// maxBodyBytes is gatewayd's MaxBodyBytes; its default when zero.
	maxBodyBytes int64
	// upstreamTimeout is gatewayd's UpstreamTimeout; its default when zero.
	upstreamTimeout time.Duration
	// holdTimeout is gatewayd's HoldTimeout; its default when zero.
	holdTimeout time.Duration
	// store is gatewayd's limit store (for example Redis); a fresh memory store, f.store, when nil.
	store limits.Store
	// async serves async inference over a bbolt queue in a temporary directory.
	async bool
	// shutdownDrain is gatewayd's ShutdownDrain.
	shutdownDrain time.Duration
	// billing is gatewayd's billing store; none when nil.
	billing billing.Store
	// listener, when set, wraps the listener gatewayd serves on (to watch its connections).
	listener func(net.Listener) net.Listener
	// tracer is gatewayd's Tracer; no traces when nil.
	tracer *tracing.Tracer
}

// tree is a three-level tree: root <- mid <- {leafA, leafB}. limitsOf gives each group's own models.
func tree(models func(id string) []gatewayv1.ModelConfig) []gatewaytest.Group {
	return []gatewaytest.Group{
		{ID: "root", Models: models("root")},
		{ID: "mid", Parent: "root", Models: models("mid")},
		{ID: "leaf-a", Parent: "mid", Models: models("leaf-a")},
		{ID: "leaf-b", Parent: "mid", Models: models("leaf-b")},
	}
}

func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	kube.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.CreateUpstreamSecret(ctx, cs, ns, "upstream", "api_key", upstreamKey); err != nil {
		t.Fatal(err)
	}
	up := upstream.New(o.upstream)
	t.Cleanup(up.Close)
	f := &fixture{t: t, ns: ns, upstream: up, store: limits.NewMemory(), clock: clocktesting.NewFakePassiveClock(t0), keys: map[string]string{}}
	f.snap = gatewaytest.Snapshot(ns, o.mode, o.groups)
	for _, g := range o.groups {
		key, rec := gatewaytest.NewKey("key-"+g.ID, g.ID)
		f.keys[g.ID] = key
		f.snap.APIKeys = append(f.snap.APIKeys, rec)
	}
	f.snap.Endpoints = append([]snapshot.Endpoint{{ID: "echo", Slug: slug, Targets: []snapshot.Target{{
		Provider: "OPENAI", BaseURL: up.BaseURL(), TargetModel: "echo-large",
		APIKeySecret: &snapshot.SecretRef{Name: "upstream", Key: "api_key"}}}}}, o.endpoints...)
	f.snap.WorkspaceAPIKeys = o.workspace

	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.metricsURL = "http://" + metricsLn.Addr().String()
	f.limits = f.store
	if o.store != nil {
		f.limits = o.store
	}
	var asyncStore queue.Store
	if o.async {
		asyncStore = openQueue(t)
	}
	f.gw, err = gatewayd.New(gatewayd.Options{RESTConfig: asGatewayd(t), Namespaces: []string{ns}, Store: f.limits, Clock: f.clock, MetricsListener: metricsLn,
		MaxInFlightBytesPerKey: o.maxInFlightBytes, BodyReadTimeout: o.bodyReadTimeout, MaxBodyBytes: o.maxBodyBytes, UpstreamTimeout: o.upstreamTimeout,
		HoldTimeout: o.holdTimeout, Async: asyncStore, ShutdownDrain: o.shutdownDrain, Billing: o.billing, Tracer: o.tracer})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.url = "http://" + ln.Addr().String()
	if o.listener != nil {
		ln = o.listener(ln)
	}
	serveCtx, stop := context.WithCancel(ctx)
	f.stop, f.stopped = stop, make(chan struct{})
	go func() {
		defer close(f.stopped)
		_ = f.gw.Serve(serveCtx, ln)
	}()
	f.waitListening()
	// Nothing is published yet, so the gateway cannot be ready.
	f.probe(f.url+"/readyz", http.StatusServiceUnavailable, `"error_code":"unavailable"`)
	f.probe(f.url+"/healthz", http.StatusOK, `{"ok":true}`)
	f.publish()
	if err := gatewaytest.WaitReady(f.gw, loadDeadline); err != nil {
		t.Fatal(err)
	}
	f.probe(f.url+"/readyz", http.StatusOK, `{"ok":true}`)
	return f
}

// probe checks the answer to GET url: the status (all a kubelet reads of a health route) and a JSON body, the
// envelope of every answer, that holds want.
func (f *fixture) probe(url string, status int, want string) {
	f.t.Helper()
	f.expectJSON(http.MethodGet, url, status, want)
}

// expectJSON calls method url and checks the status and that the body is JSON holding want.
func (f *fixture) expectJSON(method, url string, status int, want string) {
	f.t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" || !json.Valid(b) ||
		!strings.Contains(string(b), want) {
		f.t.Fatalf("%s %s = %d %s %s, want %d and JSON holding %s", method, url, resp.StatusCode, resp.Header.Get("Content-Type"), b, status, want)
	}
}

// TestEveryListenerAnswersTheEnvelope: what no route matches is 404 not_found or 405 method_not_allowed in JSON, on
// the customers' listener and on the metrics listener alike, never ServeMux's plain text.
func TestEveryListenerAnswersTheEnvelope(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	for _, base := range []string{f.url, f.metricsURL} {
		f.expectJSON(http.MethodGet, base+"/no/such/route", http.StatusNotFound, `"error_code":"not_found"`)
	}
	f.expectJSON(http.MethodPost, f.metricsURL+"/metrics", http.StatusMethodNotAllowed, `"allow":["GET"]`)
	f.expectJSON(http.MethodDelete, f.url+"/readyz", http.StatusMethodNotAllowed, `"error_code":"method_not_allowed"`)
}

// openQueue opens a bbolt async queue in a temporary directory, closed when the test ends.
func openQueue(t *testing.T) queue.Store {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "async.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	q, err := queue.NewBolt(db)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func (f *fixture) waitListening() {
	for range 500 {
		if resp, err := http.Get(f.url + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatal("gatewayd never listened")
}

func (f *fixture) get(path string) int {
	resp, err := http.Get(f.url + path)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// publish writes f.snap as the next version and waits until the gateway serves it.
func (f *fixture) publish() {
	f.t.Helper()
	f.version++
	if err := gatewaytest.Publish(context.Background(), cs, f.snap, f.version, 0); err != nil {
		f.t.Fatal(err)
	}
	if err := gatewaytest.WaitVersion(f.gw, f.ns, f.version, loadDeadline); err != nil {
		f.t.Fatal(err)
	}
}

type result struct {
	status int
	header http.Header
	body   []byte
	// closed is the answer's Connection: close (net/http moves it out of the header).
	closed bool
}

func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.body)
	}
	return m
}

func (f *fixture) post(path, auth string, body any) result {
	f.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if isModelCall(path) {
		gatewaytest.WantStringDetail(f.t, "POST "+path, resp.StatusCode, out)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: out, closed: resp.Close}
}

// isModelCall is whether path is a model-call route, whose errors carry a string detail.
func isModelCall(path string) bool {
	for _, p := range []string{"/models/", "/chains/", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// chat calls chat completions as group's key with a two-word prompt: 2 prompt + 5 completion = 7 tokens.
func (f *fixture) chat(group, model string) result {
	f.t.Helper()
	return f.post("/v1/chat/completions", "Api-Key "+f.keys[group], map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "hello world"}},
	})
}

const tokensPerChat = 7

func models(slugs ...string) []gatewayv1.ModelConfig {
	var out []gatewayv1.ModelConfig
	for _, s := range slugs {
		out = append(out, gatewayv1.ModelConfig{Slug: s})
	}
	return out
}

// limited returns a model config of slug with one limit.
func limited(s string, typ gatewayv1.LimitType, unit gatewayv1.LimitUnit, threshold int64) gatewayv1.ModelConfig {
	m := gatewayv1.ModelConfig{Slug: s}
	l := gatewayv1.Limit{Type: typ, Unit: unit, Threshold: threshold}
	if gatewayv1.UsageLimitKind.Takes(unit) {
		m.UsageLimits = []gatewayv1.Limit{l}
	} else {
		m.RateLimits = []gatewayv1.Limit{l}
	}
	return m
}

// readSSE reads one SSE event (up to a blank line) and returns its data payload.
func readSSE(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) == 0 {
				continue
			}
			return strings.Join(data, "\n")
		}
		if rest, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, strings.TrimSpace(rest))
		}
	}
}
