package gatewayd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	gwupstream "github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/test/upstream"
)

// window is how far the fake clock moves to leave a window: past the rolling window plus one sub-slot
// (docs/limits.md), to the next midnight UTC, or to the first instant of the next month.
var window = map[gatewayv1.LimitUnit]time.Duration{
	"SECOND": 1200 * time.Millisecond,
	"MINUTE": 67 * time.Second,
	"DAY":    14 * time.Hour,                                      // t0 is 10:00 UTC
	"MONTH":  time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(t0), // t0 is March 16
}

// TestThresholdPerModeTypeUnit: a leaf key of a three-level tree, limited by its root, is refused at exactly
// the threshold, for each mode, type and unit, and is admitted again once the window has passed.
func TestThresholdPerModeTypeUnit(t *testing.T) {
	for _, mode := range []gatewayv1.LimitEnforcement{"INDEPENDENT", "CASCADING"} {
		for _, typ := range []gatewayv1.LimitType{"REQUEST", "TOKEN"} {
			for _, unit := range []gatewayv1.LimitUnit{"SECOND", "MINUTE", "DAY", "MONTH"} {
				t.Run(fmt.Sprintf("%s/%s/%s", mode, typ, unit), func(t *testing.T) {
					// Three calls fit exactly: 3 requests, or 3*7 tokens.
					threshold := int64(3)
					if typ == "TOKEN" {
						threshold = 3 * tokensPerChat
					}
					f := newFixture(t, fixtureOpts{mode: mode, groups: tree(func(id string) []gatewayv1.ModelConfig {
						if id == "root" {
							return []gatewayv1.ModelConfig{limited(slug, typ, unit, threshold)}
						}
						return models(slug)
					})})
					for i := range 3 {
						if r := f.chat("leaf-a", slug); r.status != http.StatusOK {
							t.Fatalf("call %d: status %d below the threshold: %s", i+1, r.status, r.body)
						}
					}
					r := f.chat("leaf-a", slug)
					if r.status != http.StatusTooManyRequests {
						t.Fatalf("call at the threshold: status %d, want 429: %s", r.status, r.body)
					}
					body := r.json(t)
					wantCode := "rate_limited"
					if unit == "DAY" || unit == "MONTH" {
						wantCode = "usage_limit_exceeded"
					}
					if body["error_code"] != wantCode {
						t.Errorf("error_code = %v, want %s", body["error_code"], wantCode)
					}
					detail, _ := body["fields"].(map[string]any)
					want := map[string]any{"slug": slug, "type": string(typ), "unit": string(unit), "threshold": float64(threshold), "source_group": "root"}
					for k, v := range want {
						if detail[k] != v {
							t.Errorf("detail.%s = %v, want %v", k, detail[k], v)
						}
					}
					if r.header.Get("Retry-After") == "" {
						t.Error("429 without Retry-After")
					}
					if unit == "MONTH" {
						// Until April 1, 00:00 UTC; the next day is still March, and still refused.
						if got, want := r.header.Get("Retry-After"), fmt.Sprint(int(window[unit].Seconds())); got != want {
							t.Errorf("Retry-After = %s, want %s (the first instant of April)", got, want)
						}
						f.clock.SetTime(t0.Add(window["DAY"]))
						if r := f.chat("leaf-a", slug); r.status != http.StatusTooManyRequests {
							t.Fatalf("call on the next day of the month: status %d, want 429: %s", r.status, r.body)
						}
					}
					f.clock.SetTime(t0.Add(window[unit]))
					if r := f.chat("leaf-a", slug); r.status != http.StatusOK {
						t.Fatalf("call after the window: status %d: %s", r.status, r.body)
					}
				})
			}
		}
	}
}

// TestSiblingsSharePoolOnlyWhenCascading: two leaves under a mid group that declares the limit. CASCADING
// siblings draw one pool and their sum never exceeds it; INDEPENDENT siblings each have their own.
func TestSiblingsSharePoolOnlyWhenCascading(t *testing.T) {
	for _, tc := range []struct {
		mode gatewayv1.LimitEnforcement
		// admitted is how many calls pass in total when both leaves call alternately, 10 times each.
		admitted int
	}{{"CASCADING", 4}, {"INDEPENDENT", 8}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			f := newFixture(t, fixtureOpts{mode: tc.mode, groups: tree(func(id string) []gatewayv1.ModelConfig {
				if id == "mid" {
					return []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 4)}
				}
				return models(slug)
			})})
			admitted := map[string]int{}
			for range 10 {
				for _, leaf := range []string{"leaf-a", "leaf-b"} {
					r := f.chat(leaf, slug)
					switch r.status {
					case http.StatusOK:
						admitted[leaf]++
					case http.StatusTooManyRequests:
					default:
						t.Fatalf("%s: status %d: %s", leaf, r.status, r.body)
					}
				}
			}
			if got := admitted["leaf-a"] + admitted["leaf-b"]; got != tc.admitted {
				t.Fatalf("admitted %v (sum %d), want a sum of %d", admitted, got, tc.admitted)
			}
			if tc.mode == "INDEPENDENT" && (admitted["leaf-a"] != 4 || admitted["leaf-b"] != 4) {
				t.Fatalf("admitted %v: independent siblings must each get 4", admitted)
			}
		})
	}
}

