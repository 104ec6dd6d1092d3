package gatewayd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/jaegertest"
	"github.com/modelgate/modelgate/test/upstream"
)

// TestTraces runs a gatewayd with tracing on (sampler always_on, OTLP over gRPC) against a real Jaeger, makes a
// call that succeeds, one that fails over from a refusing target to the next, and one a limit refuses, each under
// a client's traceparent, and reads every trace back through Jaeger's query API (docs/operations.md "Traces").
func TestTraces(t *testing.T) {
	j := jaegertest.Run(t)
	service := "gatewayd-" + strings.ToLower(rand.Text()[:8])
	// The OTLP/HTTP exporter reaches the same Jaeger: one span, read back at the end.
	httpTr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolHTTP,
		Endpoint: j.OTLPHTTP, Sampler: "always_on", Service: service + "-http"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := httpTr.Start(context.Background(), "http exporter", 0)
	span.End()
	if err := httpTr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
		Endpoint: j.OTLPGRPC, Sampler: "always_on", Service: service})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })

	const failSlug, limitedSlug = "demo/failover", "demo/limited"
	// A second upstream answers the failed-over call and the limited slug.
	second := upstream.New(upstream.Options{})
	t.Cleanup(second.Close)
	refusing := snapshot.Target{Name: "refusing", Provider: "OPENAI", BaseURL: refusedURL, Priority: 1}
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", tracer: tr,
		groups: []gatewaytest.Group{{ID: "root", Models: append(models(slug, failSlug),
			limited(limitedSlug, gatewayv1.LimitType("REQUEST"), gatewayv1.LimitUnit("MINUTE"), 1))}},
		endpoints: []snapshot.Endpoint{
			endpoint(failSlug, []snapshot.Target{refusing, {Name: "answering", Provider: "OPENAI", BaseURL: second.BaseURL(), Priority: 2,
				TargetModel: "echo-small", APIKeySecret: &snapshot.SecretRef{Name: "upstream", Key: "api_key"}}}, attempts(1), nil),
			{ID: "limited", Slug: limitedSlug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: second.BaseURL(), TargetModel: "echo-large"}}},
		}})
	key := f.keys["root"]

	call := func(model string) (result, string, string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hello world"}}})
		return tracedPost(t, f.url+"/v1/chat/completions", key, b)
	}
	ok, okTrace, okParent := call(slug)
	if ok.status != http.StatusOK {
		t.Fatalf("call: %d %s", ok.status, ok.body)
	}
	// The upstream's request carries a traceparent of the same trace, naming the try's span as its parent.
	last, _ := f.upstream.Last()
	upTP := last.Header.Get("traceparent")
	if parts := strings.Split(upTP, "-"); len(parts) != 4 || parts[1] != okTrace || parts[2] == okParent {
		t.Fatalf("upstream received traceparent %q; want trace %s under a span of gatewayd's", upTP, okTrace)
	}
	failed, failTrace, _ := call(failSlug)
	if failed.status != http.StatusOK {
		t.Fatalf("failover call: %d %s", failed.status, failed.body)
	}
	if r, _, _ := call(limitedSlug); r.status != http.StatusOK {
		t.Fatalf("first limited call: %d %s", r.status, r.body)
	}
	refused, refusedTrace, _ := call(limitedSlug)
	if refused.status != http.StatusTooManyRequests {
		t.Fatalf("second limited call: %d %s; want 429", refused.status, refused.body)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	prefix := f.snap.APIKeys[0].Prefix
	common := map[string]string{
		tracing.OperationName: "chat", tracing.Workspace: f.ns, tracing.Group: "ext-root", tracing.KeyPrefix: prefix,
	}

	// A call that succeeds: the server span under the client's span, one try under it.
	spans := waitSpans(t, j, okTrace, 2)
	server := only(t, spans, "server", "chat "+slug)
	if server.Parent() != okParent {
		t.Errorf("server span's parent = %q, want the client's span %s", server.Parent(), okParent)
	}
	wantTags(t, server, common, map[string]string{
		tracing.ProviderName: "OPENAI", tracing.RequestModel: slug, tracing.ResponseModel: "echo-large",
		tracing.InputTokens: "2", tracing.OutputTokens: "5", "http.response.status_code": "200", tracing.Attempts: "1",
		tracing.RequestID: ok.header.Get("X-Request-Id"),
	})
	try := only(t, spans, "client", "chat echo-large")
	if try.Parent() != server.SpanID || !strings.Contains(upTP, try.SpanID) {
		t.Errorf("try span %s (parent %s) is not under the server span %s, or not the upstream's parent (%s)", try.SpanID, try.Parent(), server.SpanID, upTP)
	}
	wantTags(t, try, map[string]string{
		tracing.OperationName: "chat", tracing.ProviderName: "OPENAI", tracing.RequestModel: "echo-large", tracing.Target: "",
		tracing.Outcome: "ok", tracing.Attempt: "1", "server.address": "127.0.0.1", "http.response.status_code": "200",
		tracing.InputTokens: "2", tracing.OutputTokens: "5",
	}, nil)

	// A call that fails over: two tries, the refused one first, judged unreachable, then the answer.
	spans = waitSpans(t, j, failTrace, 3)
	server = only(t, spans, "server", "chat "+failSlug)
	wantTags(t, server, common, map[string]string{tracing.Attempts: "2", tracing.ResponseModel: "echo-small", "http.response.status_code": "200"})
	var refusedTry, answered jaegertest.Span
	for _, s := range spans {
		switch s.Tag(tracing.Target) {
		case "refusing":
			refusedTry = s
		case "answering":
			answered = s
		}
	}
	wantTags(t, refusedTry, map[string]string{tracing.Outcome: "unreachable", tracing.Attempt: "1", "server.address": "127.0.0.1",
		"server.port": "1", "error.type": "unreachable"}, nil)
	wantTags(t, answered, map[string]string{tracing.Outcome: "ok", tracing.Attempt: "2", "http.response.status_code": "200",
		tracing.RequestModel: "echo-small"}, nil)
	if refusedTry.Parent() != server.SpanID || answered.Parent() != server.SpanID {
		t.Errorf("the tries' parents are %q and %q, want the server span %s", refusedTry.Parent(), answered.Parent(), server.SpanID)
	}
	if refusedTry.StartTime > answered.StartTime {
		t.Error("the answering try started before the refused one")
	}

	// A call a limit refuses: the server span names the limit, and no try was made.
	spans = waitSpans(t, j, refusedTrace, 1)
	server = only(t, spans, "server", "chat "+limitedSlug)
	wantTags(t, server, common, map[string]string{"http.response.status_code": "429", tracing.LimitBy: billing.RefusedByGroup,
		tracing.LimitType: "REQUEST", tracing.LimitUnit: "MINUTE", tracing.LimitSource: "root"})
	if server.HasTag(tracing.ProviderName) || server.HasTag(tracing.Attempts) {
		t.Errorf("a refused call's span has try attributes: %+v", server.Tags)
	}

	// Nothing of the key or the upstream's Secret in any span, nor in the process's tags.
	traces, err := j.Traces(service, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) < 4 {
		t.Fatalf("%d traces of %s, want the 4 calls'", len(traces), service)
	}
	for _, tc := range traces {
		b, _ := json.Marshal(tc)
		for _, secret := range []string{key, upstreamKey, key[len(prefix):]} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("trace %s holds a secret (%q...)", tc.TraceID, secret[:4])
			}
		}
	}
	if traces, err := j.Traces(service+"-http", 10); err != nil || len(traces) != 1 || traces[0].Spans[0].OperationName != "http exporter" {
		t.Errorf("the span sent over OTLP/HTTP: %+v, %v", traces, err)
	}
}

