package gatewayd_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// The workspace's model-API tier (Workspace.spec.modelAPILimits) over real sockets: workspace keys on the
// OpenAI-compatible routes, and federated keys on Endpoints marked sharedModelAPI.

const otherSlug = "demo/other"

// chatAs calls chat completions of model with the Authorization header auth: 7 tokens per call.
func (f *fixture) chatAs(auth, model string) result {
	f.t.Helper()
	return f.post("/v1/chat/completions", auth, map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "hello world"}},
	})
}

// tierFixture serves slug (the default Endpoint) and otherSlug, with the given groups and workspace keys, under
// modelAPILimits {rpm, tpm}; shared marks which of the two Endpoints are shared model APIs.
func tierFixture(t *testing.T, store limits.Store, groups []gatewaytest.Group, keys []snapshot.WorkspaceAPIKey, rpm, tpm int64, shared ...string) *fixture {
	t.Helper()
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: groups, workspace: keys, store: store})
	other := f.snap.Endpoints[0]
	other.ID, other.Slug = "other", otherSlug
	f.snap.Endpoints = append(f.snap.Endpoints, other)
	for i := range f.snap.Endpoints {
		for _, s := range shared {
			if f.snap.Endpoints[i].Slug == s {
				f.snap.Endpoints[i].SharedModelAPI = true
			}
		}
	}
	f.snap.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
	f.publish()
	return f
}

// withStores runs fn with gatewayd on each limit store a deployment runs: the in-process one (nil: the
// fixture's memory store) and a real redis-server, as several replicas share.
func withStores(t *testing.T, fn func(t *testing.T, store limits.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, nil) })
	t.Run("redis", func(t *testing.T) {
		fn(t, limits.NewRedis(redistest.Start(t).Client(), limits.RedisOptions{}))
	})
}

// count is the current count of bucket k in the store gatewayd runs with.
func (f *fixture) count(k limits.BucketKey) int64 {
	f.t.Helper()
	n, err := f.limits.Count(context.Background(), k, f.clock.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// detailOf is the detail object of an error answer.
func detailOf(t *testing.T, r result) map[string]any {
	t.Helper()
	d, ok := r.json(t)["fields"].(map[string]any)
	if !ok {
		t.Fatalf("detail is not an object: %s", r.body)
	}
	return d
}

// wantTier429 fails unless r is a 429 of the tier naming field.
func wantTier429(t *testing.T, r result, field string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 from the tier: %s", r.status, r.body)
	}
	body := r.json(t)
	if body["error_code"] != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Errorf("tier 429 without rate_limited or Retry-After: %v %s", r.header, r.body)
	}
	d := detailOf(t, r)
	if d["limit"] != "workspace "+field {
		t.Errorf("detail.limit = %v, want %q: %s", d["limit"], "workspace "+field, r.body)
	}
	if _, ok := d["source_group"]; ok {
		t.Errorf("a tier 429 names a group: %s", r.body)
	}
	if msg, _ := body["error"].(string); !strings.Contains(msg, field) {
		t.Errorf("error %q does not name %s", msg, field)
	}
}

// wantGroup429 fails unless r is a group's 429 in the envelope of before the tier, naming group.
func wantGroup429(t *testing.T, r result, group string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 from group %s: %s", r.status, group, r.body)
	}
	d := detailOf(t, r)
	if d["source_group"] != group || d["slug"] != slug || d["type"] != "REQUEST" || d["unit"] != "MINUTE" {
		t.Errorf("detail %v, want group %s's (slug, REQUEST, MINUTE)", d, group)
	}
	if _, ok := d["limit"]; ok {
		t.Errorf("a group's 429 names a tier limit: %s", r.body)
	}
	if msg, _ := r.json(t)["error"].(string); msg != "Rate limit exceeded: 2 REQUEST per MINUTE on model demo/echo, set by group "+group+"." {
		t.Errorf("group 429 wording changed: %q", msg)
	}
}