// TestSlugBudgetsAreSeparate: spending one slug's budget never draws down another's.
func TestSlugBudgetsAreSeparate(t *testing.T) {
	const other = "demo/other"
	f := newFixture(t, fixtureOpts{mode: "CASCADING",
		groups: tree(func(id string) []gatewayv1.ModelConfig {
			if id == "root" {
				return []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 1), limited(other, "REQUEST", "MINUTE", 1)}
			}
			return models(slug, other)
		}),
		endpoints: []snapshot.Endpoint{{ID: "other", Slug: other, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://127.0.0.1:1/v1"}}}},
	})
	f.snap.Endpoints[1].Targets[0].BaseURL = f.upstream.BaseURL()
	f.publish()
	if r := f.chat("leaf-a", slug); r.status != http.StatusOK {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	if r := f.chat("leaf-a", slug); r.status != http.StatusTooManyRequests {
		t.Fatalf("second call of %s: %d, want 429", slug, r.status)
	}
	if r := f.chat("leaf-a", other); r.status != http.StatusOK {
		t.Fatalf("%s was drawn down by %s: %d %s", other, slug, r.status, r.body)
	}
}

// TestRejectedCallChargesNothing: a call refused by the mid group's limit charges neither the leaf's own
// bucket nor any ancestor's, the root included.
func TestRejectedCallChargesNothing(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "CASCADING", groups: tree(func(id string) []gatewayv1.ModelConfig {
		switch id {
		case "root":
			return []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 10)}
		case "mid":
			return []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 2)}
		case "leaf-a":
			return []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 5)}
		}
		return models(slug)
	})})
	for range 2 {
		if r := f.chat("leaf-a", slug); r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	for range 3 {
		r := f.chat("leaf-a", slug)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", r.status)
		}
		if sg := r.json(t)["fields"].(map[string]any)["source_group"]; sg != "mid" {
			t.Fatalf("refused by %v, want mid", sg)
		}
	}
	for _, g := range []string{"leaf-a", "mid", "root"} {
		k := limits.BucketKey{Namespace: f.ns, Group: g, Slug: slug, Type: limits.Request, Unit: limits.Minute}
		if got := f.store.Usage(k, f.clock.Now()); got != 2 {
			t.Errorf("bucket of %s holds %d after three refusals, want 2", g, got)
		}
	}
	if n := len(f.upstream.Requests()); n != 2 {
		t.Errorf("upstream got %d calls, want 2: refused calls must not be forwarded", n)
	}
}

