package async_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/test/chart/helmtest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// These tests run gatewayd in process against a real kube-apiserver (envtest, for snapshots and the webhook
// Secret), a real model server and webhook receivers on loopback sockets, and each queue backend (a bbolt file,
// a real redis-server).

var (
	// kube starts envtest on first use, so unit tests and fuzzing in this package do not pay for it.
	kube kubetest.Lazy
	// gatewaydRBAC is gatewayd's client configuration: envtest's API server as the chart's gatewayd
	// ServiceAccount, with the Workspace's webhook Secret granted by name (gatewayd.upstreamSecretNames,
	// docs/rbac.md), so async inference runs with the permissions an install gives it.
	gatewaydRBAC = helmtest.Once{Component: "gatewayd", Args: []string{"--set", "gatewayd.upstreamSecretNames={async-webhook}"}}
)

func TestMain(m *testing.M) { kube.Main(m) }

// webhookSecret is the Workspace's asyncWebhook secret, in the Standard Webhooks "whsec_" form.
var webhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("async-webhook-signing-key-32-byte"))

// model is a model server: handle decides each answer (n counts calls from 1); inputs records the bodies.
type model struct {
	srv    *httptest.Server
	mu     sync.Mutex
	inputs []string
	// traceparents are the traceparent headers of the calls, in order.
	traceparents []string
	handle       func(n int, body []byte, w http.ResponseWriter)
}

