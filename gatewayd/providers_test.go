package gatewayd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/testutil"
)

// anthropicGolden is a golden file of the ANTHROPIC translation: Anthropic's documented examples.
func anthropicGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("provider/anthropic/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// providerFake is a loopback upstream of another provider's wire: it checks each call's path, query and headers
// as the pinned shape says (docs/routing.md "Providers"), records its body, and answers what the test set.
type providerFake struct {
	t   *testing.T
	srv *httptest.Server
	// path and query each call must have; header holds the headers it must carry.
	path, query string
	header      map[string]string
	mu          sync.Mutex
	bodies      [][]byte
	traceparent string
	status      int
	contentType string
	answer      []byte
}

func newProviderFake(t *testing.T, path, query string, header map[string]string) *providerFake {
	p := &providerFake{t: t, path: path, query: query, header: header, status: 200, contentType: "application/json"}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *providerFake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	p.traceparent = r.Header.Get("traceparent")
	status, ct, answer := p.status, p.contentType, p.answer
	p.mu.Unlock()
	bad := ""
	if r.URL.Path != p.path || r.URL.RawQuery != p.query {
		bad = "path " + r.URL.String()
	}
	for h, v := range p.header {
		if r.Header.Get(h) != v {
			bad += " header " + h + "=" + r.Header.Get(h)
		}
	}
	if _, ok := p.header["Authorization"]; !ok && r.Header.Get("Authorization") != "" {
		bad += " an Authorization header"
	}
	if bad != "" {
		p.t.Errorf("the upstream got a call off its wire: %s", bad)
		http.Error(w, bad, http.StatusTeapot)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(status)
	if ct == "text/event-stream" {
		// Event by event, flushed, as Anthropic streams.
		for ev := range strings.SplitSeq(string(answer), "\n\n") {
			if ev != "" {
				_, _ = io.WriteString(w, ev+"\n\n")
				w.(http.Flusher).Flush()
			}
		}
		return
	}
	_, _ = w.Write(answer)
}

func (p *providerFake) set(status int, contentType string, answer []byte) {
	p.mu.Lock()
	p.status, p.contentType, p.answer = status, contentType, answer
	p.mu.Unlock()
}

func (p *providerFake) last() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) == 0 {
		return nil
	}
	return p.bodies[len(p.bodies)-1]
}

var upstreamSecret = &snapshot.SecretRef{Name: "upstream", Key: "api_key"}

func newAnthropicFake(t *testing.T) *providerFake {
	return newProviderFake(t, "/v1/messages", "", map[string]string{"X-Api-Key": upstreamKey, "Anthropic-Version": "2023-06-01"})
}

func anthropicTarget(name string, fake *providerFake, priority int32) snapshot.Target {
	return snapshot.Target{Name: name, Provider: "ANTHROPIC", BaseURL: fake.srv.URL + "/v1", TargetModel: "claude-sonnet-4-5",
		APIKeySecret: upstreamSecret, Priority: priority}
}

// sseData is the data of each server-sent event of an answer, and the event names.
func sseData(t *testing.T, body []byte) (data []string, names []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, n)
		}
	}
	return data, names
}

