package state

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

type usageCounters struct {
	Requests     int64 `json:"requests"`
	Throttled    int64 `json:"throttled"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	CostMicroUsd int64 `json:"cost_micro_usd"`
}

type usageAnswer struct {
	BucketSeconds int64 `json:"bucket_seconds"`
	Series        []struct {
		Slug   string `json:"slug"`
		Limits []struct {
			Type          string `json:"type"`
			Unit          string `json:"unit"`
			Threshold     int64  `json:"threshold"`
			SourceGroupID string `json:"source_group_id"`
			PerBucket     int64  `json:"per_bucket"`
		} `json:"limits"`
		Totals  usageCounters `json:"totals"`
		Buckets []struct {
			Start string `json:"start"`
			usageCounters
		} `json:"buckets"`
	} `json:"series"`
}

// TestUsageCountsWhatWasCalled: child a of a CASCADING root calls demo/echo five times against root's 3 per minute
// (three answered, two 429s) and demo/other once, its sibling b once; GET /v1/gateway/usage of a real gatewayd
// counts, per slug, the calls, the 429s, the tokens and the cost the billing events carry (both Endpoints priced),
// for the group and for the workspace, with root's limit on a's chart, on the embedded store and on redis-server.
func TestUsageCountsWhatWasCalled(t *testing.T) {
	onEachStore(t, testUsage)
}

func testUsage(t *testing.T, flags ...string) {
	w := newWorkspace(t, gatewayv1.LimitEnforcement("CASCADING"), []gatewaytest.Group{
		{ID: "root", Models: []gatewayv1.ModelConfig{
			{Slug: slug, RateLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 3}}},
			{Slug: otherSlug},
		}},
		{ID: "a", Parent: "root", Models: []gatewayv1.ModelConfig{{Slug: slug}, {Slug: otherSlug}}},
		{ID: "b", Parent: "root", Models: []gatewayv1.ModelConfig{{Slug: otherSlug}}},
	}, func(s *snapshot.Snapshot) {
		s.Endpoints[0].Targets[0].Pricing = &snapshot.Pricing{InputPerMillionTokens: "1.5", OutputPerMillionTokens: "0.3"}
		other := s.Endpoints[0]
		other.ID, other.Slug = "other", otherSlug
		s.Endpoints = append(s.Endpoints, other)
	})
	g := startGatewayd(t, w.ns, flags...)
	statuses := map[int]int{}
	for range 5 {
		statuses[chat(g.url, w.keys["a"]).status]++
	}
	if statuses[200] != 3 || statuses[429] != 2 {
		t.Fatalf("a's calls of %s: %v, want three 200 and two 429 under root's 3 per minute", slug, statuses)
	}
	for _, key := range []string{w.keys["a"], w.keys["b"]} {
		if got := chatModel(g.url, key, otherSlug); got.status != 200 {
			t.Fatalf("a call of %s = %d %v", otherSlug, got.status, got.err)
		}
	}

	get := func(key, query string) (int, usageAnswer) {
		req, _ := http.NewRequest(http.MethodGet, g.url+"/v1/gateway/usage?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a usageAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}
	// The events, and the rollup with them, are written off the hot path: wait until all seven are counted.
	var ws usageAnswer
	for range 400 {
		code, a := get(w.admin, "")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/gateway/usage = %d", code)
		}
		if ws = a; len(a.Series) == 2 && a.Series[0].Totals.Requests+a.Series[1].Totals.Requests == 7 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// What was sent, from the billing events themselves.
	events := map[string]usageCounters{}
	req, _ := http.NewRequest(http.MethodGet, g.url+"/v1/gateway/events?limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+w.admin)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items []struct {
			GroupID    string `json:"groupId"`
			ModelSlug  string `json:"modelSlug"`
			StatusCode int    `json:"statusCode"`
			Tokens     struct {
				InputTokens  int64 `json:"inputTokens"`
				OutputTokens int64 `json:"outputTokens"`
			} `json:"tokens"`
			CostMicroUsd int64 `json:"costMicroUsd"`
		} `json:"items"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	for _, e := range page.Items {
		for _, k := range []string{e.GroupID + "/" + e.ModelSlug, "*/" + e.ModelSlug} {
			c := events[k]
			c.Requests++
			if e.StatusCode == 429 {
				c.Throttled++
			}
			c.InputTokens += e.Tokens.InputTokens
			c.OutputTokens += e.Tokens.OutputTokens
			c.CostMicroUsd += e.CostMicroUsd
			events[k] = c
		}
	}
	if len(page.Items) != 7 || events["a/"+slug].InputTokens == 0 || events["a/"+slug].OutputTokens == 0 || events["a/"+slug].CostMicroUsd == 0 {
		t.Fatalf("events %+v: want seven with tokens and cost", events)
	}

	if len(ws.Series) != 2 || ws.Series[0].Slug != slug || ws.Series[1].Slug != otherSlug {
		t.Fatalf("workspace series %+v", ws.Series)
	}
	for _, s := range ws.Series {
		if s.Totals != events["*/"+s.Slug] || len(s.Limits) != 0 {
			t.Errorf("workspace %s: totals %+v limits %+v, want the events' %+v and no limit", s.Slug, s.Totals, s.Limits, events["*/"+s.Slug])
		}
	}
	if w := ws.Series[0].Totals; w.Requests != 5 || w.Throttled != 2 {
		t.Errorf("workspace %s: %+v, want 5 calls, 2 of them 429", slug, w)
	}

	code, a := get(w.admin, "group_id=a&slug="+slug)
	if code != 200 || len(a.Series) != 1 || a.BucketSeconds != 60 || len(a.Series[0].Buckets) != 60 {
		t.Fatalf("a, %s: %d %+v", slug, code, a)
	}
	s := a.Series[0]
	var summed usageCounters
	for _, b := range s.Buckets {
		summed.Requests += b.Requests
		summed.Throttled += b.Throttled
		summed.InputTokens += b.InputTokens
		summed.OutputTokens += b.OutputTokens
		summed.CostMicroUsd += b.CostMicroUsd
	}
	if s.Totals != events["a/"+slug] || summed != s.Totals {
		t.Errorf("a, %s: totals %+v, buckets sum to %+v, want the events' %+v", slug, s.Totals, summed, events["a/"+slug])
	}
	if len(s.Limits) != 1 || s.Limits[0].Type != "REQUEST" || s.Limits[0].Unit != "MINUTE" || s.Limits[0].Threshold != 3 ||
		s.Limits[0].SourceGroupID != "root" || s.Limits[0].PerBucket != 3 {
		t.Errorf("a's limits of %s: %+v, want root's REQUEST per MINUTE 3, 3 per bucket", slug, s.Limits)
	}
	if _, a = get(w.admin, "group_id=b&window=24h"); len(a.Series) != 1 || a.BucketSeconds != 1800 || a.Series[0].Totals != events["b/"+otherSlug] {
		t.Errorf("b over a day: %+v, want %+v", a, events["b/"+otherSlug])
	}
	if code, _ := get(w.admin, "window=week"); code != http.StatusBadRequest {
		t.Errorf("window=week: %d, want 400", code)
	}
	if code, _ := get(w.personal, ""); code != http.StatusForbidden {
		t.Errorf("GET /v1/gateway/usage with a non-admin PERSONAL key = %d, want 403", code)
	}
}
