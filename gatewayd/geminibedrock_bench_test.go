package gatewayd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// streamChunks is how many text chunks each benchmarked stream carries, streamPace the upstream's pause between
// two: long enough that each chunk crosses gatewayd alone, so its delay is its own.
const (
	streamChunks = 32
	streamPace   = time.Millisecond
)

// pacedUpstream is a loopback upstream that streams streamChunks text chunks ("c<i>") in one provider's wire, one
// every streamPace, and notes when it wrote each.
type pacedUpstream struct {
	mu   sync.Mutex
	sent []time.Time
}

func (p *pacedUpstream) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.sent = p.sent[:0]
	p.mu.Unlock()
	var frame func(i int) []byte
	switch {
	case strings.Contains(r.URL.Path, ":streamGenerateContent"):
		w.Header().Set("Content-Type", "text/event-stream")
		frame = func(i int) []byte {
			finish, usage := "", ""
			if i == streamChunks-1 {
				finish, usage = `,"finishReason":"STOP"`, `,"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":32}`
			}
			return fmt.Appendf(nil, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"c%d \"}],\"role\":\"model\"}%s}]%s}\r\n\r\n", i, finish, usage)
		}
	case strings.HasSuffix(r.URL.Path, "/converse-stream"):
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		_, _ = w.Write(bedrockStreamB([2]string{"messageStart", `{"role":"assistant"}`}))
		frame = func(i int) []byte {
			ev := bedrockStreamB([2]string{"contentBlockDelta", fmt.Sprintf(`{"contentBlockIndex":0,"delta":{"text":"c%d "}}`, i)})
			if i == streamChunks-1 {
				ev = append(ev, bedrockStreamB([2]string{"contentBlockStop", `{"contentBlockIndex":0}`}, [2]string{"messageStop", `{"stopReason":"end_turn"}`},
					[2]string{"metadata", `{"usage":{"inputTokens":2,"outputTokens":32,"totalTokens":34}}`})...)
			}
			return ev
		}
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		frame = func(i int) []byte {
			ev := fmt.Appendf(nil, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c%d \"}}]}\n\n", i)
			if i == streamChunks-1 {
				ev = append(ev, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":32}}\n\ndata: [DONE]\n\n"...)
			}
			return ev
		}
	}
	for i := range streamChunks {
		time.Sleep(streamPace)
		b := frame(i)
		p.mu.Lock()
		p.sent = append(p.sent, time.Now())
		p.mu.Unlock()
		_, _ = w.Write(b)
		w.(http.Flusher).Flush()
	}
}

// bedrockStreamB is bedrockStream for a benchmark.
func bedrockStreamB(events ...[2]string) []byte {
	var t testing.T
	return bedrockStream(&t, events...)
}

// BenchmarkTranslatedStream streams the same 32 paced text chunks through gatewayd from an OPENAI, a GEMINI and
// a BEDROCK upstream, one call of each in turn per iteration, and reports each chunk's delay from the upstream's
// write to the client's read (p50 and p99, in µs, per upstream): what the translation of a GEMINI or BEDROCK
// stream adds per chunk is the difference from the untranslated OPENAI one. Run with -benchtime=40x
// (docs/benchmarks.md).
func BenchmarkTranslatedStream(b *testing.B) {
	kube.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	up := &pacedUpstream{}
	srv := httptest.NewServer(http.HandlerFunc(up.serve))
	b.Cleanup(srv.Close)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "bench")
	if err != nil {
		b.Fatal(err)
	}
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{{Slug: "openai"}, {Slug: "gemini"}, {Slug: "bedrock"}}}})
	key, rec := gatewaytest.NewKey("k", "root")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = []snapshot.Endpoint{
		{ID: "openai", Slug: "openai", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: srv.URL + "/v1"}}},
		{ID: "gemini", Slug: "gemini", Targets: []snapshot.Target{{Provider: "GEMINI", BaseURL: srv.URL + "/v1beta", TargetModel: "gemini-2.0-flash"}}},
		{ID: "bedrock", Slug: "bedrock", Targets: []snapshot.Target{{Provider: "BEDROCK", BaseURL: srv.URL, TargetModel: bedrockModel, Region: "us-east-1"}}},
	}
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
	// One call of each upstream per iteration, in turn, so that the three share the machine's moments alike.
	wires := []string{"openai", "gemini", "bedrock"}
	delays := map[string][]time.Duration{}
	for b.Loop() {
		for _, wire := range wires {
			body := []byte(`{"model":"` + wire + `","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
			delays[wire] = append(delays[wire], streamDelays(b, up, url+"/v1/chat/completions", "Api-Key "+key, body)...)
		}
	}
	for _, wire := range wires {
		d := delays[wire]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), wire+"-p50-µs/chunk")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), wire+"-p99-µs/chunk")
	}
}

// streamDelays makes one streamed call and returns, for each text chunk "c<i>", the time from the upstream's
// write of chunk i to its arrival here.
func streamDelays(b *testing.B, up *pacedUpstream, target, auth string, body []byte) []time.Duration {
	req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	got := make([]time.Time, streamChunks)
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		at := time.Now()
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimSpace(c.Choices[0].Delta.Content), "c")
		if i, err := strconv.Atoi(text); ok && err == nil && i < streamChunks {
			got[i] = at
			seen++
		}
	}
	if seen != streamChunks {
		b.Fatalf("%d of %d chunks arrived", seen, streamChunks)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	out := make([]time.Duration, streamChunks)
	for i := range out {
		out[i] = got[i].Sub(up.sent[i])
	}
	return out
}