// TestProviderWires calls AZURE_OPENAI and ANTHROPIC targets through /v1/chat/completions against loopback
// fakes that check the pinned wire: path, query, headers and the body's shape (for ANTHROPIC, the request of
// Anthropic's documented example), and reads the translated answers, streams, errors and refusals back.
func TestProviderWires(t *testing.T) {
	azure := newProviderFake(t, "/openai/deployments/gpt-4o/chat/completions", "api-version=2024-10-21", map[string]string{"Api-Key": upstreamKey})
	azure.set(200, "application/json", []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"from azure"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	azureEmbed := newProviderFake(t, "/openai/deployments/gpt-4o/embeddings", "api-version=2024-10-21", map[string]string{"Api-Key": upstreamKey})
	azureEmbed.set(200, "application/json", []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"gpt-4o","usage":{"prompt_tokens":2,"total_tokens":2}}`))
	claude := newAnthropicFake(t)
	azureTarget := func(fake *providerFake) []snapshot.Target {
		return []snapshot.Target{{Name: "azure", Provider: "AZURE_OPENAI", BaseURL: fake.srv.URL, TargetModel: "gpt-4o", APIVersion: "2024-10-21", APIKeySecret: upstreamSecret}}
	}
	eps := []snapshot.Endpoint{
		endpoint("az/chat", azureTarget(azure), nil, nil),
		endpoint("az/embed", azureTarget(azureEmbed), nil, nil),
		endpoint("chat/claude", []snapshot.Target{anthropicTarget("claude", claude, 0)}, nil, nil),
	}
	store := boltBilling(t)
	f := failoverFixture(t, store, eps, []gatewayv1.ModelConfig{{Slug: "az/chat"}, {Slug: "az/embed"}, {Slug: "chat/claude"}})
	key := "Api-Key " + f.keys["root"]
	postRaw := func(path string, body []byte) result {
		t.Helper()
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		return f.post(path, key, v)
	}
	calls := 0

	t.Run("azure", func(t *testing.T) {
		r := f.post("/v1/chat/completions", key, map[string]any{"model": "az/chat", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		calls++
		if r.status != 200 || content(t, r) != "from azure" {
			t.Fatalf("answered %d %s", r.status, r.body)
		}
		if got := azure.last(); !bytes.Contains(got, []byte(`"model":"gpt-4o"`)) {
			t.Errorf("body %s: the deployment's model", got)
		}
		r = f.post("/v1/embeddings", key, map[string]any{"model": "az/embed", "input": "hi"})
		calls++
		if r.status != 200 || !bytes.Contains(r.body, []byte(`"embedding"`)) {
			t.Fatalf("embeddings answered %d %s", r.status, r.body)
		}
	})
	t.Run("anthropic answer", func(t *testing.T) {
		claude.set(200, "application/json", anthropicGolden(t, "answer.anthropic.json"))
		r := postRaw("/v1/chat/completions", anthropicGolden(t, "basic.openai.json"))
		calls++
		if r.status != 200 || content(t, r) != "Hi! My name is Claude." {
			t.Fatalf("answered %d %s", r.status, r.body)
		}
		if want := anthropicGolden(t, "basic.anthropic.json"); !testutil.JSONEqual(claude.last(), want) {
			t.Errorf("the upstream got %s, want %s", claude.last(), want)
		}
		if u := r.json(t)["usage"].(map[string]any); u["prompt_tokens"] != 2205.0 || u["completion_tokens"] != 503.0 {
			t.Errorf("usage %v: cache tokens count as input", u)
		}
	})
	t.Run("anthropic tools", func(t *testing.T) {
		claude.set(200, "application/json", anthropicGolden(t, "tool-answer.anthropic.json"))
		r := postRaw("/v1/chat/completions", anthropicGolden(t, "tools.openai.json"))
		calls++
		if want := anthropicGolden(t, "tools.anthropic.json"); !testutil.JSONEqual(claude.last(), want) {
			t.Errorf("the upstream got %s, want %s", claude.last(), want)
		}
		var a struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason string `json:"finish_reason"`
			}
		}
		if json.Unmarshal(r.body, &a) != nil || len(a.Choices) != 1 || a.Choices[0].FinishReason != "tool_calls" ||
			len(a.Choices[0].Message.ToolCalls) != 1 || a.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" {
			t.Errorf("answered %d %s", r.status, r.body)
		}
	})
	t.Run("anthropic stream", func(t *testing.T) {
		claude.set(200, "text/event-stream", anthropicGolden(t, "stream.anthropic.sse"))
		r := postRaw("/v1/chat/completions", anthropicGolden(t, "image.openai.json"))
		calls++
		if want := anthropicGolden(t, "image.anthropic.json"); !testutil.JSONEqual(claude.last(), want) {
			t.Errorf("the upstream got %s, want %s", claude.last(), want)
		}
		data, _ := sseData(t, r.body)
		var text strings.Builder
		var usage map[string]any
		for _, d := range data {
			if d == "[DONE]" {
				continue
			}
			var c struct {
				Choices []struct{ Delta struct{ Content string } }
				Usage   map[string]any
			}
			if err := json.Unmarshal([]byte(d), &c); err != nil {
				t.Fatalf("chunk %s: %v", d, err)
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
			}
			if c.Usage != nil {
				usage = c.Usage
			}
		}
		if r.status != 200 || text.String() != "Hello!" || data[len(data)-1] != "[DONE]" || usage["prompt_tokens"] != 25.0 || usage["completion_tokens"] != 15.0 {
			t.Errorf("stream %d %q usage %v: %s", r.status, text.String(), usage, r.body)
		}
	})
	t.Run("anthropic error", func(t *testing.T) {
		claude.set(404, "application/json", anthropicGolden(t, "error.anthropic.json"))
		r := postRaw("/v1/chat/completions", anthropicGolden(t, "basic.openai.json"))
		calls++
		if r.status != 404 || !testutil.JSONEqual(r.body, anthropicGolden(t, "error.openai.json")) || bytes.Contains(r.body, []byte(upstreamKey)) {
			t.Errorf("answered %d %s", r.status, r.body)
		}
	})
	t.Run("anthropic refusals", func(t *testing.T) {
		n := len(claude.bodies)
		r := f.post("/v1/chat/completions", key, map[string]any{"model": "chat/claude", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "logprobs": true})
		calls++
		if r.status != 400 || !bytes.Contains(r.body, []byte("logprobs")) || !bytes.Contains(r.body, []byte("ANTHROPIC")) {
			t.Errorf("an untranslatable field answered %d %s", r.status, r.body)
		}
		r = f.post("/v1/embeddings", key, map[string]any{"model": "chat/claude", "input": "hi"})
		calls++
		if r.status != 400 || !bytes.Contains(r.body, []byte("ANTHROPIC")) || !bytes.Contains(r.body, []byte("/embeddings")) {
			t.Errorf("embeddings answered %d %s", r.status, r.body)
		}
		if len(claude.bodies) != n {
			t.Error("a refused call reached the upstream")
		}
	})
	// Usage is charged from the provider's own fields, once per call.
	evs := events(t, store, f.ns, calls)
	var in, out int64
	for _, e := range evs {
		if e.Provider == "ANTHROPIC" {
			in, out = in+e.Tokens.InputTokens, out+e.Tokens.OutputTokens
		}
	}
	if in != 2205+384+25 || out != 503+86+15 {
		t.Errorf("ANTHROPIC calls charged %d input and %d output tokens", in, out)
	}
}
