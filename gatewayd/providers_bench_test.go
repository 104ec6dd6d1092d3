package gatewayd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/testutil"
)

// gapChunks is the number of content chunks of each stream of BenchmarkStreamChunkGap, gapPace the time its
// upstream waits before each.
const (
	gapChunks = 40
	gapPace   = time.Millisecond
)

// pacedStream serves a stream of gapChunks content events, one every gapPace: OpenAI's chunks, or Anthropic's
// events when anthropic.
func pacedStream(anthropic bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		send := func(s string) { _, _ = fmt.Fprint(w, s); fl.Flush() }
		if anthropic {
			send("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		}
		for i := range gapChunks {
			time.Sleep(gapPace)
			if anthropic {
				send(fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok%d \"}}\n\n", i))
			} else {
				send(fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i))
			}
		}
		if anthropic {
			send("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		} else {
			send("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":40}}\n\ndata: [DONE]\n\n")
		}
	}
}

// BenchmarkStreamChunkGap measures the gap between two content chunks of a stream as the client reads them, through
// an OPENAI target (relayed as it is) and an ANTHROPIC target (translated chunk by chunk), the two in the same run,
// calls alternating; both upstreams pace their chunks alike. It reports the p50 and p99 gap of each and the p99
// that translation adds (docs/benchmarks.md "Providers").
func BenchmarkStreamChunkGap(b *testing.B) {
	openaiUp := httptest.NewServer(pacedStream(false))
	defer openaiUp.Close()
	claudeUp := httptest.NewServer(pacedStream(true))
	defer claudeUp.Close()
	url, key := gapGateway(b, []snapshot.Endpoint{
		endpoint("gap/openai", []snapshot.Target{{Name: "o", Provider: "OPENAI", BaseURL: openaiUp.URL + "/v1"}}, nil, nil),
		endpoint("gap/anthropic", []snapshot.Target{{Name: "a", Provider: "ANTHROPIC", BaseURL: claudeUp.URL + "/v1"}}, nil, nil),
	})
	gaps := map[string][]time.Duration{}
	body := func(model string) []byte {
		out, _ := json.Marshal(map[string]any{"model": model, "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		return out
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, model := range []string{"gap/openai", "gap/anthropic"} {
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body(model)))
			req.Header.Set("Authorization", "Api-Key "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			var last time.Time
			n := 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					break
				}
				if !strings.Contains(line, `"content":"tok`) {
					continue
				}
				now := time.Now()
				if n > 0 {
					gaps[model] = append(gaps[model], now.Sub(last))
				}
				last, n = now, n+1
			}
			resp.Body.Close()
			if n != gapChunks {
				b.Fatalf("%s: %d content chunks, want %d", model, n, gapChunks)
			}
		}
	}
	b.StopTimer()
	p := func(model string, q float64) float64 {
		return float64(testutil.Percentile(gaps[model], q)) / float64(time.Microsecond)
	}
	b.ReportMetric(p("gap/openai", 0.5), "openai-p50-µs")
	b.ReportMetric(p("gap/openai", 0.99), "openai-p99-µs")
	b.ReportMetric(p("gap/anthropic", 0.5), "anthropic-p50-µs")
	b.ReportMetric(p("gap/anthropic", 0.99), "anthropic-p99-µs")
	b.ReportMetric(p("gap/anthropic", 0.99)-p("gap/openai", 0.99), "added-p99-µs")
}

// gapGateway serves endpoints to one group that may call each, and returns gatewayd's URL and the group's key.
func gapGateway(b *testing.B, endpoints []snapshot.Endpoint) (url, key string) {
	kube.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "gap")
	if err != nil {
		b.Fatal(err)
	}
	var slugs []gatewayv1.ModelConfig
	for _, e := range endpoints {
		slugs = append(slugs, gatewayv1.ModelConfig{Slug: e.Slug})
	}
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "root", Models: slugs}})
	key, rec := gatewaytest.NewKey("k", "root")
	s.APIKeys = []snapshot.APIKey{rec}
	s.Endpoints = endpoints
	if url, err = gatewaytest.ServeSnapshot(ctx, cs, cfg, s); err != nil {
		b.Fatal(err)
	}
	return url, key
}
