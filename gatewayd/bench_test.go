package gatewayd_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/jaegertest"
	"github.com/modelgate/modelgate/test/testutil"
	"github.com/modelgate/modelgate/test/upstream"
)

// benchGateway serves, through a gatewayd, the fake upstream as the slug of a CASCADING group with a 4-limit plan
// (federated key) and as the production deployment of model "bench" (a url deployment with predict path
// /chat/completions, workspace key of type WORKSPACE_INVOKE), so the OpenAI route and /production/predict carry
// the same body to the same server. It returns gatewayd's URL, the upstream's base URL and the two keys.
func benchGateway(b *testing.B) (url, upstreamURL, key, invoke string) {
	return benchGatewayTraced(b, nil)
}

// benchGatewayTraced is benchGateway with gatewayd tracing into tr (none when nil).
func benchGatewayTraced(b *testing.B, tr *tracing.Tracer) (url, upstreamURL, key, invoke string) {
	kube.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	up := upstream.New(upstream.Options{})
	b.Cleanup(up.Close)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "bench")
	if err != nil {
		b.Fatal(err)
	}
	big := int64(1) << 50
	var models []gatewayv1.ModelConfig
	for _, sl := range []string{slug, twoTargetSlug} {
		models = append(models, gatewayv1.ModelConfig{Slug: sl,
			RateLimits:  []gatewayv1.Limit{{Type: "REQUEST", Unit: "SECOND", Threshold: big}, {Type: "TOKEN", Unit: "MINUTE", Threshold: big}},
			UsageLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "DAY", Threshold: big}, {Type: "TOKEN", Unit: "DAY", Threshold: big}},
		})
	}
	s := gatewaytest.Snapshot(ns, "CASCADING", []gatewaytest.Group{{ID: "root", Models: models}})
	key, rec := gatewaytest.NewKey("k", "root")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: slug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: up.BaseURL()}}},
		// The same upstream twice, weighted 3 to 1: what choosing between two targets costs (docs/routing.md).
		{ID: "two", Slug: twoTargetSlug, Targets: []snapshot.Target{{Name: "a", Provider: "OPENAI", BaseURL: up.BaseURL(), Weight: 3},
			{Name: "b", Provider: "OPENAI", BaseURL: up.BaseURL(), Weight: 1}}}}
	invoke, invokeRec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	s.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{invokeRec}
	s.Models = []snapshot.ServedModel{{ID: "bench", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "v1"}}}}
	s.Deployments = []snapshot.Deployment{{ID: "v1", ModelID: "bench", Kind: snapshot.DeploymentURL, URL: up.BaseURL(),
		PredictPath: "/chat/completions", Active: true, Ready: true}}
	if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
		b.Fatal(err)
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: cfg, Namespaces: []string{ns}, Tracer: tr})
	if err != nil {
		b.Fatal(err)
	}
	url, err = gatewaytest.Serve(ctx, gw)
	if err != nil {
		b.Fatal(err)
	}
	if err := gatewaytest.WaitReady(gw, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	return url, up.BaseURL(), key, invoke
}

// twoTargetSlug is the benchmarks' Endpoint of two targets.
const twoTargetSlug = "bench/two"

var (
	benchBody    = []byte(`{"model":"` + slug + `","messages":[{"role":"user","content":"hello world"}]}`)
	benchTwoBody = []byte(`{"model":"` + twoTargetSlug + `","messages":[{"role":"user","content":"hello world"}]}`)
)

// benchCall sends benchBody to target with auth on c and reads the answer.
func benchCall(b *testing.B, c *http.Client, target, auth string) {
	benchCallOf(b, c, target, auth, benchBody)
}

// benchCallOf sends body to target with auth on c and reads the answer.
func benchCallOf(b *testing.B, c *http.Client, target, auth string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status %d", resp.StatusCode)
	}
}