// TestForwarding: the upstream gets the Secret's key as Bearer, the target model, and the rest of the body
// unchanged; errors map as docs/rest-api.md "Model-call errors" says.
func TestForwarding(t *testing.T) {
	slow := upstream.New(upstream.Options{Delay: 30 * time.Second})
	t.Cleanup(slow.Close)
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT",
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "broken", "down", "slow", "unrouted")}},
		endpoints: []snapshot.Endpoint{
			{ID: "broken", Slug: "broken", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://127.0.0.1:1/v1", TargetModel: "status-503"}}},
			{ID: "down", Slug: "down", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://127.0.0.1:1/v1"}}},
			{ID: "slow", Slug: "slow", TimeoutMillis: 200, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: slow.BaseURL()}}},
		},
	})
	f.snap.Endpoints[1].Targets[0].BaseURL = f.upstream.BaseURL()
	f.publish()

	body := map[string]any{"model": slug, "temperature": 0.25, "messages": []any{map[string]any{"role": "user", "content": "one two three"}}, "user": "u-1"}
	r := f.post("/v1/chat/completions", "Api-Key "+f.keys["root"], body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	got, _ := f.upstream.Last()
	if got.Path != "/v1/chat/completions" {
		t.Errorf("upstream path %q", got.Path)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+upstreamKey {
		t.Errorf("upstream Authorization = %q, want the Secret's key as Bearer", a)
	}
	// The call's request id is gatewayd's: the answer carries it and the upstream received it.
	if id := r.header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") || got.Header.Get("X-Request-Id") != id {
		t.Errorf("request id %q on the answer, %q at the upstream; want one req_ id on both", id, got.Header.Get("X-Request-Id"))
	}
	var fwd map[string]any
	if err := json.Unmarshal(got.Body, &fwd); err != nil {
		t.Fatal(err)
	}
	body["model"] = "echo-large"
	wantJSON, _ := json.Marshal(body)
	gotJSON, _ := json.Marshal(fwd)
	if string(wantJSON) != string(gotJSON) {
		t.Errorf("forwarded body\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if u := r.json(t)["usage"].(map[string]any); u["prompt_tokens"] != float64(3) {
		t.Errorf("usage not relayed: %v", u)
	}

	for _, tc := range []struct {
		path, model string
		status      int
		code        string
	}{
		{"/v1/completions", slug, 200, ""},
		{"/v1/embeddings", slug, 200, ""},
		{"/v1/chat/completions", "not-a-slug", 404, "model_does_not_exist"},
		{"/v1/chat/completions", "broken", 503, ""}, // the upstream's own 503 body, passed through
		{"/v1/chat/completions", "down", 502, "model_unavailable"},
		{"/v1/chat/completions", "slow", 504, "timeout"},
		{"/v1/chat/completions", "unrouted", 503, "model_not_ready"},
	} {
		r := f.post(tc.path, "Api-Key "+f.keys["root"], map[string]any{"model": tc.model, "prompt": "a b", "input": "a b", "messages": []any{}})
		if r.status != tc.status {
			t.Errorf("%s %s: status %d, want %d: %s", tc.path, tc.model, r.status, tc.status, r.body)
			continue
		}
		if tc.code != "" {
			if c := r.json(t)["error_code"]; c != tc.code {
				t.Errorf("%s %s: error_code %v, want %s", tc.path, tc.model, c, tc.code)
			}
		}
		if tc.model == "broken" && !strings.Contains(string(r.body), "fake upstream failure 503") {
			t.Errorf("upstream error body not passed through: %s", r.body)
		}
	}
}

// TestAuth: only the Api-Key scheme works for federated keys, and Bearer is refused with a message naming it.
func TestAuth(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	body := map[string]any{"model": slug, "messages": []any{}}
	for _, tc := range []struct {
		name, auth string
		status     int
		mention    string
	}{
		{"Bearer", "Bearer " + f.keys["root"], 401, "Api-Key"},
		{"missing", "", 401, "Api-Key"},
		{"wrong secret", "Api-Key " + f.keys["root"][:17] + strings.Repeat("x", 32), 401, "Invalid"},
		{"short", "Api-Key abc", 401, "Invalid"},
		{"Api-Key", "Api-Key " + f.keys["root"], 200, ""},
		{"lowercase scheme", "api-key " + f.keys["root"], 200, ""},
	} {
		r := f.post("/v1/chat/completions", tc.auth, body)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.status, tc.status, r.body)
			continue
		}
		if tc.mention != "" {
			if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, tc.mention) {
				t.Errorf("%s: error %q does not mention %q", tc.name, msg, tc.mention)
			}
		}
	}
}

// TestRevocation: a snapshot without a key, or without a group and its subtree, makes the next call 401.
func TestRevocation(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "CASCADING", groups: tree(func(string) []gatewayv1.ModelConfig { return models(slug) })})
	for _, g := range []string{"leaf-a", "leaf-b", "mid"} {
		if r := f.chat(g, slug); r.status != http.StatusOK {
			t.Fatalf("%s before revocation: %d", g, r.status)
		}
	}
	// Delete leaf-a's key.
	f.snap.APIKeys = dropKeys(f.snap.APIKeys, "leaf-a")
	f.publish()
	if r := f.chat("leaf-a", slug); r.status != http.StatusUnauthorized {
		t.Fatalf("revoked key: status %d, want 401", r.status)
	}
	if r := f.chat("leaf-b", slug); r.status != http.StatusOK {
		t.Fatalf("other key of the tree: status %d, want 200", r.status)
	}
	// Delete the mid group: it and its subtree leave the snapshot.
	var groups []snapshot.Group
	for _, g := range f.snap.Groups {
		if g.ID == "root" {
			groups = append(groups, g)
		}
	}
	f.snap.Groups = groups
	f.snap.APIKeys = dropKeys(f.snap.APIKeys, "mid", "leaf-b")
	f.publish()
	for _, g := range []string{"mid", "leaf-b"} {
		if r := f.chat(g, slug); r.status != http.StatusUnauthorized {
			t.Fatalf("%s after its group was deleted: status %d, want 401", g, r.status)
		}
	}
	if r := f.chat("root", slug); r.status != http.StatusOK {
		t.Fatalf("root: status %d", r.status)
	}
}

func dropKeys(keys []snapshot.APIKey, groups ...string) []snapshot.APIKey {
	var out []snapshot.APIKey
	for _, k := range keys {
		drop := false
		for _, g := range groups {
			drop = drop || k.GroupID == g
		}
		if !drop {
			out = append(out, k)
		}
	}
	return out
}

