package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// sendMessages posts body to path with the headers given, and reads the answer.
func (f *fixture) send(path string, header map[string]string, body any) result {
	f.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: out}
}

// anthropicError reads Messages' error shape, failing unless the answer has it.
func anthropicError(t *testing.T, r result) (typ, msg string) {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Type != "error" || e.Error.Type == "" {
		t.Fatalf("not Messages' error shape (%d): %s", r.status, r.body)
	}
	return e.Error.Type, e.Error.Message
}

// anthropicMessage reads Messages' answer: its text and usage.
func anthropicMessage(t *testing.T, r result) (text string, in, out int64) {
	t.Helper()
	var m struct {
		Type    string
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(r.body, &m); err != nil || r.status != 200 || m.Type != "message" || len(m.Content) == 0 {
		t.Fatalf("not a Messages answer (%d): %s", r.status, r.body)
	}
	return m.Content[0].Text, m.Usage.InputTokens, m.Usage.OutputTokens
}

// anthropicStream reads Messages' events: their names in order, the text of the deltas, and message_delta's usage.
func anthropicStream(t *testing.T, r result) (names []string, text string, usage map[string]any) {
	t.Helper()
	data, names := sseData(t, r.body)
	var b strings.Builder
	for _, d := range data {
		var e struct {
			Type  string
			Delta struct{ Text string }
			Usage map[string]any
		}
		if err := json.Unmarshal([]byte(d), &e); err != nil {
			t.Fatalf("event %s: %v", d, err)
		}
		b.WriteString(e.Delta.Text)
		if e.Type == "message_delta" {
			usage = e.Usage
		}
	}
	return names, b.String(), usage
}

func hello(model string, stream bool) map[string]any {
	return map[string]any{"model": model, "max_tokens": 64, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": "hello world"}}}
}

// TestMessagesRoute serves Anthropic's Messages API on an OPENAI Endpoint: the federated key in each of the three
// places Anthropic's clients put it, a workspace key, plain and streamed answers in Messages' shape, refusals and
// limits in Messages' error shape, one billing event per federated call.
func TestMessagesRoute(t *testing.T) {
	invoke, invokeRec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	store := boltBilling(t)
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", billing: store, workspace: []snapshot.WorkspaceAPIKey{invokeRec},
		groups:    []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{{Slug: slug}, limited("once", "REQUEST", "DAY", 1)}}},
		endpoints: []snapshot.Endpoint{{ID: "once", Slug: "once", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: f0URL(t)}}}}})
	// Today, within the billing store's retention (as failoverFixture sets it).
	f.clock.SetTime(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour))
	f.publish()
	key := f.keys["root"]
	federated := 0
	for name, h := range map[string]map[string]string{
		"x-api-key":      {"X-Api-Key": key, "Anthropic-Version": "2023-06-01"},
		"bearer":         {"Authorization": "Bearer " + key},
		"api-key scheme": {"Authorization": "Api-Key " + key, "Anthropic-Version": "2099-01-01"},
	} {
		r := f.send("/v1/messages", h, hello(slug, false))
		federated++
		if text, in, out := anthropicMessage(t, r); text == "" || in <= 0 || out <= 0 {
			t.Errorf("%s: %q %d %d", name, text, in, out)
		}
	}
	if r := f.send("/v1/messages", map[string]string{"Authorization": "Bearer " + invoke}, hello(slug, false)); r.status != 200 {
		t.Errorf("a workspace key: %d %s", r.status, r.body)
	}
	r := f.send("/v1/messages", map[string]string{"X-Api-Key": key}, hello(slug, true))
	federated++
	names, text, usage := anthropicStream(t, r)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || text == "" {
		t.Errorf("stream %d %q: %s", r.status, text, r.body)
	}
	if len(names) < 6 || names[0] != "message_start" || names[1] != "content_block_start" || names[len(names)-3] != "content_block_stop" ||
		names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
		t.Errorf("events %v", names)
	}
	if usage["input_tokens"] == nil || usage["input_tokens"].(float64) <= 0 || usage["output_tokens"].(float64) <= 0 {
		t.Errorf("message_delta usage %v", usage)
	}

	for _, tc := range []struct {
		name   string
		header map[string]string
		body   map[string]any
		status int
		typ    string
		holds  string
	}{
		{"no key", nil, hello(slug, false), 401, "authentication_error", "API key"},
		{"a wrong key", map[string]string{"X-Api-Key": "mg_nope"}, hello(slug, false), 401, "authentication_error", "Invalid"},
		{"a slug outside the group", map[string]string{"X-Api-Key": key}, hello("nope/nope", false), 404, "not_found_error", "does not exist"},
		{"a field OpenAI cannot take", map[string]string{"X-Api-Key": key}, func() map[string]any { b := hello(slug, false); b["top_k"] = 3; return b }(), 400, "invalid_request_error", "top_k"},
		{"no max_tokens", map[string]string{"X-Api-Key": key}, map[string]any{"model": slug, "messages": []any{}}, 400, "invalid_request_error", "max_tokens"},
	} {
		r := f.send("/v1/messages", tc.header, tc.body)
		if typ, msg := anthropicError(t, r); r.status != tc.status || typ != tc.typ || !strings.Contains(msg, tc.holds) {
			t.Errorf("%s: %d %s %q", tc.name, r.status, typ, msg)
		}
	}
	// Limits apply as on /v1/chat/completions: the second call of a one-request day is refused.
	if r := f.send("/v1/messages", map[string]string{"X-Api-Key": key}, hello("once", false)); r.status != 200 {
		t.Fatalf("first call of the day: %d %s", r.status, r.body)
	}
	federated++
	r = f.send("/v1/messages", map[string]string{"X-Api-Key": key}, hello("once", false))
	federated++
	if typ, _ := anthropicError(t, r); r.status != 429 || typ != "rate_limit_error" {
		t.Errorf("over the limit: %d %s", r.status, r.body)
	}
	// Every call of the federated key records one event, as on /v1/chat/completions: the refused ones too (the
	// slug outside the group, the untranslatable field, no max_tokens); a call with no valid key records none.
	federated += 3
	events(t, store, f.ns, federated)
}

