// Package anthropic_test runs the official @anthropic-ai/sdk npm client against a real gatewayd (envtest
// snapshot, fake OpenAI-compatible upstream) on /v1/messages: a plain call with the key as x-api-key, one with it
// as a Bearer token, a streamed call, and an error the client reads as its own.
package anthropic_test

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

func TestAnthropicNodeClient(t *testing.T) {
	node := gatewaytest.NodeWithPackage(t, "@anthropic-ai/sdk")
	env := kubetest.StartTest(t, kubetest.Options{CRDs: true})
	cs := env.Clientset
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	up := upstream.New(upstream.Options{StreamDeltas: 3, CompletionTokens: 4})
	t.Cleanup(up.Close)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "anthropic")
	if err != nil {
		t.Fatal(err)
	}
	const slug = "demo/echo"
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{Slug: slug}}}})
	key, rec := gatewaytest.NewKey("acme-key", "acme")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{{ID: "echo", Slug: slug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: up.BaseURL()}}}}
	url, err := gatewaytest.ServeSnapshot(ctx, cs, env.Config, s)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, node, "client.mjs")
	env2 := []string{"GATEWAY_URL=" + url, "GATEWAY_KEY=" + key, "MODEL=" + slug}
	for _, kv := range os.Environ() {
		// The client reads these itself; the test's own must not reach it.
		if !strings.HasPrefix(kv, "ANTHROPIC_") {
			env2 = append(env2, kv)
		}
	}
	cmd.Env = env2
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client.mjs failed: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	type usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	}
	var got struct {
		Plain struct {
			Type, Text, StopReason string
			Usage                  usage
		}
		Bearer struct{ Text string }
		Stream struct {
			Text, FinalText, StopReason string
			Events                      []string
			Usage                       usage
		}
		Missing struct {
			Status   int
			Type     string
			NotFound bool
		}
	}
	t.Logf("anthropic client saw: %s", out)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output is not JSON: %v: %s", err, out)
	}
	const answer = "tok tok tok "
	if got.Plain.Type != "message" || got.Plain.Text != answer || got.Plain.StopReason != "end_turn" || got.Plain.Usage.InputTokens <= 0 || got.Plain.Usage.OutputTokens != 4 {
		t.Errorf("plain call: %+v", got.Plain)
	}
	if got.Bearer.Text != answer {
		t.Errorf("call with a Bearer token: %+v", got.Bearer)
	}
	ev := got.Stream.Events
	if got.Stream.Text != "tok0 tok1 tok2 " || got.Stream.FinalText != got.Stream.Text || got.Stream.StopReason != "end_turn" ||
		got.Stream.Usage.OutputTokens != 4 || got.Stream.Usage.InputTokens <= 0 ||
		len(ev) < 6 || ev[0] != "message_start" || ev[len(ev)-2] != "message_delta" || ev[len(ev)-1] != "message_stop" {
		t.Errorf("streamed call: %+v", got.Stream)
	}
	if got.Missing.Status != 404 || got.Missing.Type != "not_found_error" || !got.Missing.NotFound {
		t.Errorf("unknown model: %+v", got.Missing)
	}
	for _, r := range up.Requests() {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			t.Errorf("upstream received the client's key; it must only get the Endpoint's own")
		}
	}
}
