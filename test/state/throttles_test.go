package state

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

const (
	otherSlug  = "demo/other"
	sharedSlug = "demo/shared"
)

type throttle struct {
	GroupID          string `json:"group_id"`
	ExternalEntityID string `json:"external_entity_id"`
	Slug             string `json:"slug"`
	Count            int64  `json:"count"`
	RefusedBy        string `json:"refused_by"`
	LimitType        string `json:"limit_type"`
	LimitUnit        string `json:"limit_unit"`
	SourceGroupID    string `json:"source_group_id"`
}

// TestThrottlesNameTheRefusingLimit: in a CASCADING tree, child a is refused once by root's REQUEST per MINUTE
// limit on demo/echo and once by its own REQUEST per DAY limit on demo/other, and its sibling b by root's limit
// and, on the shared model API demo/shared, by the workspace's model-API tier; GET /v1/gateway/throttles of a real
// gatewayd counts each under the limit that refused it, on the embedded store and on redis-server.
func TestThrottlesNameTheRefusingLimit(t *testing.T) {
	onEachStore(t, testThrottles)
}

func testThrottles(t *testing.T, flags ...string) {
	w := newWorkspace(t, gatewayv1.LimitEnforcement("CASCADING"), []gatewaytest.Group{
		{ID: "root", Models: []gatewayv1.ModelConfig{
			{Slug: slug, RateLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 2}}},
			{Slug: otherSlug},
			{Slug: sharedSlug},
		}},
		{ID: "a", Parent: "root", Models: []gatewayv1.ModelConfig{
			{Slug: slug},
			{Slug: otherSlug, UsageLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "DAY", Threshold: 1}}},
		}},
		{ID: "b", Parent: "root", Models: []gatewayv1.ModelConfig{{Slug: slug}, {Slug: sharedSlug}}},
	}, func(s *snapshot.Snapshot) {
		other, shared := s.Endpoints[0], s.Endpoints[0]
		other.ID, other.Slug = "other", otherSlug
		shared.ID, shared.Slug, shared.SharedModelAPI = "shared", sharedSlug, true
		s.Endpoints = append(s.Endpoints, other, shared)
		s.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: 1}
	})
	g := startGatewayd(t, w.ns, flags...)
	for i, c := range []struct {
		group, model string
		status       int
	}{
		{"a", slug, 200}, {"a", slug, 200}, {"a", slug, 429}, // root's minute
		{"a", otherSlug, 200}, {"a", otherSlug, 429}, // a's day
		{"b", slug, 429},                               // root's minute again
		{"b", sharedSlug, 200}, {"b", sharedSlug, 429}, // the key's model-API tier
	} {
		if got := chatModel(g.url, w.keys[c.group], c.model); got.err != nil || got.status != c.status {
			t.Fatalf("call %d (%s, %s) = %d %v, want %d", i, c.group, c.model, got.status, got.err, c.status)
		}
	}
	want := []throttle{
		{"a", "ext-a", slug, 1, "GROUP_LIMIT", "REQUEST", "MINUTE", "root"},
		{"a", "ext-a", otherSlug, 1, "GROUP_LIMIT", "REQUEST", "DAY", "a"},
		{"b", "ext-b", slug, 1, "GROUP_LIMIT", "REQUEST", "MINUTE", "root"},
		{"b", "ext-b", sharedSlug, 1, "MODEL_API_TIER", "REQUEST", "MINUTE", ""},
	}
	get := func(key, query string) (int, []throttle) {
		req, _ := http.NewRequest(http.MethodGet, g.url+"/v1/gateway/throttles"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct {
			Items []throttle `json:"items"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		return resp.StatusCode, ans.Items
	}
	// The events, and the rollup with them, are written off the hot path: wait for the third 429.
	var items []throttle
	for range 400 {
		var code int
		if code, items = get(w.admin, ""); code != http.StatusOK {
			t.Fatalf("GET /v1/gateway/throttles = %d", code)
		}
		if len(items) >= len(want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(items, want) {
		t.Errorf("throttles:\n got %+v\nwant %+v", items, want)
	}
	if _, items = get(w.admin, "?group_id=b"); !slices.Equal(items, want[2:]) {
		t.Errorf("throttles of b: %+v", items)
	}
	if code, _ := get(w.personal, ""); code != http.StatusForbidden {
		t.Errorf("GET /v1/gateway/throttles with a non-admin PERSONAL key = %d, want 403", code)
	}
}
