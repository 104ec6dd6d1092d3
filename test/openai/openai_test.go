// Package openai_test runs the official openai npm client against a real gatewayd (envtest snapshot, fake
// upstream) to prove wire compatibility: a normal call, a streamed call and a readable 429.
package openai_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/upstream"
)

func TestOpenAINodeClient(t *testing.T) {
	node := gatewaytest.NodeWithPackage(t, "openai")
	env := kubetest.StartTest(t, kubetest.Options{CRDs: true})
	cs := env.Clientset
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	up := upstream.New(upstream.Options{StreamDeltas: 3, CompletionTokens: 4})
	t.Cleanup(up.Close)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "openai")
	if err != nil {
		t.Fatal(err)
	}
	const slug = "demo/echo"
	// Two requests per minute: the plain and the streamed call pass, the third gets 429.
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{
		Slug: slug, RateLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 2}}}}}})
	key, rec := gatewaytest.NewKey("acme-key", "acme")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{{ID: "echo", Slug: slug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: up.BaseURL()}}}}
	url, err := gatewaytest.ServeSnapshot(ctx, cs, env.Config, s)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Env = append(os.Environ(), "GATEWAY_URL="+url, "GATEWAY_KEY="+key, "MODEL="+slug)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client.mjs failed: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var got struct {
		Plain struct {
			Content string
			Usage   struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		Stream struct {
			Chunks      int
			Content     string
			UsageChunks int
		}
		Limited struct {
			Status           int
			Error            string
			RetryAfter       *string
			IsRateLimitError bool
		}
	}
	t.Logf("openai client saw: %s", out)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output is not JSON: %v: %s", err, out)
	}
	if got.Plain.Content == "" || got.Plain.Usage.PromptTokens != 5 || got.Plain.Usage.CompletionTokens != 4 {
		t.Errorf("plain call: %+v", got.Plain)
	}
	if got.Stream.Content != "tok0 tok1 tok2 " || got.Stream.UsageChunks != 0 {
		t.Errorf("streamed call: %+v (the usage chunk must be hidden: the client did not ask for it)", got.Stream)
	}
	if got.Limited.Status != 429 || !got.Limited.IsRateLimitError || !strings.Contains(got.Limited.Error, "Rate limit exceeded") ||
		got.Limited.RetryAfter == nil || *got.Limited.RetryAfter == "" {
		t.Errorf("third call: %+v, want a readable 429 with Retry-After", got.Limited)
	}
	for _, r := range up.Requests() {
		if a := r.Header.Get("Authorization"); a != "" {
			t.Errorf("upstream received the client's Authorization %q; it must only get the Endpoint's own key", a)
		}
	}
}