// f0URL is a loopback OpenAI-compatible upstream of the test.
func f0URL(t *testing.T) string {
	u := newFaultUpstream(t, "once", new(atomic.Int64))
	return u.baseURL()
}

// TestFailoverToAnthropic: a two-target Endpoint whose OPENAI target refuses every connection fails over to its
// ANTHROPIC target, and each client gets the answer in its own API: OpenAI's on /v1/chat/completions, Messages'
// on /v1/messages, plain and streamed. Each call is charged once, to the answering target.
func TestFailoverToAnthropic(t *testing.T) {
	claude := newAnthropicFake(t)
	ep := endpoint("chat/claude", []snapshot.Target{{Name: "vllm", Provider: "OPENAI", BaseURL: refusedURL}, anthropicTarget("claude", claude, 1)}, nil, never)
	store := boltBilling(t)
	f := failoverFixture(t, store, []snapshot.Endpoint{ep}, models("chat/claude"))
	key := f.keys["root"]
	openAI := func(stream bool) result {
		return f.post("/v1/chat/completions", "Api-Key "+key, map[string]any{"model": "chat/claude", "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": "Hello, world"}}})
	}
	messages := func(stream bool) result {
		return f.send("/v1/messages", map[string]string{"X-Api-Key": key}, hello("chat/claude", stream))
	}

	claude.set(200, "application/json", anthropicGolden(t, "answer.anthropic.json"))
	if r := openAI(false); r.status != 200 || content(t, r) != "Hi! My name is Claude." {
		t.Errorf("chat completions: %d %s", r.status, r.body)
	}
	if text, in, out := anthropicMessage(t, messages(false)); text != "Hi! My name is Claude." || in != 2205 || out != 503 {
		t.Errorf("messages: %q %d %d", text, in, out)
	}
	claude.set(200, "text/event-stream", anthropicGolden(t, "stream.anthropic.sse"))
	r := openAI(true)
	data, _ := sseData(t, r.body)
	if r.status != 200 || len(data) < 3 || !strings.Contains(data[1], `"content":"Hello"`) || data[len(data)-1] != "[DONE]" {
		t.Errorf("chat completions stream: %d %s", r.status, r.body)
	}
	names, text, usage := anthropicStream(t, messages(true))
	if text != "Hello!" || names[len(names)-1] != "message_stop" || usage["input_tokens"] != 25.0 || usage["output_tokens"] != 15.0 {
		t.Errorf("messages stream: %v %q %v", names, text, usage)
	}
	for id, e := range events(t, store, f.ns, 4) {
		if e.Target != "claude" || e.Provider != "ANTHROPIC" || e.Attempts != 2 || e.Tokens.InputTokens <= 0 {
			t.Errorf("event %s: %+v", id, e)
		}
	}
}

