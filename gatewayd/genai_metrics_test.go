package gatewayd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/upstream"
)

// TestGenAIMetrics: an answered call adds to the GenAI histograms of its target (docs/operations.md "Metrics"): a
// call relayed whole to the duration, the time to first token and the token usage; a stream that reports its
// usage to the time per output token too. A refused call adds nothing.
func TestGenAIMetrics(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", upstream: upstream.Options{StreamDeltas: 4, CompletionTokens: 11},
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	if r := f.chat("root", slug); r.status != http.StatusOK {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	f.chat("root", "not-a-slug")
	// The fixture's Endpoint target has no name of its own: the snapshot names it by its place.
	labels := `{provider="OPENAI",slug="` + slug + `",target="target-0",workspace="` + f.ns + `"}`
	tokens := func(typ string) string {
		return `gen_ai_client_token_usage_sum{gen_ai_token_type="` + typ + `",provider="OPENAI",slug="` + slug +
			`",target="target-0",workspace="` + f.ns + `"}`
	}
	want := map[string]float64{
		"gen_ai_server_request_duration_seconds_count" + labels:      1,
		"gen_ai_server_time_to_first_token_seconds_count" + labels:   1,
		"gen_ai_server_time_per_output_token_seconds_count" + labels: 0,
		tokens("input"):  2,
		tokens("output"): 11,
	}
	check := func() {
		t.Helper()
		for series, v := range want {
			if got := f.metric(series); got != v {
				t.Errorf("%s = %v, want %v", series, got, v)
			}
		}
	}
	check()

	b, _ := json.Marshal(map[string]any{"model": slug, "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []any{map[string]any{"role": "user", "content": "hello world"}}})
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Api-Key "+f.keys["root"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for d := ""; d != "[DONE]"; {
		d = readSSE(t, br)
	}
	resp.Body.Close()
	want["gen_ai_server_request_duration_seconds_count"+labels] = 2
	want["gen_ai_server_time_to_first_token_seconds_count"+labels] = 2
	want["gen_ai_server_time_per_output_token_seconds_count"+labels] = 1
	want[tokens("input")], want[tokens("output")] = 4, 22
	check()
}