// TestBadSnapshotsKeepLastGood: corrupt, older and partial snapshots are refused with a metric, and the last
// good one keeps serving; a good chunked snapshot then loads.
func TestBadSnapshotsKeepLastGood(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}, {ID: "other", Models: models(slug)}}})
	ctx := context.Background()
	// The next snapshot revokes root's key, so serving it by mistake would show.
	next := *f.snap
	next.APIKeys = dropKeys(f.snap.APIKeys, "root")
	payload, sum, err := snapshot.Encode(&next)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), payload...)
	corrupt[len(corrupt)/2] ^= 0xff

	errorsBefore := f.metric(`modelgate_snapshot_load_errors_total{namespace="` + f.ns + `"}`)
	steps := []struct {
		name    string
		publish func() error
	}{
		{"corrupt payload", func() error { return gatewaytest.PublishPayload(ctx, cs, f.ns, 2, sum, corrupt, 0) }},
		{"corrupt chunk", func() error { return gatewaytest.PublishPayload(ctx, cs, f.ns, 3, sum, corrupt, 64) }},
		{"not gzip", func() error {
			return gatewaytest.PublishPayload(ctx, cs, f.ns, 4, snapshot.Checksum([]byte("junk")), []byte("junk"), 0)
		}},
		{"wrong namespace", func() error {
			other := next
			other.Namespace = "someone-else"
			payload, sum, err := snapshot.Encode(&other)
			if err != nil {
				return err
			}
			return gatewaytest.PublishPayload(ctx, cs, f.ns, 5, sum, payload, 0)
		}},
	}
	for i, s := range steps {
		if err := s.publish(); err != nil {
			t.Fatal(err)
		}
		want := errorsBefore + float64(i+1)
		if !f.waitMetric(`modelgate_snapshot_load_errors_total{namespace="`+f.ns+`"}`, want) {
			t.Fatalf("%s: load error not counted (want %v)", s.name, want)
		}
		if v := f.gw.View().Namespace(f.ns).Version; v != 1 {
			t.Fatalf("%s: serving version %d, want the last good 1", s.name, v)
		}
		if r := f.chat("root", slug); r.status != http.StatusOK {
			t.Fatalf("%s: last good snapshot not serving: %d", s.name, r.status)
		}
	}
	// A good chunked snapshot loads.
	published := time.Now().Truncate(time.Second)
	if err := gatewaytest.Publish(ctx, cs, &next, 6, 64); err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.WaitVersion(f.gw, f.ns, 6, loadDeadline); err != nil {
		t.Fatal(err)
	}
	if r := f.chat("root", slug); r.status != http.StatusUnauthorized {
		t.Fatalf("chunked snapshot v6 not applied: root's key still works (%d)", r.status)
	}
	if v := f.metric(`modelgate_snapshot_version{namespace="` + f.ns + `"}`); v != 6 {
		t.Errorf("modelgate_snapshot_version = %v, want 6", v)
	}
	// The last load time is that of v6, after the refusals: what tells a stale replica (docs/operations.md).
	loadedAt := f.metric(`modelgate_snapshot_last_load_timestamp_seconds{namespace="` + f.ns + `"}`)
	if loadedAt < float64(published.Unix()) {
		t.Errorf("modelgate_snapshot_last_load_timestamp_seconds = %v, want the load of v6, after %d", loadedAt, published.Unix())
	}
	// An older version is refused.
	if err := gatewaytest.Publish(ctx, cs, f.snap, 3, 0); err != nil {
		t.Fatal(err)
	}
	if !f.waitMetric(`modelgate_snapshot_load_errors_total{namespace="`+f.ns+`"}`, errorsBefore+float64(len(steps)+1)) {
		t.Fatal("older version not counted as a load error")
	}
	if r := f.chat("root", slug); r.status != http.StatusUnauthorized {
		t.Fatalf("older snapshot was applied: %d", r.status)
	}
}

// metric scrapes /metrics for one series; -1 when absent.
func (f *fixture) metric(series string) float64 {
	resp, err := http.Get(f.metricsURL + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	if strings.Contains(series, "_total") {
		return 0
	}
	return -1
}

func (f *fixture) waitMetric(series string, want float64) bool {
	for range 3000 {
		if f.metric(series) >= want {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestStreaming: chunks reach the client one by one (the upstream sends chunk i+1 only after the client has
// read chunk i), the hidden usage chunk is stripped unless asked for, and tokens are counted from it.
func TestStreaming(t *testing.T) {
	gate := make(chan struct{})
	const deltas = 4
	for _, wantUsage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", wantUsage), func(t *testing.T) {
			f := newFixture(t, fixtureOpts{mode: "CASCADING",
				upstream: upstream.Options{Gate: gate, StreamDeltas: deltas, CompletionTokens: 11},
				groups: []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{
					limited(slug, "TOKEN", "MINUTE", 1000)}}}})
			body := map[string]any{"model": slug, "stream": true, "messages": []any{map[string]any{"role": "user", "content": "one two three four"}}}
			if wantUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			br := f.openStream("root", body)
			for i := range deltas {
				// The upstream may send chunk i now, and not before.
				select {
				case gate <- struct{}{}:
				case <-time.After(loadDeadline):
					t.Fatalf("the upstream never asked for chunk %d", i)
				}
				data := readSSE(t, br)
				if want := fmt.Sprintf(`"content":"tok%d "`, i); !strings.Contains(data, want) {
					t.Fatalf("chunk %d = %s, want %s", i, data, want)
				}
			}
			var rest []string
			for {
				d := readSSE(t, br)
				rest = append(rest, d)
				if d == "[DONE]" {
					break
				}
			}
			sawUsage := false
			for _, d := range rest {
				sawUsage = sawUsage || strings.Contains(d, `"prompt_tokens"`)
			}
			if sawUsage != wantUsage {
				t.Fatalf("usage chunk delivered = %v, want %v (rest of stream: %q)", sawUsage, wantUsage, rest)
			}
			got, _ := f.upstream.Last()
			if !strings.Contains(string(got.Body), `"stream_options":{"include_usage":true}`) {
				t.Errorf("upstream was not asked for usage: %s", got.Body)
			}
			// 4 prompt words + 11 completion tokens, from the final usage chunk. Settling follows the last
			// write to the client, so wait for it.
			k := limits.BucketKey{Namespace: f.ns, Group: "root", Slug: slug, Type: limits.Token, Unit: limits.Minute}
			deadline := time.Now().Add(loadDeadline)
			for f.store.Usage(k, f.clock.Now()) != 15 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := f.store.Usage(k, f.clock.Now()); n != 15 {
				t.Fatalf("TOKEN bucket holds %d, want 15", n)
			}
		})
	}
}

