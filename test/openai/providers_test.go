package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// providerUpstream answers as Gemini (generateContent, its SSE stream, batchEmbedContents) or as Bedrock
// (Converse, its AWS event stream), by path: "Hello from <name>" in two pieces, 3 prompt and 4 completion tokens.
func providerUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, ":batchEmbedContents"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"embeddings":[{"values":[0.5,-0.25,1]},{"values":[0.125,2,-1]}]}`)
		case strings.HasSuffix(p, ":streamGenerateContent"):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"}}]}\r\n\r\n")
			w.(http.Flusher).Flush()
			fmt.Fprint(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" from Gemini\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":4,\"totalTokenCount\":7}}\r\n\r\n")
		case strings.HasSuffix(p, ":generateContent"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"candidates":[{"content":{"parts":[{"text":"Hello from Gemini"}],"role":"model"},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"totalTokenCount":7}}`)
		case strings.HasSuffix(p, "/converse-stream"):
			w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
			var b bytes.Buffer
			enc := eventstream.NewEncoder()
			for _, e := range [][2]string{{"messageStart", `{"role":"assistant"}`}, {"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hello"}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" from Bedrock"}}`}, {"contentBlockStop", `{"contentBlockIndex":0}`},
				{"messageStop", `{"stopReason":"max_tokens"}`}, {"metadata", `{"usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}`}} {
				msg := eventstream.Message{Payload: []byte(e[1])}
				msg.Headers.Set(":message-type", eventstream.StringValue("event"))
				msg.Headers.Set(":event-type", eventstream.StringValue(e[0]))
				msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
				if err := enc.Encode(&b, msg); err != nil {
					t.Error(err)
				}
			}
			_, _ = w.Write(b.Bytes())
		case strings.HasSuffix(p, "/converse"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"output":{"message":{"role":"assistant","content":[{"text":"Hello from Bedrock"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestOpenAINodeClientProviders: the official openai npm client calls GEMINI and BEDROCK targets through
// gatewayd, plainly and streamed, and GEMINI's embeddings (as base64, the client's default, which it decodes),
// and reads OpenAI's answers: the text, the finish reason, the usage.
func TestOpenAINodeClientProviders(t *testing.T) {
	node := gatewaytest.NodeWithPackage(t, "openai")
	env := kubetest.StartTest(t, kubetest.Options{CRDs: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	up := providerUpstream(t)
	ns, err := gatewaytest.CreateNamespace(ctx, env.Clientset, "providers")
	if err != nil {
		t.Fatal(err)
	}
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{Slug: "gemini"}, {Slug: "bedrock"}}}})
	key, rec := gatewaytest.NewKey("acme-key", "acme")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{
		{ID: "gemini", Slug: "gemini", Targets: []snapshot.Target{{Provider: "GEMINI", BaseURL: up.URL + "/v1beta", TargetModel: "gemini-2.0-flash"}}},
		{ID: "bedrock", Slug: "bedrock", Targets: []snapshot.Target{{Provider: "BEDROCK", BaseURL: up.URL, TargetModel: "anthropic.claude-3-haiku-20240307-v1:0", Region: "us-east-1"}}},
	}
	if err := gatewaytest.Publish(ctx, env.Clientset, s, 1, 0); err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: env.Config, Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	url, err := gatewaytest.Serve(ctx, gw)
	if err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.WaitReady(gw, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "providers.mjs")
	cmd.Env = append(os.Environ(), "GATEWAY_URL="+url, "GATEWAY_KEY="+key, "MODELS=gemini,bedrock", "EMBED=gemini")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("providers.mjs failed: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	type usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	type answer struct {
		Content string
		Finish  string
		Usage   *usage
	}
	var got map[string]struct {
		Plain, Stream answer
		Embeddings    [][]float64
	}
	t.Logf("openai client saw: %s", out)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output is not JSON: %v: %s", err, out)
	}
	for model, want := range map[string]struct{ text, plainFinish, streamFinish string }{
		"gemini":  {"Hello from Gemini", "length", "stop"},
		"bedrock": {"Hello from Bedrock", "stop", "length"},
	} {
		g := got[model]
		for _, a := range []struct {
			name   string
			a      answer
			finish string
		}{{"plain", g.Plain, want.plainFinish}, {"stream", g.Stream, want.streamFinish}} {
			if a.a.Content != want.text || a.a.Finish != a.finish || a.a.Usage == nil || *a.a.Usage != (usage{3, 4}) {
				t.Errorf("%s %s: %+v, want %q, finish %s, usage 3+4", model, a.name, a.a, want.text, a.finish)
			}
		}
	}
	if e := got["gemini"].Embeddings; !reflect.DeepEqual(e, [][]float64{{0.5, -0.25, 1}, {0.125, 2, -1}}) {
		t.Errorf("embeddings %v: the client did not decode the floats Gemini sent", e)
	}
}