// tracedPost posts a JSON body to url with key in the Api-Key scheme and a traceparent of its own, and returns the
// answer with the trace id and the parent span id that traceparent named.
func tracedPost(t *testing.T, url, key string, body []byte) (result, string, string) {
	t.Helper()
	tp, traceID, spanID := jaegertest.TraceParent()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Api-Key "+key)
	req.Header.Set("traceparent", tp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: out}, traceID, spanID
}

// waitSpans waits until Jaeger holds at least n spans of trace id and returns them.
func waitSpans(t *testing.T, j *jaegertest.Jaeger, id string, n int) []jaegertest.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tc, err := j.Trace(id)
		if err == nil && len(tc.Spans) >= n {
			if len(tc.Spans) != n {
				t.Errorf("trace %s has %d spans, want %d", id, len(tc.Spans), n)
			}
			return tc.Spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans after 30s, want %d (%v)", id, len(tc.Spans), n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// only is the one span of kind (server, client) named name.
func only(t *testing.T, spans []jaegertest.Span, kind, name string) jaegertest.Span {
	t.Helper()
	var out []jaegertest.Span
	var names []string
	for _, s := range spans {
		names = append(names, s.OperationName)
		if s.OperationName == name && s.Tag("span.kind") == kind {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d %s spans named %q among %q, want one", len(out), kind, name, names)
	}
	return out[0]
}

// wantTags checks span's tags: each of want (an empty value: present, any value) and of more.
func wantTags(t *testing.T, span jaegertest.Span, want, more map[string]string) {
	t.Helper()
	for _, m := range []map[string]string{want, more} {
		for k, v := range m {
			got := span.Tag(k)
			if !span.HasTag(k) || (v != "" && got != v) {
				t.Errorf("span %q: %s = %q, want %q", span.OperationName, k, got, v)
			}
		}
	}
	if t.Failed() {
		t.Logf("span %q tags: %+v", span.OperationName, span.Tags)
	}
}

// TestTraceparentReachesATranslatingProvider: a try of an ANTHROPIC target, whose provider sends a copy of the
// call's headers with its own (anthropic-version), carries the try's traceparent too, in the client's trace.
func TestTraceparentReachesATranslatingProvider(t *testing.T) {
	j := jaegertest.Run(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
		Endpoint: j.OTLPGRPC, Sampler: "always_on", Service: "gatewayd-" + strings.ToLower(rand.Text()[:8])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	claude := newAnthropicFake(t)
	claude.set(200, "application/json", anthropicGolden(t, "answer.anthropic.json"))
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", tracer: tr, groups: []gatewaytest.Group{{ID: "root", Models: models("chat/claude")}},
		endpoints: []snapshot.Endpoint{endpoint("chat/claude", []snapshot.Target{anthropicTarget("claude", claude, 0)}, nil, nil)}})
	tp, traceID, spanID := jaegertest.TraceParent()
	r := f.send("/v1/chat/completions", map[string]string{"Authorization": "Api-Key " + f.keys["root"], "traceparent": tp},
		map[string]any{"model": "chat/claude", "messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	if r.status != http.StatusOK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	claude.mu.Lock()
	got := claude.traceparent
	claude.mu.Unlock()
	if parts := strings.Split(got, "-"); len(parts) != 4 || parts[1] != traceID || parts[2] == spanID {
		t.Fatalf("the ANTHROPIC upstream received traceparent %q; want trace %s under a span of gatewayd's", got, traceID)
	}
}

// TestPredictTraces: a predict call under a client's traceparent gets a server span, "predict", in that trace and
// under the client's span, with the workspace, the model, the deployment, the key prefix, the request id and the
// status; the model server receives a traceparent of the same trace naming that span; no span holds the key. A
// call the route refuses (an unknown model) gets its span too, without a model or a deployment.
func TestPredictTraces(t *testing.T) {
	j := jaegertest.Run(t)
	service := "gatewayd-" + strings.ToLower(rand.Text()[:8])
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
		Endpoint: j.OTLPGRPC, Sampler: "always_on", Service: service})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	f := newModelFixtureOpts(t, fixtureOpts{tracer: tr})
	// The production deployment's server records the traceparent it receives.
	received := make(chan string, 1)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- r.Header.Get("traceparent")
		_, _ = w.Write([]byte(`{"label":"positive"}`))
	}))
	t.Cleanup(model.Close)
	f.deployment("v1").URL = model.URL
	f.publish()

	key := f.keys["invoke"]
	body := []byte(`{"text":"hi"}`)
	answered, traceID, parent := tracedPost(t, f.url+"/models/sentiment/production/predict", key, body)
	if answered.status != http.StatusOK {
		t.Fatalf("predict: %d %s", answered.status, answered.body)
	}
	upTP := <-received
	missing, missingTrace, _ := tracedPost(t, f.url+"/models/nope/production/predict", key, body)
	if missing.status != http.StatusNotFound {
		t.Fatalf("predict of an unknown model: %d, want 404", missing.status)
	}
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	var prefix string
	for _, k := range f.snap.WorkspaceAPIKeys {
		if strings.HasPrefix(key, k.Prefix) && len(k.Prefix) > len(prefix) {
			prefix = k.Prefix
		}
	}
	server := only(t, waitSpans(t, j, traceID, 1), "server", "predict")
	if server.Parent() != parent {
		t.Errorf("the predict span's parent = %q, want the client's span %s", server.Parent(), parent)
	}
	wantTags(t, server, map[string]string{
		tracing.Workspace: f.ns, tracing.RequestModel: "sentiment", tracing.Deployment: "v1", tracing.KeyPrefix: prefix,
		tracing.RequestID: answered.header.Get("X-Request-Id"), "http.response.status_code": "200",
	}, nil)
	if parts := strings.Split(upTP, "-"); len(parts) != 4 || parts[1] != traceID || parts[2] != server.SpanID {
		t.Errorf("the model server received traceparent %q; want trace %s under the predict span %s", upTP, traceID, server.SpanID)
	}
	refused := only(t, waitSpans(t, j, missingTrace, 1), "server", "predict")
	wantTags(t, refused, map[string]string{tracing.Workspace: f.ns, tracing.KeyPrefix: prefix, "http.response.status_code": "404"}, nil)
	if refused.HasTag(tracing.RequestModel) || refused.HasTag(tracing.Deployment) {
		t.Errorf("the refused call's span names a model or a deployment: %+v", refused.Tags)
	}
	for _, id := range []string{traceID, missingTrace} {
		tc, err := j.Trace(id)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(tc); bytes.Contains(b, []byte(key[len(prefix):])) {
			t.Errorf("trace %s holds the key", id)
		}
	}
}