// TestWorkspaceKeyTierRequests: a WORKSPACE_INVOKE key calls slugs with Bearer or Api-Key, and past
// requestsPerMinute, counted for the key as a whole across slugs, gets a 429 naming the tier. Another key of the
// workspace has its own budget, and the minute passing frees it.
func TestWorkspaceKeyTierRequests(t *testing.T) {
	invoke, rec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	all, allRec := gatewaytest.NewWorkspaceKey("all", "WORKSPACE_MANAGE_ALL")
	f := tierFixture(t, nil, nil, []snapshot.WorkspaceAPIKey{rec, allRec}, 3, 0)
	for i, c := range []struct{ auth, model string }{
		{"Bearer " + invoke, slug}, {"Api-Key " + invoke, otherSlug}, {"bearer " + invoke, slug},
	} {
		if r := f.chatAs(c.auth, c.model); r.status != http.StatusOK {
			t.Fatalf("call %d (%s): status %d under the tier: %s", i+1, c.model, r.status, r.body)
		}
	}
	r := f.chatAs("Bearer "+invoke, otherSlug)
	wantTier429(t, r, "modelAPILimits.requestsPerMinute")
	if d := detailOf(t, r); d["threshold"] != float64(3) || d["type"] != "REQUEST" || d["unit"] != "MINUTE" {
		t.Errorf("detail %v, want threshold 3 REQUEST per MINUTE", d)
	}
	if n := len(f.upstream.Requests()); n != 3 {
		t.Errorf("upstream got %d calls, want 3: a refused call must not be forwarded", n)
	}
	if r := f.chatAs("Bearer "+all, slug); r.status != http.StatusOK {
		t.Errorf("another workspace key was refused: %d %s", r.status, r.body)
	} else if id, last := r.header.Get("X-Request-Id"), f.upstream.Requests(); !strings.HasPrefix(id, "req_") || last[len(last)-1].Header.Get("X-Request-Id") != id {
		t.Errorf("a workspace key's call: request id %q, want a req_ id that the upstream received too", id)
	}
	ws := `,workspace="` + f.ns + `"}`
	if got := f.metric(`modelgate_gateway_limit_refusals_total{limit="modelAPILimits.requestsPerMinute"` + ws); got != 1 {
		t.Errorf("tier refusals metric = %v, want 1", got)
	}
	if got := f.metric(`service_model_api_inference_requests_total{external_entity_id="",model="demo/other",status_code="429"` + ws); got != 1 {
		t.Errorf("workspace-key 429 metric = %v, want 1 (entity label empty)", got)
	}
	f.clock.SetTime(f.clock.Now().Add(window["MINUTE"]))
	if r := f.chatAs("Bearer "+invoke, slug); r.status != http.StatusOK {
		t.Errorf("refused once the minute passed: %d %s", r.status, r.body)
	}
}

// TestWorkspaceKeyTierTokens: tokensPerMinute refuses once the key's settled tokens reach it (a TOKEN limit
// admits until exhausted, since a call's cost is known only after its answer).
func TestWorkspaceKeyTierTokens(t *testing.T) {
	withStores(t, func(t *testing.T, store limits.Store) { testWorkspaceKeyTierTokens(t, store) })
}

func testWorkspaceKeyTierTokens(t *testing.T, store limits.Store) {
	key, rec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	f := tierFixture(t, store, nil, []snapshot.WorkspaceAPIKey{rec}, 0, 2*tokensPerChat-1)
	for i, model := range []string{slug, otherSlug} {
		if r := f.chatAs("Bearer "+key, model); r.status != http.StatusOK {
			t.Fatalf("call %d: status %d with tokens left: %s", i+1, r.status, r.body)
		}
	}
	r := f.chatAs("Bearer "+key, slug)
	wantTier429(t, r, "modelAPILimits.tokensPerMinute")
	if d := detailOf(t, r); d["threshold"] != float64(2*tokensPerChat-1) || d["type"] != "TOKEN" {
		t.Errorf("detail %v, want threshold %d TOKEN", d, 2*tokensPerChat-1)
	}
	k := limits.Tier(f.ns, rec.Prefix, 0, 1)[0].Key
	if got := f.count(k); got != 2*tokensPerChat {
		t.Errorf("tier TOKEN bucket holds %d, want %d", got, 2*tokensPerChat)
	}
}

// TestWorkspaceKeyPermissionsOnModelAPI: authz.Decide decides who may call the model API. A key scoped to one
// model calls it and gets 403 on another; key types that may not invoke, and environment-scoped keys, get 403
// with the rule; a team key calls the workspace's Endpoints; a slug no Endpoint serves is 404.
func TestWorkspaceKeyPermissionsOnModelAPI(t *testing.T) {
	scoped, scopedRec := gatewaytest.NewWorkspaceKey("scoped", "WORKSPACE_INVOKE")
	scopedRec.Models = []string{slug}
	metrics, metricsRec := gatewaytest.NewWorkspaceKey("metrics", "WORKSPACE_EXPORT_METRICS")
	keys, keysRec := gatewaytest.NewWorkspaceKey("keys", "WORKSPACE_MANAGE_API_KEYS")
	personal, personalRec := gatewaytest.NewWorkspaceKey("personal", "PERSONAL")
	personalRec.Owner = &snapshot.KeyOwner{UserID: "u1", Role: "MEMBER"}
	team, teamRec := gatewaytest.NewWorkspaceKey("team", "WORKSPACE_INVOKE")
	teamRec.TeamID = "blue"
	staging, stagingRec := gatewaytest.NewWorkspaceKey("staging", "WORKSPACE_INVOKE")
	stagingRec.Environments = []string{"staging"}
	f := tierFixture(t, nil, nil, []snapshot.WorkspaceAPIKey{scopedRec, metricsRec, keysRec, personalRec, teamRec, stagingRec}, 100, 0)
	for _, tc := range []struct {
		name, auth, model string
		status            int
		reason            string
	}{
		{"scoped key, its model", "Bearer " + scoped, slug, 200, ""},
		{"scoped key, another model", "Bearer " + scoped, otherSlug, 403, "This key is not scoped to the model."},
		{"scoped key, a model that does not exist", "Bearer " + scoped, "no/such", 403, "This key is not scoped to the model."},
		{"metrics key", "Bearer " + metrics, slug, 403, "WORKSPACE_EXPORT_METRICS keys export metrics only."},
		{"key-management key", "Api-Key " + keys, slug, 403, "WORKSPACE_MANAGE_API_KEYS keys manage keys and list teams and models; they cannot invoke or manage models."},
		{"member's personal key", "Bearer " + personal, otherSlug, 200, ""},
		{"team key", "Bearer " + team, otherSlug, 200, ""},
		// An Endpoint serves no environment, and an environment-scoped key calls only the environments it names.
		{"environment-scoped key", "Bearer " + staging, slug, 403, "This key is not scoped to the environment."},
		{"unknown slug", "Bearer " + personal, "no/such", 404, ""},
	} {
		r := f.chatAs(tc.auth, tc.model)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.status, tc.status, r.body)
			continue
		}
		if tc.reason != "" {
			if msg := r.json(t)["error"]; msg != tc.reason {
				t.Errorf("%s: error %q, want the rule %q", tc.name, msg, tc.reason)
			}
		}
	}
}