// TestModelsList: GET /v1/models with a federated key lists, in OpenAI's shape, the slugs its group may call that
// an Endpoint routes; a workspace key still gets the model platform's answer.
func TestModelsList(t *testing.T) {
	invoke, invokeRec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", workspace: []snapshot.WorkspaceAPIKey{invokeRec},
		groups:    []gatewaytest.Group{{ID: "root", Models: models(slug, "b/routed", "c/unrouted")}, {ID: "other", Models: models("b/routed")}},
		endpoints: []snapshot.Endpoint{{ID: "b", Slug: "b/routed", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: refusedURL}}}}})
	get := func(header map[string]string) result {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models", nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{status: resp.StatusCode, body: b}
	}
	type list struct {
		Object string
		Data   []struct {
			ID, Object string
			Created    *int64
			OwnedBy    string `json:"owned_by"`
		}
	}
	for _, h := range []map[string]string{{"Authorization": "Api-Key " + f.keys["root"]}, {"Authorization": "Bearer " + f.keys["root"]}, {"X-Api-Key": f.keys["root"]}} {
		r := get(h)
		var l list
		if err := json.Unmarshal(r.body, &l); err != nil || r.status != 200 || l.Object != "list" || len(l.Data) != 2 ||
			l.Data[0].ID != "b/routed" || l.Data[1].ID != slug || l.Data[0].Object != "model" || l.Data[0].OwnedBy != "modelgate" || l.Data[0].Created == nil {
			t.Errorf("%v: %d %s", h, r.status, r.body)
		}
	}
	if r := get(map[string]string{"Authorization": "Api-Key " + f.keys["other"]}); !bytes.Contains(r.body, []byte(`"id":"b/routed"`)) || bytes.Contains(r.body, []byte(slug)) {
		t.Errorf("another group: %s", r.body)
	}
	if r := get(map[string]string{"Authorization": "Bearer " + invoke}); bytes.Contains(r.body, []byte(`"owned_by"`)) {
		t.Errorf("a workspace key got the federated list: %d %s", r.status, r.body)
	}
	if r := get(nil); r.status != 401 {
		t.Errorf("no key: %d %s", r.status, r.body)
	}
}

// TestAnthropicGoSDK points Anthropic's Go SDK at gatewayd, as a customer's program would with only a base URL and
// a key: a plain and a streamed message on an OPENAI Endpoint and on an Endpoint that fails over to ANTHROPIC, the
// key as x-api-key (WithAPIKey) and as a Bearer token (WithAuthToken), and an error the SDK reads as its own.
func TestAnthropicGoSDK(t *testing.T) {
	claude := newAnthropicFake(t)
	ep := endpoint("chat/claude", []snapshot.Target{{Name: "vllm", Provider: "OPENAI", BaseURL: refusedURL}, anthropicTarget("claude", claude, 1)}, nil, never)
	f := failoverFixture(t, boltBilling(t), []snapshot.Endpoint{ep}, models(slug, "chat/claude"))
	ctx := context.Background()
	params := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: model, MaxTokens: 64, System: []anthropic.TextBlockParam{{Text: "Be brief."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello world"))}}
	}
	for name, auth := range map[string]option.RequestOption{"api key": option.WithAPIKey(f.keys["root"]), "auth token": option.WithAuthToken(f.keys["root"])} {
		client := anthropic.NewClient(option.WithBaseURL(f.url), auth, option.WithMaxRetries(0))
		for _, model := range []string{slug, "chat/claude"} {
			claude.set(200, "application/json", anthropicGolden(t, "answer.anthropic.json"))
			m, err := client.Messages.New(ctx, params(model))
			if err != nil {
				t.Fatalf("%s, %s: %v", name, model, err)
			}
			if len(m.Content) == 0 || m.Content[0].Text == "" || m.StopReason != anthropic.StopReasonEndTurn || m.Usage.InputTokens <= 0 || m.Usage.OutputTokens <= 0 {
				t.Errorf("%s, %s: %+v", name, model, m)
			}
			claude.set(200, "text/event-stream", anthropicGolden(t, "stream.anthropic.sse"))
			stream := client.Messages.NewStreaming(ctx, params(model))
			var acc anthropic.Message
			var text strings.Builder
			for stream.Next() {
				e := stream.Current()
				if err := acc.Accumulate(e); err != nil {
					t.Fatal(err)
				}
				if d, ok := e.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
					text.WriteString(d.Delta.Text)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("%s, %s stream: %v", name, model, err)
			}
			if text.String() == "" || acc.Content[0].Text != text.String() || acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens <= 0 {
				t.Errorf("%s, %s stream: %q %+v", name, model, text.String(), acc)
			}
		}
	}
	client := anthropic.NewClient(option.WithBaseURL(f.url), option.WithAPIKey(f.keys["root"]), option.WithMaxRetries(0))
	_, err := client.Messages.New(ctx, params("nope/nope"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.RawJSON(), "not_found_error") {
		t.Errorf("an unknown model: %v", err)
	}
}
