package gatewayd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/upstream"
)

// TestGenAIMetrics: a successful answer adds to the GenAI histograms of its target (docs/operations.md "Metrics"):
// one relayed whole to the duration, the time to first token and the token usage; a stream that reports its usage
// to the time per output token too. A call refused by gatewayd, or answered with the upstream's error, adds
// nothing.
func TestGenAIMetrics(t *testing.T) {
	// An Endpoint whose upstream answers every call with a JSON 400, which the client gets as it is.
	bad := upstream.New(upstream.Options{})
	t.Cleanup(bad.Close)
	const refusedSlug = "genai/refused"
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", upstream: upstream.Options{StreamDeltas: 4, CompletionTokens: 11},
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug, refusedSlug)}},
		endpoints: []snapshot.Endpoint{{ID: "refused", Slug: refusedSlug, Targets: []snapshot.Target{{
			Name: "refused-a", Provider: "OPENAI", BaseURL: bad.BaseURL(), TargetModel: "status-400"}}}}})
	if r := f.chat("root", slug); r.status != http.StatusOK {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	f.chat("root", "not-a-slug")
	if r := f.chat("root", refusedSlug); r.status != http.StatusBadRequest {
		t.Fatalf("A call of %s: %d %s, want the upstream's 400", refusedSlug, r.status, r.body)
	}
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
	// gatewayd observes once the answer has left, so a client can read it first: wait for the series.
	check := func() {
		t.Helper()
		for series, v := range want {
			f.waitMetricEquals(series, v)
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
	// Checked last, once the calls after it were observed.
	refused := `gen_ai_server_request_duration_seconds_count{provider="OPENAI",slug="` + refusedSlug + `",target="refused-a",workspace="` + f.ns + `"}`
	if got := f.metric(refused); got != -1 {
		t.Errorf("%s = %v: an error answer counts as a generation", refused, got)
	}
}