func newModel(t testing.TB, handle func(n int, body []byte, w http.ResponseWriter)) *model {
	m := &model{handle: handle}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.inputs = append(m.inputs, string(body))
		m.traceparents = append(m.traceparents, r.Header.Get("traceparent"))
		n := len(m.inputs)
		m.mu.Unlock()
		if m.handle == nil {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"echo":%s}`, body)
			return
		}
		m.handle(n, body, w)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *model) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.inputs...)
}

// receiver is a webhook receiver: fail decides whether attempt n (from 1) answers 500. It verifies each
// signature with its own HMAC, not gatewayd's signer.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	attempts int
	got      map[string]async.WebhookPayload // by request id, delivered (2xx) ones
	badSigs  int
}

func newReceiver(t *testing.T, fail func(n int) bool) *receiver {
	rc := &receiver{got: map[string]async.WebhookPayload{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.attempts++
		if !verify(r.Header, body) {
			rc.badSigs++
		}
		if fail(rc.attempts) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var p async.WebhookPayload
		_ = json.Unmarshal(body, &p)
		rc.got[p.RequestID] = p
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// verify checks a Standard Webhooks signature: base64 HMAC-SHA256, keyed by the decoded whsec_ secret, of
// "id.timestamp.body".
func verify(h http.Header, body []byte) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(webhookSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

func (rc *receiver) snapshot() (attempts int, got map[string]async.WebhookPayload, badSigs int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]async.WebhookPayload{}
	for k, v := range rc.got {
		out[k] = v
	}
	return rc.attempts, out, rc.badSigs
}

type fxOpts struct {
	backend string // "bolt" (default), or "redis-" and a redistest mode
	clock   clock.PassiveClock
	config  async.Config
	// notReady publishes the deployment as not ready, so nothing dispatches until ready() is called.
	notReady bool
	// noWebhookSecret leaves Workspace.spec.asyncWebhook unset.
	noWebhookSecret bool
	model           func(n int, body []byte, w http.ResponseWriter)
	// wrap, when set, wraps the queue store gatewayd is given (the benchmarks time its writes).
	wrap func(queue.Store) queue.Store
	// tracer is gatewayd's Tracer; no traces when nil.
	tracer *tracing.Tracer
}

type fx struct {
	t       testing.TB
	ns, url string
	gw      *gatewayd.Gateway
	store   queue.Store
	snap    *snapshot.Snapshot
	version int64
	keys    map[string]string
	model   *model
	reg     *prometheus.Registry
}

// waitMetric waits until the series name with labels equals want (a metric is recorded just after the store
// transition a test waits for) and returns its last value.
func (f *fx) waitMetric(want float64, name string, labels ...string) float64 {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := f.metric(name, labels...)
		if v == want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metric is the value of the series name with labels (name=value pairs) in gatewayd's registry; 0 when absent.
func (f *fx) metric(name string, labels ...string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func newFx(t testing.TB, o fxOpts) *fx {
	t.Helper()
	env := kube.Start(t)
	ctx := context.Background()
	ns, err := gatewaytest.CreateNamespace(ctx, env.Clientset, "async")
	if err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.CreateSecret(ctx, env.Clientset, ns, "async-webhook", "secret", webhookSecret); err != nil {
		t.Fatal(err)
	}
	f := &fx{t: t, ns: ns, keys: map[string]string{}, model: newModel(t, o.model), reg: prometheus.NewRegistry()}
	var lim limits.Store = limits.NewMemory()
	switch mode, ok := strings.CutPrefix(o.backend, "redis-"); {
	case ok:
		f.store = queue.NewRedis(redistest.StartDeployment(t, mode).Client(), "")
	default:
		// The embedded store as gatewayd opens it (its files, their bbolt options, the limit counters' flush).
		st, err := state.Open(ctx, state.Config{Store: state.Embedded, Dir: t.TempDir(), FlushInterval: limits.DefaultFlushInterval})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		f.store, lim = st.Async(), st.Limits()
	}
	gwStore := f.store
	if o.wrap != nil {
		gwStore = o.wrap(f.store)
	}
	f.snap = gatewaytest.Snapshot(ns, "INDEPENDENT", nil)
	for _, k := range []struct{ id, typ string }{{"invoke", "WORKSPACE_INVOKE"}, {"invoke2", "WORKSPACE_INVOKE"}, {"metrics", "WORKSPACE_EXPORT_METRICS"}} {
		key, rec := gatewaytest.NewWorkspaceKey(k.id, k.typ)
		f.keys[k.id] = key
		f.snap.WorkspaceAPIKeys = append(f.snap.WorkspaceAPIKeys, rec)
	}
	if !o.noWebhookSecret {
		f.snap.Workspace.AsyncWebhookSecret = &snapshot.SecretRef{Name: "async-webhook", Key: "secret"}
	}
	f.snap.Models = []snapshot.ServedModel{{ID: "sentiment", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "v1"}}}}
	f.snap.Deployments = []snapshot.Deployment{{ID: "v1", ModelID: "sentiment", Kind: snapshot.DeploymentURL, URL: f.model.srv.URL,
		PredictPath: "/predict", Active: true, Ready: !o.notReady}}
	c := o.config
	c.Poll = max(c.Poll, 5*time.Millisecond)
	c.SweepEvery = max(c.SweepEvery, 20*time.Millisecond)
	c.WebhookMinBackoff = max(c.WebhookMinBackoff, 10*time.Millisecond)
	c.WebhookMaxBackoff = max(c.WebhookMaxBackoff, 40*time.Millisecond)
	f.gw, err = gatewayd.New(gatewayd.Options{RESTConfig: gatewaydRBAC.Config(t, env.Config), Namespaces: []string{ns}, Store: lim, Clock: o.clock,
		Async: gwStore, AsyncConfig: c, DisableManagementAPI: true, Registry: f.reg, Tracer: o.tracer})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.url = "http://" + ln.Addr().String()
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.gw.Serve(serveCtx, ln) }()
	// Stops gatewayd before the store closes (cleanups run last in, first out).
	t.Cleanup(func() { stop(); <-done })
	f.publish()
	if err := gatewaytest.WaitReady(f.gw, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fx) publish() {
	f.t.Helper()
	f.version++
	if err := gatewaytest.Publish(context.Background(), kube.Start(f.t).Clientset, f.snap, f.version, 0); err != nil {
		f.t.Fatal(err)
	}
	if err := gatewaytest.WaitVersion(f.gw, f.ns, f.version, 30*time.Second); err != nil {
		f.t.Fatal(err)
	}
}

// ready publishes the deployment as ready, so the dispatcher starts.
func (f *fx) ready() {
	f.snap.Deployments[0].Ready = true
	f.publish()
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer is not JSON: %s", a.body)
	}
	return m
}

func (f *fx) do(method, path, key string, body []byte) answer {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	gatewaytest.WantStringDetail(f.t, method+" "+path, resp.StatusCode, b)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// enqueue posts body to production async_predict and returns the request id.
func (f *fx) enqueue(body string) string {
	f.t.Helper()
	a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke"], []byte(body))
	if a.status != http.StatusCreated {
		f.t.Fatalf("async_predict: %d %s", a.status, a.body)
	}
	id, _ := a.json(f.t)["request_id"].(string)
	if id == "" {
		f.t.Fatalf("no request_id in %s", a.body)
	}
	return id
}

func (f *fx) status(id string) async.Status {
	f.t.Helper()
	a := f.do(http.MethodGet, "/models/sentiment/async_request/"+id, "Bearer "+f.keys["invoke"], nil)
	if a.status != http.StatusOK {
		f.t.Fatalf("status of %s: %d %s", id, a.status, a.body)
	}
	var s async.Status
	if err := json.Unmarshal(a.body, &s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// waitStored waits, reading the store (not the rate-limited route), until id's record satisfies ok.
func (f *fx) waitStored(id string, ok func(*queue.Request) bool) *queue.Request {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var r *queue.Request
	for time.Now().Before(deadline) {
		var err error
		if r, err = f.store.Get(context.Background(), id); err == nil && ok(r) {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatalf("request %s never reached the wanted state; last %+v", id, r)
	return nil
}

func terminal(r *queue.Request) bool {
	return r.Terminal() && r.WebhookStatus != queue.HookPending
}

// backends runs f on the embedded store and on Redis standalone, Sentinel and Cluster.
func backends(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range append([]string{"bolt"}, redisBackends()...) {
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

func redisBackends() []string {
	var out []string
	for _, mode := range redistest.Modes {
		out = append(out, "redis-"+mode)
	}
	return out
}

// TestSucceeded: with and without a webhook, on both backends. The model gets model_input as its JSON body; the
// webhook gets the payload of docs/rest-api.md ("Async inference") with the model's answer as data, signed;
// the output is dropped once delivered.
func TestSucceeded(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		f := newFx(t, fxOpts{backend: backend, config: async.Config{AllowInternalWebhooks: true}})
		rc := newReceiver(t, func(int) bool { return false })
		plain := f.enqueue(`{"model_input": {"text": "no hook"}}`)
		hooked := f.enqueue(`{"model_input": {"text": "hook"}, "webhook_endpoint": "` + rc.srv.URL + `/hook"}`)
		f.waitStored(plain, terminal)
		r := f.waitStored(hooked, terminal)
		if r.Output != nil {
			t.Fatalf("output kept after delivery: %s", r.Output)
		}
		for id, hook := range map[string]string{plain: queue.HookNone, hooked: queue.HookSucceeded} {
			s := f.status(id)
			if s.Status != queue.Succeeded || s.WebhookStatus != hook || len(s.Errors) != 0 || s.ModelID != "sentiment" || s.DeploymentID != "v1" ||
				s.CreatedAt.IsZero() || s.StatusAt.Before(s.CreatedAt) {
				t.Fatalf("status of %s: %+v", id, s)
			}
		}
		calls := f.model.calls()
		if len(calls) != 2 || !strings.Contains(strings.Join(calls, " "), `{"text": "no hook"}`) {
			t.Fatalf("model calls %q", calls)
		}
		_, got, bad := rc.snapshot()
		p, ok := got[hooked]
		if !ok || bad != 0 || p.Type != "async_request_completed" || p.ModelID != "sentiment" || p.DeploymentID != "v1" ||
			string(p.Data) != `{"echo":{"text":"hook"}}` || len(p.Errors) != 0 || p.Time.IsZero() {
			t.Fatalf("webhook payload %+v (bad signatures %d)", p, bad)
		}
		// The raw GET answer carries exactly the status object's fields (docs/rest-api.md "Async inference").
		a := f.do(http.MethodGet, "/models/sentiment/async_request/"+plain, "Api-Key "+f.keys["invoke"], nil)
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(a.body, &raw)
		for _, k := range []string{"request_id", "model_id", "deployment_id", "status", "webhook_status", "created_at", "status_at", "errors"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("status object lacks %s: %s", k, a.body)
			}
		}
		if string(raw["errors"]) != "[]" {
			t.Errorf("errors = %s, want []", raw["errors"])
		}
		if n := f.waitMetric(1, "modelgate_async_webhook_deliveries_total", "outcome", "delivered"); n != 1 {
			t.Errorf("delivered webhooks metric %v, want 1", n)
		}
		if n := f.waitMetric(2, "modelgate_async_duration_seconds", "namespace", f.ns, "deployment", "v1", "status", "SUCCEEDED"); n != 2 {
			t.Errorf("duration samples %v, want 2", n)
		}
		if n := f.waitMetric(2, "modelgate_async_time_in_queue_seconds", "deployment", "v1"); n != 2 {
			t.Errorf("time-in-queue samples %v, want 2", n)
		}
		if n := f.waitMetric(2, "modelgate_async_requests_accepted_total", "namespace", f.ns, "deployment", "v1"); n != 2 {
			t.Errorf("accepted %v, want 2", n)
		}
	})
}

// TestFailedAfterMaxAttempts: a model that always answers 500 is called exactly max_attempts times.
func TestFailedAfterMaxAttempts(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		f := newFx(t, fxOpts{backend: backend, model: func(_ int, _ []byte, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":"boom"}`))
		}})
		id := f.enqueue(`{"model_input": 1, "inference_retry_config": {"max_attempts": 4, "initial_delay_ms": 1, "max_delay_ms": 5}}`)
		r := f.waitStored(id, terminal)
		if r.Status != queue.Failed || r.Attempts != 4 || len(r.Errors) != 1 || r.Errors[0].Code != queue.CodePredictError {
			t.Fatalf("request %+v", r)
		}
		if n := len(f.model.calls()); n != 4 {
			t.Fatalf("model called %d times, want exactly 4", n)
		}
		if s := f.status(id); s.Status != queue.Failed || s.Errors[0].Code != "MODEL_PREDICT_ERROR" {
			t.Fatalf("status %+v", s)
		}
	})
}

// TestRetryThenSucceed: 503 then 502 then 200 succeeds on the third attempt; a 4xx fails at once as invalid input.
func TestRetryThenSucceedAndInvalidInput(t *testing.T) {
	f := newFx(t, fxOpts{model: func(n int, body []byte, w http.ResponseWriter) {
		switch {
		case bytes.Contains(body, []byte("bad")):
			w.WriteHeader(http.StatusUnprocessableEntity)
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case n == 2:
			w.WriteHeader(http.StatusBadGateway)
		default:
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}})
	id := f.enqueue(`{"model_input": 1, "inference_retry_config": {"initial_delay_ms": 1, "max_delay_ms": 2}}`)
	if r := f.waitStored(id, terminal); r.Status != queue.Succeeded || r.Attempts != 3 || len(r.Errors) != 0 {
		t.Fatalf("request %+v", r)
	}
	bad := f.enqueue(`{"model_input": "bad"}`)
	if r := f.waitStored(bad, terminal); r.Status != queue.Failed || r.Attempts != 1 || r.Errors[0].Code != queue.CodeInvalidInput {
		t.Fatalf("invalid input %+v", r)
	}
}