// openStream posts a streamed chat completion with group's key, requires a 200 event stream, and returns its
// reader; the body is closed when the test ends.
func (f *fixture) openStream(group string, body map[string]any) *bufio.Reader {
	f.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Api-Key "+f.keys[group])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		f.t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

// TestStopLetsStreamsFinish: a stop (SIGTERM in cmd/gatewayd) refuses new connections but lets a stream in
// flight run to its end, usage and settlement included; it used to cancel every call the moment it began.
func TestStopLetsStreamsFinish(t *testing.T) {
	gate := make(chan struct{})
	const deltas = 4
	f := newFixture(t, fixtureOpts{mode: "CASCADING",
		upstream: upstream.Options{Gate: gate, StreamDeltas: deltas, CompletionTokens: 11},
		groups:   []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{limited(slug, "TOKEN", "MINUTE", 1000)}}}})
	br := f.openStream("root", map[string]any{"model": slug, "stream": true, "messages": []any{map[string]any{"role": "user", "content": "one two three four"}}})
	next := func(i int) {
		t.Helper()
		select {
		case gate <- struct{}{}:
		case <-time.After(loadDeadline):
			t.Fatalf("the upstream never asked for chunk %d", i)
		}
		if data := readSSE(t, br); !strings.Contains(data, fmt.Sprintf(`"content":"tok%d "`, i)) {
			t.Fatalf("chunk %d = %s", i, data)
		}
	}
	next(0)
	f.stop()
	// The listener closes at once: a new call cannot get in.
	deadline := time.Now().Add(loadDeadline)
	for {
		c, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("gatewayd still accepts connections after the stop began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 1; i < deltas; i++ {
		next(i)
	}
	for d := ""; d != "[DONE]"; {
		d = readSSE(t, br)
	}
	select {
	case <-f.stopped:
	case <-time.After(loadDeadline):
		t.Fatal("gatewayd did not stop once its last call ended")
	}
	k := limits.BucketKey{Namespace: f.ns, Group: "root", Slug: slug, Type: limits.Token, Unit: limits.Minute}
	if n := f.store.Usage(k, f.clock.Now()); n != 15 {
		t.Fatalf("TOKEN bucket holds %d after the stop, want the stream's 15", n)
	}
}

// TestStopDrainsFirst: with ShutdownDrain, a stop keeps serving for the drain with /readyz failing and every
// answer saying Connection: close (so a Service and its clients move to other replicas before the listener closes:
// a rolling update fails no call), then closes the listener.
func TestStopDrainsFirst(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", shutdownDrain: 3 * time.Second,
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	ready := func() int {
		resp, err := http.Get(f.url + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz before the stop: %d", code)
	}
	f.stop()
	deadline := time.Now().Add(loadDeadline)
	for ready() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still answers 200 after the stop began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still serving, on a new connection, and telling the client to close it.
	res := f.chat("root", slug)
	if res.status != http.StatusOK || !res.closed {
		t.Fatalf("a call while draining: status %d, Connection: close %v", res.status, res.closed)
	}
	select {
	case <-f.stopped:
	case <-time.After(loadDeadline):
		t.Fatal("gatewayd did not stop after the drain")
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://")); err == nil {
		c.Close()
		t.Fatal("gatewayd still accepts connections after it stopped")
	}
}

// TestMetrics: the series of docs/operations.md "Metrics" carry the snapshot's external id and slug, and unknown
// slugs get no label.
func TestMetrics(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: []gatewayv1.ModelConfig{
		limited(slug, "REQUEST", "MINUTE", 1)}}}})
	f.chat("root", slug)
	f.chat("root", slug)
	f.chat("root", "made-up-by-the-caller")
	ws := `,workspace="` + f.ns + `"}`
	for series, want := range map[string]float64{
		`service_model_api_inference_requests_total{external_entity_id="ext-root",model="demo/echo",status_code="200"` + ws: 1,
		`service_model_api_inference_requests_total{external_entity_id="ext-root",model="demo/echo",status_code="429"` + ws: 1,
		`service_model_api_inference_requests_total{external_entity_id="ext-root",model="",status_code="404"` + ws:          1,
		`service_model_api_tokens_total{external_entity_id="ext-root",model="demo/echo",token_type="input"` + ws:            2,
		`service_model_api_tokens_total{external_entity_id="ext-root",model="demo/echo",token_type="output"` + ws:           5,
	} {
		if got := f.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if f.metric(`service_model_api_inference_requests_total{external_entity_id="ext-root",model="made-up-by-the-caller",status_code="404"`+ws) > 0 {
		t.Error("a caller-supplied slug became a label value")
	}
}