// TestSharedModelAPIHoldsFederatedKeysToBoth: a federated key calling a sharedModelAPI Endpoint is held to its
// group's limits and to its own tier. With the group roomy the tier answers 429; with the tier roomy the group
// does, in the group's envelope of old; a refusal by either charges the other nothing. A non-shared Endpoint
// ignores the tier.
func TestSharedModelAPIHoldsFederatedKeysToBoth(t *testing.T) {
	withStores(t, testSharedModelAPIHoldsFederatedKeysToBoth)
}

func testSharedModelAPIHoldsFederatedKeysToBoth(t *testing.T, store limits.Store) {
	groups := []gatewaytest.Group{
		{ID: "roomy", Models: []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 100), limited(otherSlug, "REQUEST", "MINUTE", 100)}},
		{ID: "tight", Models: []gatewayv1.ModelConfig{limited(slug, "REQUEST", "MINUTE", 2)}},
	}
	f := tierFixture(t, store, groups, nil, 3, 0, slug)
	roomy := limits.BucketKey{Namespace: f.ns, Group: "roomy", Slug: slug, Type: limits.Request, Unit: limits.Minute}
	tierOf := func(group string) limits.BucketKey {
		for _, k := range f.snap.APIKeys {
			if k.GroupID == group {
				return limits.Tier(f.ns, k.Prefix, 1, 0)[0].Key
			}
		}
		t.Fatalf("no key of group %s", group)
		return limits.BucketKey{}
	}

	t.Run("the tier fires on its own", func(t *testing.T) {
		for i := range 3 {
			if r := f.chat("roomy", slug); r.status != http.StatusOK {
				t.Fatalf("call %d: status %d: %s", i+1, r.status, r.body)
			}
		}
		for range 2 {
			wantTier429(t, f.chat("roomy", slug), "modelAPILimits.requestsPerMinute")
		}
		if got := f.count(roomy); got != 3 {
			t.Errorf("group bucket holds %d after tier refusals, want 3: a refused call charges the group nothing", got)
		}
	})
	t.Run("the group fires on its own", func(t *testing.T) {
		for i := range 2 {
			if r := f.chat("tight", slug); r.status != http.StatusOK {
				t.Fatalf("call %d: status %d: %s", i+1, r.status, r.body)
			}
		}
		for range 2 {
			wantGroup429(t, f.chat("tight", slug), "tight")
		}
		if got := f.count(tierOf("tight")); got != 2 {
			t.Errorf("tier bucket holds %d after group refusals, want 2: a refused call charges the tier nothing", got)
		}
	})
	t.Run("a non-shared Endpoint ignores the tier", func(t *testing.T) {
		// The roomy key's tier is spent, yet its calls of a non-shared slug pass, and charge no tier bucket.
		for i := range 5 {
			if r := f.chat("roomy", otherSlug); r.status != http.StatusOK {
				t.Fatalf("call %d of the non-shared slug: status %d: %s", i+1, r.status, r.body)
			}
		}
		if got := f.count(tierOf("roomy")); got != 3 {
			t.Errorf("tier bucket holds %d, want the 3 shared calls only", got)
		}
	})
	ws := `,workspace="` + f.ns + `"}`
	for series, want := range map[string]float64{
		`modelgate_gateway_limit_refusals_total{limit="modelAPILimits.requestsPerMinute"` + ws: 2,
		`modelgate_gateway_limit_refusals_total{limit="group"` + ws:                            2,
	} {
		if got := f.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
