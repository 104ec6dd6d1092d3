package async_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/test/jaegertest"
)

// TestTraces: an async request traced into a real Jaeger, on both backends: the span that accepted it under the
// client's traceparent, and under that span its wait in the queue, its dispatch (whose traceparent the model
// server receives) and its webhook delivery, whose span names the webhook's host and never its path or query
// (docs/operations.md "Traces").
func TestTraces(t *testing.T) {
	j := jaegertest.Run(t)
	backends(t, func(t *testing.T, backend string) {
		service := "gatewayd-async-" + strings.ReplaceAll(backend, "/", "-")
		tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
			Endpoint: j.OTLPGRPC, Sampler: "always_on", Service: service})
		if err != nil {
			t.Fatal(err)
		}
		f := newFx(t, fxOpts{backend: backend, config: async.Config{AllowInternalWebhooks: true}, tracer: tr})
		rc := newReceiver(t, func(int) bool { return false })
		tp, traceID, clientSpan := jaegertest.TraceParent()
		const token = "hook-token-3f9a"
		body, _ := json.Marshal(map[string]any{"model_input": map[string]any{"text": "hi"}, "webhook_endpoint": rc.srv.URL + "/hook/" + token + "?t=" + token})
		req, _ := http.NewRequest(http.MethodPost, f.url+"/models/sentiment/production/async_predict", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Api-Key "+f.keys["invoke"])
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var accepted struct {
			RequestID string `json:"request_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&accepted)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || accepted.RequestID == "" {
			t.Fatalf("async_predict: %d", resp.StatusCode)
		}
		f.waitStored(accepted.RequestID, terminal)
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		var spans []jaegertest.Span
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			tc, err := j.Trace(traceID)
			if err == nil && len(tc.Spans) >= 4 {
				spans = tc.Spans
				b, _ := json.Marshal(tc)
				for _, secret := range []string{token, f.keys["invoke"], webhookSecret} {
					if bytes.Contains(b, []byte(secret)) {
						t.Errorf("the trace holds a secret: %q", secret)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace %s: %d spans, want 4 (%v)", traceID, len(tc.Spans), err)
			}
		}
		byName := map[string]jaegertest.Span{}
		for _, s := range spans {
			byName[s.OperationName] = s
		}
		accept := byName["async accept"]
		if accept.Parent() != clientSpan || accept.Tag("span.kind") != "server" {
			t.Errorf("async accept: parent %q kind %q, want the client's span %s, server", accept.Parent(), accept.Tag("span.kind"), clientSpan)
		}
		for name, kind := range map[string]string{"async accept": "server", "async queued": "internal", "async dispatch": "client", "async webhook": "client"} {
			s, ok := byName[name]
			if !ok {
				t.Errorf("no span %q among %+v", name, spans)
				continue
			}
			if s.Tag("span.kind") != kind || s.Tag(tracing.AsyncRequest) != accepted.RequestID || s.Tag(tracing.Deployment) != "v1" ||
				s.Tag(tracing.RequestModel) != "sentiment" || s.Tag(tracing.Workspace) != f.ns {
				t.Errorf("span %q: %+v; want kind %s and the request's attributes", name, s.Tags, kind)
			}
			if name != "async accept" && s.Parent() != accept.SpanID {
				t.Errorf("span %q is under %q, want the accepting span %s", name, s.Parent(), accept.SpanID)
			}
		}
		if s := byName["async dispatch"]; s.Tag("http.response.status_code") != "200" || s.Tag(tracing.Attempt) != "1" {
			t.Errorf("async dispatch: %+v", s.Tags)
		}
		if s := byName["async webhook"]; s.Tag("modelgate.webhook.outcome") != "delivered" || s.Tag("server.address") != "127.0.0.1" {
			t.Errorf("async webhook: %+v", s.Tags)
		}
		if s := byName["async accept"]; s.Tag(tracing.KeyPrefix) == "" || len(s.Tag(tracing.KeyPrefix)) != 16 {
			t.Errorf("async accept: key prefix %q, want the key's 16-character prefix", s.Tag(tracing.KeyPrefix))
		}
		f.model.mu.Lock()
		got := append([]string(nil), f.model.traceparents...)
		f.model.mu.Unlock()
		if d := byName["async dispatch"]; len(got) != 1 || !strings.Contains(got[0], traceID+"-"+d.SpanID) {
			t.Errorf("the model server received traceparents %q, want one of trace %s under the dispatch span %s", got, traceID, d.SpanID)
		}
	})
}