// BenchmarkProxyOverhead compares a non-streamed chat completion sent straight to the fake upstream with the
// same call through gatewayd (auth, a 4-limit plan, forwarding, usage settling, metrics). The difference is
// gatewayd's added latency over loopback. predict sends the same body to the same server through
// /models/bench/production/predict: auth, authz, the route step, the request log and the streamed forward.
func BenchmarkProxyOverhead(b *testing.B) {
	url, upstreamURL, key, invoke := benchGateway(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			benchCall(b, http.DefaultClient, upstreamURL+"/chat/completions", "Bearer x")
		}
	})
	b.Run("gatewayd", func(b *testing.B) {
		for b.Loop() {
			benchCall(b, http.DefaultClient, url+"/v1/chat/completions", "Api-Key "+key)
		}
	})
	b.Run("predict", func(b *testing.B) {
		for b.Loop() {
			benchCall(b, http.DefaultClient, url+"/models/bench/production/predict", "Api-Key "+invoke)
		}
	})
	b.Run("gatewayd-two-targets", func(b *testing.B) {
		for b.Loop() {
			benchCallOf(b, http.DefaultClient, url+"/v1/chat/completions", "Api-Key "+key, benchTwoBody)
		}
	})
}

// BenchmarkRouteCPU drives the OpenAI route and /production/predict with 16 concurrent callers per core and
// reports, besides the wall time, the CPU time of the whole process per call (cpu-ns/op: client, gatewayd and
// fake upstream). On a shared machine the wall time swings with the neighbours' load; the CPU per call barely
// does, so it is the figure to compare the two routes' cost by. Run the sub-benchmarks several times
// (-count) to interleave them.
func BenchmarkRouteCPU(b *testing.B) {
	url, _, key, invoke := benchGateway(b)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		name, path, auth string
		body             []byte
	}{
		{"openai", "/v1/chat/completions", "Api-Key " + key, benchBody},
		{"predict", "/models/bench/production/predict", "Api-Key " + invoke, benchBody},
		{"openai-two-targets", "/v1/chat/completions", "Api-Key " + key, benchTwoBody},
	} {
		b.Run(tc.name, func(b *testing.B) {
			before, gcs := testutil.ProcessCPU(), gcCycles()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchCallOf(b, c, url+tc.path, tc.auth, tc.body)
				}
			})
			b.ReportMetric(float64(testutil.ProcessCPU()-before)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(gcCycles()-gcs)*1000/float64(b.N), "gc/1k-op")
		})
	}
}

// BenchmarkTracing compares the OpenAI route of a gatewayd with tracing off with that of a gatewayd tracing 1% of
// its calls (parentbased_traceidratio 0.01, as the chart's default) into a real Jaeger on loopback over OTLP/gRPC:
// the same load as BenchmarkRouteCPU, 16 callers per core. Run it with -count to interleave the two
// (docs/benchmarks.md "Tracing"): throughput is 1/ns/op, and allocs/op shows what an unsampled call costs.
func BenchmarkTracing(b *testing.B) {
	j := jaegertest.Run(b)
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
		Endpoint: j.OTLPGRPC, Sampler: "parentbased_traceidratio", SamplerArg: "0.01", Service: "gatewayd-bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	tp := http.DefaultTransport.(*http.Transport).Clone()
	tp.MaxIdleConnsPerHost = 256
	c := &http.Client{Transport: tp}
	offURL, _, offKey, _ := benchGatewayTraced(b, nil)
	onURL, _, onKey, _ := benchGatewayTraced(b, tr)
	for _, tc := range []struct{ name, url, key string }{
		{"off", offURL, offKey},
		{"sampled-1pct", onURL, onKey},
	} {
		b.Run(tc.name, func(b *testing.B) {
			before := testutil.ProcessCPU()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchCallOf(b, c, tc.url+"/v1/chat/completions", "Api-Key "+tc.key, benchBody)
				}
			})
			b.ReportMetric(float64(testutil.ProcessCPU()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// gcCycles is the number of garbage collections this process has completed: per call, the figure GOGC and
// GOMEMLIMIT move (docs/benchmarks.md).
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
