package gatewayd_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
)

// costEvent is what a client reads of a billing event, from GET /v1/gateway/events or the billing webhook.
type costEvent struct {
	RequestID    string `json:"requestId"`
	ModelSlug    string `json:"modelSlug"`
	GroupID      string `json:"groupId"`
	StatusCode   int    `json:"statusCode"`
	CostMicroUsd *int64 `json:"costMicroUsd"`
}

// listEvents reads every billing event of the workspace through GET /v1/gateway/events, waiting until there are n.
func (f *fixture) listEvents(admin string, n int) []costEvent {
	f.t.Helper()
	var page struct {
		Items []costEvent `json:"items"`
	}
	for range 600 {
		code, _, body := getV1(f.t, f.url+"/v1/gateway/events?limit=1000", admin)
		if code != http.StatusOK {
			f.t.Fatalf("GET /v1/gateway/events = %d %s", code, body)
		}
		if err := json.Unmarshal(body, &page); err != nil {
			f.t.Fatal(err)
		}
		if len(page.Items) >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(page.Items) != n {
		f.t.Fatalf("%d billing events, want %d", len(page.Items), n)
	}
	return page.Items
}

// usageCost is the cost of each slug of GET /v1/gateway/usage?query: the series' totals, and the sum of its buckets.
func (f *fixture) usageCost(admin, query string) (totals, buckets map[string]int64) {
	f.t.Helper()
	code, _, body := getV1(f.t, f.url+"/v1/gateway/usage?"+query, admin)
	if code != http.StatusOK {
		f.t.Fatalf("GET /v1/gateway/usage?%s = %d %s", query, code, body)
	}
	var a struct {
		Series []struct {
			Slug   string `json:"slug"`
			Totals struct {
				Cost *int64 `json:"cost_micro_usd"`
			} `json:"totals"`
			Buckets []struct {
				Cost int64 `json:"cost_micro_usd"`
			} `json:"buckets"`
		} `json:"series"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		f.t.Fatal(err)
	}
	totals, buckets = map[string]int64{}, map[string]int64{}
	for _, s := range a.Series {
		if s.Totals.Cost == nil {
			f.t.Fatalf("usage series %s has no cost_micro_usd: %s", s.Slug, body)
		}
		totals[s.Slug] = *s.Totals.Cost
		for _, b := range s.Buckets {
			buckets[s.Slug] += b.Cost
		}
	}
	return totals, buckets
}

// costReceiver is a billing webhook that keeps the events it receives, by request id.
type costReceiver struct {
	mu     sync.Mutex
	events map[string]costEvent
}

func (rc *costReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct {
		Data struct {
			Events []costEvent `json:"events"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(r.Body)
	if json.Unmarshal(body, &msg) != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, e := range msg.Data.Events {
		rc.events[e.RequestID] = e
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rc *costReceiver) wait(t *testing.T, n int) map[string]costEvent {
	t.Helper()
	for range 600 {
		rc.mu.Lock()
		got := len(rc.events)
		rc.mu.Unlock()
		if got >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.events) != n {
		t.Fatalf("the billing webhook received %d events, want %d", len(rc.events), n)
	}
	return rc.events
}

// priced is the fixture's upstream target at the given prices (empty: that price is absent).
func priced(f *fixture, input, output string) snapshot.Target {
	t := f.snap.Endpoints[0].Targets[0]
	t.Pricing = &snapshot.Pricing{InputPerMillionTokens: input, OutputPerMillionTokens: output}
	return t
}

// costMetric sums service_model_api_cost_micro_usd_total of model by token type.
func (f *fixture) costMetric(model string) map[string]float64 {
	f.t.Helper()
	resp, err := http.Get(f.metricsURL + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "service_model_api_cost_micro_usd_total{") || !strings.Contains(line, `model="`+model+`"`) {
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		for _, typ := range []string{"input", "output"} {
			if strings.Contains(line, `token_type="`+typ+`"`) {
				out[typ] += v
			}
		}
	}
	return out
}

// TestCostOnEveryRecord: each call's cost (docs/limits.md "Billing events") is its tokens at the answering
// target's prices, in micro-USD rounded half up, on its billing event (GET /v1/gateway/events and the webhook
// body alike), in the usage route per group and for the workspace (equal to the events' sum), and in
// service_model_api_cost_micro_usd_total; an unpriced target's calls cost 0. Every call, the stream too, reports 2
// prompt and 5 completion tokens: at 0.25 USD per million input tokens a call costs 0.5 micro-USD, which rounds up to 1; at
// 1.5 and 0.3 it costs 3 + 1.5 = 4.5, which rounds up to 5.
func TestCostOnEveryRecord(t *testing.T) {
	admin, a := gatewaytest.NewWorkspaceKey("admin", string(gatewayv1.KeyTypeManageAll))
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{
		{ID: "acme", Models: models(slug, "priced/half", "priced/mixed")},
		{ID: "beta", Models: models("priced/mixed")},
	}, workspace: []snapshot.WorkspaceAPIKey{a}, billing: boltBilling(t)})
	f.clock.SetTime(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour)) // within the events' retention
	rc := &costReceiver{events: map[string]costEvent{}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	if err := gatewaytest.CreateSecret(context.Background(), cs, f.ns, "billing-webhook", "secret", "whsec_"+base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))); err != nil {
		t.Fatal(err)
	}
	f.snap.Workspace.BillingWebhook = &snapshot.BillingWebhook{URL: hook.URL, Secret: snapshot.SecretRef{Name: "billing-webhook", Key: "secret"}}
	f.snap.Endpoints = append(f.snap.Endpoints,
		endpoint("priced/half", []snapshot.Target{priced(f, "0.25", "")}, nil, nil),
		endpoint("priced/mixed", []snapshot.Target{priced(f, "1.5", "0.3")}, nil, nil))
	f.publish()

	wantCost := map[string]int64{slug: 0, "priced/half": 1, "priced/mixed": 5}
	calls := []struct{ group, slug string }{
		{"acme", slug}, {"acme", slug}, {"acme", "priced/half"}, {"acme", "priced/half"}, {"acme", "priced/half"},
		{"acme", "priced/mixed"}, {"acme", "priced/mixed"}, {"beta", "priced/mixed"},
	}
	for _, c := range calls {
		if r := f.chat(c.group, c.slug); r.status != http.StatusOK {
			t.Fatalf("%s calling %s = %d %s", c.group, c.slug, r.status, r.body)
		}
	}
	// A stream is costed from its usage chunk, which gatewayd asks for and strips when the client did not.
	br := f.openStream("beta", map[string]any{"model": "priced/mixed", "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": "hello world"}}})
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	calls = append(calls, struct{ group, slug string }{"beta", "priced/mixed"})

	perSlug, perGroupSlug := map[string]int64{}, map[string]int64{}
	for _, e := range f.listEvents(admin, len(calls)) {
		if e.CostMicroUsd == nil {
			t.Fatalf("event %s has no costMicroUsd", e.RequestID)
		}
		if *e.CostMicroUsd != wantCost[e.ModelSlug] {
			t.Errorf("event of %s: costMicroUsd %d, want %d", e.ModelSlug, *e.CostMicroUsd, wantCost[e.ModelSlug])
		}
		perSlug[e.ModelSlug] += *e.CostMicroUsd
		perGroupSlug[e.GroupID+" "+e.ModelSlug] += *e.CostMicroUsd
	}
	for id, e := range rc.wait(t, len(calls)) {
		if e.CostMicroUsd == nil {
			t.Fatalf("webhook event %s has no costMicroUsd", id)
		}
		if *e.CostMicroUsd != wantCost[e.ModelSlug] {
			t.Errorf("webhook event %s of %s: costMicroUsd %d, want %d", id, e.ModelSlug, *e.CostMicroUsd, wantCost[e.ModelSlug])
		}
	}

	// The rollup is written with the events: the usage route's cost is the events' sum, per slug, for the
	// workspace and for each group, in its totals and its buckets.
	totals, buckets := f.usageCost(admin, "")
	for _, s := range []string{slug, "priced/half", "priced/mixed"} {
		if totals[s] != perSlug[s] || buckets[s] != perSlug[s] {
			t.Errorf("workspace usage of %s: cost %d (buckets %d), want the events' %d", s, totals[s], buckets[s], perSlug[s])
		}
	}
	for _, g := range []string{"acme", "beta"} {
		totals, buckets := f.usageCost(admin, "window=24h&group_id="+g)
		for _, s := range []string{"priced/mixed"} {
			if want := perGroupSlug[g+" "+s]; totals[s] != want || buckets[s] != want {
				t.Errorf("usage of group %s, %s: cost %d (buckets %d), want the events' %d", g, s, totals[s], buckets[s], want)
			}
		}
	}
	if perSlug["priced/mixed"] != 20 || perSlug["priced/half"] != 3 || perSlug[slug] != 0 {
		t.Errorf("cost per slug %v", perSlug)
	}

	// The metric: per call, the input part is 2 × 1.5 = 3, the output part the rest of 5.
	if m := f.costMetric("priced/mixed"); m["input"] != 12 || m["output"] != 8 {
		t.Errorf("service_model_api_cost_micro_usd_total of priced/mixed = %v, want input 12 and output 8 (20 in all)", m)
	}
	if m := f.costMetric(slug); m["input"]+m["output"] != 0 {
		t.Errorf("service_model_api_cost_micro_usd_total of the unpriced %s = %v, want none", slug, m)
	}
}

