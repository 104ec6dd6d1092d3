package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// wireFake is a loopback upstream of one provider's wire. check returns what is wrong with a call it
// received (its path, headers, body, signature), or ""; answer writes the provider's answer. Every call is kept.
type wireFake struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []string
	faults []string
}

func newWireFake(t *testing.T, check func(r *http.Request, body []byte) string, answer func(w http.ResponseWriter, r *http.Request)) *wireFake {
	p := &wireFake{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.calls = append(p.calls, r.URL.RequestURI())
		if fault := check(r, body); fault != "" {
			p.faults = append(p.faults, r.URL.RequestURI()+": "+fault)
		}
		p.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *wireFake) checked(t *testing.T, want ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		t.Error(f)
	}
	if strings.Join(p.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("the fake received\n  %s\nwant\n  %s", strings.Join(p.calls, "\n  "), strings.Join(want, "\n  "))
	}
}

// createWireSecret creates an upstream credential Secret of data, for the fake's host only.
func createWireSecret(t *testing.T, ns, name string, p *wireFake, data map[string]string) {
	t.Helper()
	u, _ := url.Parse(p.srv.URL)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels:      map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
		Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: u.Host}}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

const bedrockModel = "anthropic.claude-3-haiku-20240307-v1:0"

var awsCreds = aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "IQoJb3JpZ2luX2VjEXAMPLE"}