// TestClientDisconnectCancelsUpstream: a streaming client that goes away cancels the upstream call.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	gate := make(chan struct{}, 1)
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", upstream: upstream.Options{Gate: gate, StreamDeltas: 5},
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"model": slug, "stream": true, "messages": []any{}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Api-Key "+f.keys["root"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}
	readSSE(t, bufio.NewReader(resp.Body))
	cancel() // the client leaves with four chunks to go
	resp.Body.Close()
	deadline := time.Now().Add(loadDeadline)
	for f.upstream.Cancelled() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if f.upstream.Cancelled() != 1 {
		t.Fatal("the upstream call was not cancelled when the client left")
	}
}

// TestBodyCap: a body over the cap is refused before anything is forwarded.
func TestBodyCap(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	huge := strings.Repeat("word ", gatewayd.DefaultMaxBodyBytes/5+1)
	r := f.post("/v1/chat/completions", "Api-Key "+f.keys["root"], map[string]any{"model": slug, "messages": []any{map[string]any{"content": huge}}})
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", r.status)
	}
	if n := len(f.upstream.Requests()); n != 0 {
		t.Fatalf("upstream got %d calls", n)
	}
}

// TestAmbiguousBodiesRefused: a body whose model or stream flag an upstream could read differently from gatewayd
// (a duplicate, or a name in another case) is refused before anything is charged or forwarded, so a caller can
// neither run a model its group lacks nor stream an answer that is charged no tokens.
func TestAmbiguousBodiesRefused(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	for name, body := range map[string]string{
		"model case variant":  `{"model":"not-allowed","Model":"` + slug + `","messages":[]}`,
		"model duplicate":     `{"model":"not-allowed","model":"` + slug + `","messages":[]}`,
		"stream case variant": `{"model":"` + slug + `","stream":true,"Stream":false,"messages":[]}`,
		"stream_options case variant": `{"model":"` + slug + `","stream":true,` +
			`"stream_options":{"include_usage":false,"Include_usage":true},"messages":[]}`,
	} {
		r := f.post("/v1/chat/completions", "Api-Key "+f.keys["root"], json.RawMessage(body))
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400: %s", name, r.status, r.body)
			continue
		}
		if detail, _ := r.json(t)["detail"].(string); !strings.Contains(strings.ToLower(detail), "case variant") && !strings.Contains(detail, "duplicate") {
			t.Errorf("%s: detail %q does not say what is refused", name, detail)
		}
	}
}

// TestOnlyMarkedSecretsReachUpstreams: an Endpoint that names a Secret not labelled as an upstream credential, or
// one that holds key material, gets 502 and the upstream never sees the Secret's value, so a key that may write
// Endpoints cannot read the workspace's keys or webhook secrets through a server of its own.
func TestOnlyMarkedSecretsReachUpstreams(t *testing.T) {
	thief := upstream.New(upstream.Options{})
	t.Cleanup(thief.Close)
	endpoints := []snapshot.Endpoint{}
	for _, name := range []string{"plain", "minted"} {
		endpoints = append(endpoints, snapshot.Endpoint{ID: name, Slug: name, Targets: []snapshot.Target{{
			Provider: "OPENAI", BaseURL: thief.BaseURL(), APIKeySecret: &snapshot.SecretRef{Name: name, Key: "api_key"}}}})
	}
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", endpoints: endpoints,
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "plain", "minted")}}})
	ctx := context.Background()
	if err := gatewaytest.CreateSecret(ctx, cs, f.ns, "plain", "api_key", "sk-plain-secret"); err != nil {
		t.Fatal(err)
	}
	// A Secret the key controller minted carries the key-material label; adding the upstream label does not help.
	if _, err := cs.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "minted", Namespace: f.ns,
		Labels: map[string]string{gatewayv1.LabelKeyMaterial: "true", gatewayv1.LabelUpstreamCredential: "true"}},
		Data: map[string][]byte{"api_key": []byte("sk-minted-secret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"plain", "minted"} {
		r := f.chat("root", model)
		if r.status != http.StatusBadGateway || r.json(t)["error_code"] != "model_unavailable" {
			t.Errorf("%s: status %d, want 502 model_unavailable: %s", model, r.status, r.body)
		}
	}
	if got := len(thief.Requests()); got != 0 {
		t.Fatalf("the upstream received %d calls with unmarked credentials: %+v", got, thief.Requests())
	}
	if r := f.chat("root", slug); r.status != http.StatusOK {
		t.Fatalf("a marked Secret: status %d: %s", r.status, r.body)
	}
}

