package gatewayd_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/upstream"
)

// BenchmarkProxyOverhead compares a non-streamed chat completion sent straight to the fake upstream with the
// same call through gatewayd (auth, a 5-limit plan, forwarding, usage settling, metrics). The difference is
// gatewayd's added latency over loopback. predict sends the same body to the same server through
// /models/{model_id}/production/predict with a workspace key (a url deployment with predict path
// /chat/completions): auth, authz, the route step, the request log and the streamed forward.
func BenchmarkProxyOverhead(b *testing.B) {
	startEnv(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	up := upstream.New(upstream.Options{})
	b.Cleanup(up.Close)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "bench")
	if err != nil {
		b.Fatal(err)
	}
	big := int64(1) << 50
	s := gatewaytest.Snapshot(ns, "CASCADING", []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{{Slug: slug,
		RateLimits:  []gatewayv1.Limit{{Type: "REQUEST", Unit: "SECOND", Threshold: big}, {Type: "TOKEN", Unit: "MINUTE", Threshold: big}},
		UsageLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "DAY", Threshold: big}, {Type: "TOKEN", Unit: "DAY", Threshold: big}},
	}}}})
	key, rec := gatewaytest.NewKey("k", "root")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: slug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: up.BaseURL()}}}}
	invoke, invokeRec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	s.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{invokeRec}
	s.Models = []snapshot.ServedModel{{ID: "bench", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "v1"}}}}
	s.Deployments = []snapshot.Deployment{{ID: "v1", ModelID: "bench", Kind: snapshot.DeploymentURL, URL: up.BaseURL(),
		PredictPath: "/chat/completions", Active: true, Ready: true}}
	if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
		b.Fatal(err)
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: cfg, Namespaces: []string{ns}})
	if err != nil {
		b.Fatal(err)
	}
	url, err := gatewaytest.Serve(ctx, gw)
	if err != nil {
		b.Fatal(err)
	}
	if err := gatewaytest.WaitReady(gw, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"` + slug + `","messages":[{"role":"user","content":"hello world"}]}`)
	call := func(b *testing.B, target, auth string) {
		req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			call(b, up.BaseURL()+"/chat/completions", "Bearer x")
		}
	})
	b.Run("gatewayd", func(b *testing.B) {
		for b.Loop() {
			call(b, url+"/v1/chat/completions", "Api-Key "+key)
		}
	})
	b.Run("predict", func(b *testing.B) {
		for b.Loop() {
			call(b, url+"/models/bench/production/predict", "Api-Key "+invoke)
		}
	})
}