// heldUpstream answers each chat call with 2 prompt and 5 completion tokens once the test lets it go: it tells
// arrived of each call, then waits for release.
type heldUpstream struct {
	arrived chan struct{}
	release chan struct{}
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.arrived <- struct{}{}
	<-u.release
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":2,"completion_tokens":5,"total_tokens":7}}`)
}

// TestPriceChangeAppliesToCallsThatStartAfterIt: a call is costed at the prices of the view it was routed with
// (docs/decisions.md "Prices and cost"). A call held at its upstream while a snapshot reprices the target still
// records its own price; a call that starts once the new snapshot is served records the new one.
func TestPriceChangeAppliesToCallsThatStartAfterIt(t *testing.T) {
	admin, a := gatewaytest.NewWorkspaceKey("admin", string(gatewayv1.KeyTypeManageAll))
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "acme", Models: models("held")}},
		workspace: []snapshot.WorkspaceAPIKey{a}, billing: boltBilling(t)})
	f.clock.SetTime(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour))
	up := &heldUpstream{arrived: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-up.release:
		default:
			close(up.release)
		}
	})
	target := snapshot.Target{Name: "held", Provider: "OPENAI", BaseURL: srv.URL + "/v1",
		Pricing: &snapshot.Pricing{InputPerMillionTokens: "1", OutputPerMillionTokens: "1"}} // 7 tokens: 7 micro-USD
	f.snap.Endpoints = append(f.snap.Endpoints, endpoint("held", []snapshot.Target{target}, nil, nil))
	f.publish()

	call := func(id chan<- string) {
		r := f.chat("acme", "held")
		if r.status != http.StatusOK {
			t.Errorf("call = %d %s", r.status, r.body)
		}
		id <- r.header.Get(requestlog.Header)
	}
	first, second := make(chan string, 1), make(chan string, 1)
	go call(first)
	<-up.arrived // the first call is at its upstream, routed with the old prices
	f.snap.Endpoints[1].Targets[0].Pricing = &snapshot.Pricing{InputPerMillionTokens: "10", OutputPerMillionTokens: "10"}
	f.publish() // served once it returns
	go call(second)
	<-up.arrived
	close(up.release)
	firstID, secondID := <-first, <-second

	byID := map[string]int64{}
	for _, e := range f.listEvents(admin, 2) {
		byID[e.RequestID] = *e.CostMicroUsd
	}
	if byID[firstID] != 7 || byID[secondID] != 70 {
		t.Fatalf("costs: %d for the call that started before the new price (want 7), %d for the one after (want 70)", byID[firstID], byID[secondID])
	}
}