// TestUpstreamCredentialStaysOnItsHosts: a Secret that lists its hosts (gatewayv1.AnnotationUpstreamHosts) is sent
// to those only: an Endpoint that points it at another server (here the same address on another port) gets 502,
// and that server never sees the key, even if the Endpoint got past admission.
func TestUpstreamCredentialStaysOnItsHosts(t *testing.T) {
	home, thief := upstream.New(upstream.Options{}), upstream.New(upstream.Options{})
	t.Cleanup(home.Close)
	t.Cleanup(thief.Close)
	target := func(id, base string) snapshot.Endpoint {
		return snapshot.Endpoint{ID: id, Slug: id, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: base,
			APIKeySecret: &snapshot.SecretRef{Name: "bound", Key: "api_key"}}}}
	}
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", endpoints: []snapshot.Endpoint{target("home", home.BaseURL()), target("away", thief.BaseURL())},
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "home", "away")}}})
	u, err := url.Parse(home.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(f.ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: f.ns,
		Labels:      map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
		Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: "api.example.com, " + u.Host}},
		Data: map[string][]byte{"api_key": []byte("sk-bound-secret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := f.chat("root", "away"); r.status != http.StatusBadGateway || r.json(t)["error_code"] != "model_unavailable" {
		t.Errorf("away: status %d, want 502 model_unavailable: %s", r.status, r.body)
	}
	if got := len(thief.Requests()); got != 0 {
		t.Fatalf("a host the Secret does not list received %d calls: %+v", got, thief.Requests())
	}
	if r := f.chat("root", "home"); r.status != http.StatusOK {
		t.Fatalf("home: status %d: %s", r.status, r.body)
	}
	if reqs := home.Requests(); len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer sk-bound-secret" {
		t.Fatalf("the listed host received %+v, want one call with the key", reqs)
	}
}

// TestMetricsRoutes: the address customers reach serves no /metrics, and GET /v1/metrics takes a key that may
// export metrics. TestServeAllNamespaces shows that each workspace sees its own series only.
func TestMetricsRoutes(t *testing.T) {
	export, exportRec := gatewaytest.NewWorkspaceKey("export", "WORKSPACE_EXPORT_METRICS")
	invoke, invokeRec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}},
		workspace: []snapshot.WorkspaceAPIKey{exportRec, invokeRec}})
	f.chat("root", slug)
	if code := f.get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the serving address: %d, want 404", code)
	}
	// The autoscaler's stats name every workspace's deployments: the metrics listener only (test/autoscale).
	if code := f.get("/internal/stats"); code != http.StatusNotFound {
		t.Errorf("/internal/stats on the serving address: %d, want 404", code)
	}
	for auth, want := range map[string]int{"Bearer " + export: 200, "Api-Key " + export: 200, "Bearer " + invoke: 403,
		"Api-Key " + f.keys["root"]: 401, "": 401} {
		if code, body := getWith(t, f.url+"/v1/metrics", auth); code != want {
			t.Errorf("%.20s: %d, want %d: %s", auth, code, want, body)
		}
	}
}

// getWith sends a GET with an Authorization header and returns the status and body.
func getWith(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	status, body := sendWith(t, http.MethodGet, url, auth, "")
	return status, string(body)
}

// sendWith sends method to url with an Authorization header (none when auth is empty) and a JSON body, and
// returns the status and body.
func sendWith(t *testing.T, method, url, auth, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestInFlightCapPerKey: one key holds at most MaxInFlightBytesPerKey of bodies at once; a call past it answers
// 429 at once, another key is not held to it, and the bytes are free again when the calls end.
func TestInFlightCapPerKey(t *testing.T) {
	body, _ := json.Marshal(map[string]any{"model": slug, "messages": []any{map[string]any{"role": "user", "content": "hello world"}}})
	// Two such bodies fit, a third does not.
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", maxInFlightBytes: int64(2*len(body) + len(body)/2), upstream: upstream.Options{Delay: time.Second},
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}, {ID: "other", Models: models(slug)}}})
	call := func(group string) result {
		return f.post("/v1/chat/completions", "Api-Key "+f.keys[group], json.RawMessage(body))
	}
	statuses := make(chan int, 2)
	for range 2 {
		go func() { statuses <- call("root").status }()
	}
	// Wait until both calls hold their bytes: the upstream has seen both.
	deadline := time.Now().Add(loadDeadline)
	for len(f.upstream.Requests()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := call("root")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("third call in flight: status %d, Retry-After %q, want 429 with Retry-After: %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := call("other"); r.status != http.StatusOK {
		t.Errorf("another key is not held to root's cap: status %d: %s", r.status, r.body)
	}
	for range 2 {
		if s := <-statuses; s != http.StatusOK {
			t.Errorf("a call within the cap: status %d", s)
		}
	}
	if r := call("root"); r.status != http.StatusOK {
		t.Errorf("after the calls ended: status %d, want 200: %s", r.status, r.body)
	}
}