// bedrockStream is a ConverseStream answer, encoded with aws-sdk-go-v2's eventstream encoder.
func bedrockStream(t *testing.T, events ...[2]string) []byte {
	var b bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range events {
		msg := eventstream.Message{Payload: []byte(e[1])}
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Headers.Set(":event-type", eventstream.StringValue(e[0]))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		if err := enc.Encode(&b, msg); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// sseText is the text and the usage of an OpenAI stream gatewayd answered, and whether it ended in [DONE].
func sseText(t *testing.T, body []byte) (text string, usage map[string]any, done bool) {
	t.Helper()
	for _, ev := range strings.Split(string(body), "\n\n") {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
			Usage   map[string]any
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("not an OpenAI chunk: %s", data)
		}
		for _, ch := range c.Choices {
			text += ch.Delta.Content
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	return text, usage, done
}

// TestTranslatedProviders calls a GEMINI and a BEDROCK target through gatewayd, plainly and streamed, with
// OpenAI's wire on the client's side. The loopback fakes check the provider's wire: the path, the key in
// x-goog-api-key, the SigV4 signature recomputed with aws-sdk-go-v2's signer from the Secret's keys (session
// token included), and the body's shape. Embeddings reach GEMINI and are refused for BEDROCK; a field a provider
// cannot take is the client's 400 naming it, and the upstream never sees the call.
func TestTranslatedProviders(t *testing.T) {
	gemini := newWireFake(t, func(r *http.Request, body []byte) string {
		var req map[string]any
		switch {
		case r.Header.Get("X-Goog-Api-Key") != "gm-secret-key":
			return "x-goog-api-key " + r.Header.Get("X-Goog-Api-Key")
		case r.Header.Get("Authorization") != "":
			return "an Authorization header was sent"
		case json.Unmarshal(body, &req) != nil:
			return "body not JSON"
		case strings.HasSuffix(r.URL.Path, ":batchEmbedContents"):
			if _, ok := req["requests"].([]any); !ok {
				return "no requests: " + string(body)
			}
		case req["contents"] == nil || req["model"] != nil || req["messages"] != nil:
			return "not a generateContent body: " + string(body)
		}
		return ""
	}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, ":batchEmbedContents"):
			fmt.Fprint(w, `{"embeddings":[{"values":[0.5,-0.25]}]}`)
		case r.URL.Query().Get("alt") == "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"}}],\"usageMetadata\":{\"promptTokenCount\":3}}\r\n\r\n")
			w.(http.Flusher).Flush()
			fmt.Fprint(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" from Gemini\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":4,\"totalTokenCount\":7}}\r\n\r\n")
		default:
			fmt.Fprint(w, `{"candidates":[{"content":{"parts":[{"text":"Hello from Gemini"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"totalTokenCount":7},"modelVersion":"gemini-2.0-flash"}`)
		}
	})
	bedrock := newWireFake(t, func(r *http.Request, body []byte) string {
		var req map[string]any
		switch {
		case !strings.HasPrefix(r.URL.EscapedPath(), "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"):
			return "path " + r.URL.EscapedPath()
		case json.Unmarshal(body, &req) != nil || req["messages"] == nil || req["model"] != nil:
			return "not a Converse body: " + string(body)
		}
		if err := providertest.VerifySigV4(r, body, awsCreds, "bedrock", "eu-west-3"); err != nil {
			return err.Error()
		}
		return ""
	}, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/converse-stream") {
			w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
			_, _ = w.Write(bedrockStream(t, [2]string{"messageStart", `{"role":"assistant"}`},
				[2]string{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hello"}}`}))
			w.(http.Flusher).Flush()
			_, _ = w.Write(bedrockStream(t, [2]string{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" from Bedrock"}}`},
				[2]string{"contentBlockStop", `{"contentBlockIndex":0}`}, [2]string{"messageStop", `{"stopReason":"end_turn"}`},
				[2]string{"metadata", `{"usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7},"metrics":{"latencyMs":10}}`}))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"output":{"message":{"role":"assistant","content":[{"text":"Hello from Bedrock"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7},"metrics":{"latencyMs":10}}`)
	})
	// thief is a server the BEDROCK Secret does not list: an Endpoint pointing it there must not sign a call to it.
	thief := newWireFake(t, func(*http.Request, []byte) string { return "" }, func(http.ResponseWriter, *http.Request) {})
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "gem", "bed", "bed-away")}},
		endpoints: []snapshot.Endpoint{
			{ID: "gem", Slug: "gem", Targets: []snapshot.Target{{Provider: "GEMINI", BaseURL: gemini.srv.URL + "/v1beta", TargetModel: "gemini-2.0-flash",
				APIKeySecret: &snapshot.SecretRef{Name: "gemini", Key: "api_key"}}}},
			{ID: "bed", Slug: "bed", Targets: []snapshot.Target{{Provider: "BEDROCK", BaseURL: bedrock.srv.URL, TargetModel: bedrockModel, Region: "eu-west-3",
				APIKeySecret: &snapshot.SecretRef{Name: "bedrock"}}}},
			{ID: "bed-away", Slug: "bed-away", Targets: []snapshot.Target{{Provider: "BEDROCK", BaseURL: thief.srv.URL, TargetModel: bedrockModel, Region: "eu-west-3",
				APIKeySecret: &snapshot.SecretRef{Name: "bedrock"}}}},
		}})
	createWireSecret(t, f.ns, "gemini", gemini, map[string]string{"api_key": "gm-secret-key"})
	createWireSecret(t, f.ns, "bedrock", bedrock, map[string]string{"aws_access_key_id": awsCreds.AccessKeyID,
		"aws_secret_access_key": awsCreds.SecretAccessKey, "aws_session_token": awsCreds.SessionToken})
	key := "Api-Key " + f.keys["root"]
	chat := func(model string, extra map[string]any) result {
		body := map[string]any{"model": model, "messages": []any{map[string]any{"role": "system", "content": "Be brief."},
			map[string]any{"role": "user", "content": "hello"}}, "max_tokens": 20}
		for k, v := range extra {
			body[k] = v
		}
		return f.post("/v1/chat/completions", key, body)
	}
	for _, c := range []struct{ slug, name string }{{"gem", "Gemini"}, {"bed", "Bedrock"}} {
		r := chat(c.slug, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.slug, r.status, r.body)
		}
		var a struct {
			Object  string
			Choices []struct {
				Message      struct{ Role, Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(r.body, &a); err != nil || a.Object != "chat.completion" || len(a.Choices) != 1 ||
			a.Choices[0].Message.Content != "Hello from "+c.name || a.Choices[0].FinishReason != "stop" || a.Usage.PromptTokens != 3 || a.Usage.CompletionTokens != 4 {
			t.Errorf("%s: not the translated answer: %s", c.slug, r.body)
		}
		r = chat(c.slug, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})
		text, usage, done := sseText(t, r.body)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || text != "Hello from "+c.name || !done ||
			usage["prompt_tokens"] != float64(3) || usage["completion_tokens"] != float64(4) {
			t.Errorf("%s stream: %d %v: %s", c.slug, r.status, r.header, r.body)
		}
		r = chat(c.slug, map[string]any{"stream": true})
		if _, usage, done := sseText(t, r.body); usage != nil || !done {
			t.Errorf("%s stream without include_usage sent usage %v (done %v): %s", c.slug, usage, done, r.body)
		}
	}

	r := f.post("/v1/embeddings", key, map[string]any{"model": "gem", "input": "hello"})
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"embedding":[0.5,-0.25]`)) {
		t.Errorf("GEMINI embeddings: %d %s", r.status, r.body)
	}
	r = f.post("/v1/embeddings", key, map[string]any{"model": "bed", "input": "hello"})
	if r.status != http.StatusBadRequest || !bytes.Contains(r.body, []byte("BEDROCK")) {
		t.Errorf("BEDROCK embeddings: %d %s, want 400 naming the provider", r.status, r.body)
	}
	for _, c := range []struct {
		slug  string
		extra map[string]any
		field string
	}{{"bed", map[string]any{"seed": 4}, "seed"}, {"gem", map[string]any{"logprobs": true}, "logprobs"}} {
		r := chat(c.slug, c.extra)
		if r.status != http.StatusBadRequest || !bytes.Contains(r.body, []byte(c.field)) {
			t.Errorf("%s with %s: %d %s, want a 400 naming the field", c.slug, c.field, r.status, r.body)
		}
	}
	if r := chat("bed-away", nil); r.status != http.StatusBadGateway {
		t.Errorf("a BEDROCK target on a host its Secret does not list: %d %s, want 502", r.status, r.body)
	}
	thief.checked(t)
	gemini.checked(t, "/v1beta/models/gemini-2.0-flash:generateContent", "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
		"/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", "/v1beta/models/gemini-2.0-flash:batchEmbedContents")
	bedrock.checked(t, "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
		"/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream")
}