// TestUnroutedAnswersInTheEnvelope: a path no route serves is a 404, and a route called with another method a 405
// with Allow, both in the {error, error_code, detail} envelope, not ServeMux's plain text.
func TestUnroutedAnswersInTheEnvelope(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/nowhere", 404, "not_found", ""},
		{http.MethodGet, "/v1/chat/completions", 405, "method_not_allowed", "POST"},
		{http.MethodDelete, "/v1/gateway/groups", 405, "method_not_allowed", "GET, POST"},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env map[string]any
		if resp.StatusCode != tc.status || json.Unmarshal(b, &env) != nil || env["error_code"] != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d %q Allow %q, want %d %s Allow %q", tc.method, tc.path, resp.StatusCode, b, resp.Header.Get("Allow"), tc.status, tc.code, tc.allow)
		}
	}
}

// TestUpstreamTextErrorsGetTheEnvelope: an upstream that answers an error status with a text page (a misrouted
// path, a proxy's error) does not reach the client raw: the client gets the envelope with the upstream's status.
// When to retry travels on: a text 429 keeps its Retry-After in the envelope, a JSON 429 is relayed with it.
func TestUpstreamTextErrorsGetTheEnvelope(t *testing.T) {
	text := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case strings.HasPrefix(r.URL.Path, "/busy/"):
			w.Header().Set("Retry-After", "9")
			http.Error(w, "busy", http.StatusTooManyRequests)
		case strings.HasPrefix(r.URL.Path, "/busy-json/"):
			w.Header().Set("Retry-After", "4")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"message":"busy","type":"rate_limit_exceeded"}}`))
		default:
			http.Error(w, "<html>404 page not found</html>", http.StatusNotFound)
		}
	}))
	t.Cleanup(text.Close)
	endpoint := func(slug, path string) snapshot.Endpoint {
		return snapshot.Endpoint{ID: slug, Slug: slug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: text.URL + path}}}
	}
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "misrouted", "busy", "busy-json")}},
		endpoints: []snapshot.Endpoint{endpoint("misrouted", "/v1"), endpoint("busy", "/busy"), endpoint("busy-json", "/busy-json")}})
	r := f.chat("root", "misrouted")
	body := r.json(t)
	detail, _ := body["fields"].(map[string]any)
	if r.status != http.StatusNotFound || body["error_code"] != "model_does_not_exist" || detail["upstream_status"] != 404.0 {
		t.Fatalf("status %d body %s, want 404 model_does_not_exist with upstream_status 404", r.status, r.body)
	}
	r = f.chat("root", "busy")
	if body := r.json(t); r.status != http.StatusTooManyRequests || body["error_code"] != "rate_limited" || r.header.Get("Retry-After") != "9" {
		t.Fatalf("text 429: %d %s Retry-After %q, want 429 rate_limited with the upstream's Retry-After 9", r.status, r.body, r.header.Get("Retry-After"))
	}
	r = f.chat("root", "busy-json")
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "rate_limit_exceeded") || r.header.Get("Retry-After") != "4" {
		t.Fatalf("JSON 429: %d %s Retry-After %q, want the upstream's answer with its Retry-After 4", r.status, r.body, r.header.Get("Retry-After"))
	}
}

// TestSlowBodyIsCut: a client that sends its headers and then trickles, or stalls, its body cannot hold a call
// open: the read of the body has a deadline, and the connection is cut when it passes.
func TestSlowBodyIsCut(t *testing.T) {
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", bodyReadTimeout: 300 * time.Millisecond,
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug)}}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Headers and the start of a 1000-byte body, then nothing more.
	_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Api-Key %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":", f.keys["root"])
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("a stalled body got %d: %s", resp.StatusCode, b)
		}
		return
	}
	// Or the server cut the connection: either way the call did not wait for the client's read deadline.
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server held the stalled call for 20 s")
	}
}

// TestAbsentSecretIsCached: calls to an Endpoint whose Secret was deleted do not each read the API server.
func TestAbsentSecretIsCached(t *testing.T) {
	kube.Start(t)
	var gets atomic.Int64
	c := rest.CopyConfig(asGatewayd(t))
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/secrets/") {
				gets.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	secrets := gwupstream.NewSecrets(kubernetes.NewForConfigOrDie(c), time.Minute)
	ns, err := gatewaytest.CreateNamespace(context.Background(), cs, "absent")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := secrets.Upstream(context.Background(), ns, &snapshot.SecretRef{Name: "deleted", Key: "api_key"}, "https://api.example.com/v1"); err == nil {
			t.Fatal("an absent Secret answered")
		}
	}
	if n := gets.Load(); n != 1 {
		t.Fatalf("50 calls read the absent Secret %d times, want once per TTL", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
