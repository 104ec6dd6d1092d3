package gatewayd_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/route"
)

// gatewaydV1Routes are the /v1 routes gatewayd serves from its own parts (v1Routes in management.go).
var gatewaydV1Routes = []string{"/v1/gateway/events", "/v1/gateway/throttles", "/v1/metrics"}

// faultyBilling is a real billing store whose reads panic while armed: the fault the management wrapper turns
// into a 500 without losing the server.
type faultyBilling struct {
	billing.Store
	armed atomic.Bool
}

func (s *faultyBilling) List(ctx context.Context, ns string, q billing.Query) ([]billing.Event, string, error) {
	if s.armed.Load() {
		panic("injected fault: billing events read")
	}
	return s.Store.List(ctx, ns, q)
}

func (s *faultyBilling) Throttles(ctx context.Context, ns string, start, end time.Time) ([]billing.ThrottleCount, error) {
	if s.armed.Load() {
		panic("injected fault: throttle rollup read")
	}
	return s.Store.Throttles(ctx, ns, start, end)
}

// v1Fixture serves one workspace with billing on (over faulty, when set) and two WORKSPACE_MANAGE_ALL keys.
func v1Fixture(t *testing.T, faulty *faultyBilling) (f *fixture, admin, other string) {
	t.Helper()
	faulty.Store = boltBilling(t)
	admin, a := gatewaytest.NewWorkspaceKey("admin", string(gatewayv1.KeyTypeManageAll))
	other, o := gatewaytest.NewWorkspaceKey("other", string(gatewayv1.KeyTypeManageAll))
	keys := []snapshot.WorkspaceAPIKey{a, o}
	slices.SortFunc(keys, func(x, y snapshot.WorkspaceAPIKey) int { return strings.Compare(x.Prefix, y.Prefix) })
	f = newFixture(t, fixtureOpts{groups: []gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{Slug: slug}}}},
		workspace: keys, billing: faulty})
	return f, admin, other
}

// getV1 calls GET path with key and returns the status, the Retry-After header and the body.
func getV1(t *testing.T, url, key string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), body
}

// TestGatewaydV1RoutesAreRateLimited: GET /v1/gateway/events, /v1/gateway/throttles and /v1/metrics are held to
// the management rate limit like every /v1 route: 100 calls per second per key and route, the 101st refused with
// the exact body and Retry-After, another key and the next second allowed.
func TestGatewaydV1RoutesAreRateLimited(t *testing.T) {
	f, admin, other := v1Fixture(t, &faultyBilling{})
	for _, path := range gatewaydV1Routes {
		for i := range 100 {
			if code, _, body := getV1(t, f.url+path, admin); code != http.StatusOK {
				t.Fatalf("GET %s call %d: %d %s, want 200", path, i+1, code, body)
			}
		}
		code, retry, body := getV1(t, f.url+path, admin)
		var got map[string]any
		_ = json.Unmarshal(body, &got)
		want := map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": 1.0}
		if code != http.StatusTooManyRequests || retry != "1" || !equalJSON(got, want) {
			t.Errorf("GET %s call 101: %d Retry-After %q %s, want 429 Retry-After 1 %v", path, code, retry, body, want)
		}
		if code, _, body := getV1(t, f.url+path, other); code != http.StatusOK {
			t.Errorf("GET %s with another key: %d %s, want 200 (a bucket of its own)", path, code, body)
		}
	}
	f.clock.SetTime(f.clock.Now().Add(time.Second))
	for _, path := range gatewaydV1Routes {
		if code, _, body := getV1(t, f.url+path, admin); code != http.StatusOK {
			t.Errorf("GET %s in the next second: %d %s, want 200", path, code, body)
		}
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestGatewaydV1RoutesRecoverFromPanics: a panic in the billing routes' store answers 500 in the error envelope,
// as any management route's does, and the next call is served. (GET /v1/metrics has no fault to inject: the
// Prometheus registry collects in goroutines of its own, where a panic cannot be recovered by any handler; it runs
// behind the same wrapper, which TestEveryV1RouteIsWrapped checks.)
func TestGatewaydV1RoutesRecoverFromPanics(t *testing.T) {
	faulty := &faultyBilling{}
	f, admin, _ := v1Fixture(t, faulty)
	for _, path := range gatewaydV1Routes[:2] {
		faulty.armed.Store(true)
		code, _, body := getV1(t, f.url+path, admin)
		faulty.armed.Store(false)
		var env map[string]any
		_ = json.Unmarshal(body, &env)
		if code != http.StatusInternalServerError || env["error_code"] != "internal_error" || env["error"] != "Internal error." {
			t.Errorf("GET %s with its store panicking: %d %s, want 500 internal_error", path, code, body)
		}
		if code, _, body := getV1(t, f.url+path, admin); code != http.StatusOK {
			t.Errorf("GET %s after the panic: %d %s, want 200", path, code, body)
		}
	}
}

// TestEveryV1RouteIsWrapped: every /v1 route gatewayd serves to a workspace key (billing on) is mounted behind the
// management wrapper (authentication, the rate limit, panic recovery) and documented in rest/openapi.json. The
// exceptions are the routes no workspace key's management limit applies to.
func TestEveryV1RouteIsWrapped(t *testing.T) {
	exempt := map[string]string{
		"POST /v1/chat/completions":         "model call: the gateway limits",
		"POST /v1/completions":              "model call: the gateway limits",
		"POST /v1/embeddings":               "model call: the gateway limits",
		"POST /v1/messages":                 "model call: the gateway limits",
		"GET /v1/spec":                      "public, no key",
		"PUT /v1/sandboxes/uploads/{build}": "signed URL, no key",
	}
	f, _, _ := v1Fixture(t, &faultyBilling{})
	raw, err := os.ReadFile("rest/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	wrapped := f.gw.ManagementRoutes()
	checked := 0
	for _, pattern := range f.gw.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		if !strings.HasPrefix(path, "/v1/") || exempt[pattern] != "" {
			continue
		}
		checked++
		if !slices.Contains(wrapped, pattern) {
			t.Errorf("%s is served outside the management wrapper: mount it through v1Routes (gatewayd/management.go)", pattern)
		}
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("%s is missing from rest/openapi.json", pattern)
		}
	}
	for _, path := range gatewaydV1Routes {
		if !slices.Contains(wrapped, "GET "+path) {
			t.Errorf("GET %s is not behind the management wrapper", path)
		}
	}
	if checked < 40 {
		t.Fatalf("only %d /v1 routes checked", checked)
	}
}

// TestEveryRouteFamilyIsServed: every route of gatewayd/route's families (a verb under the four ways of naming a
// deployment) is served, the async ones when async inference is on, so a family added to the table and left without
// a handler fails here rather than answering 404 in production.
func TestEveryRouteFamilyIsServed(t *testing.T) {
	f := newFixture(t, fixtureOpts{async: true})
	served := f.gw.Routes()
	for _, fam := range route.Families {
		for _, p := range fam.Patterns() {
			if !slices.Contains(served, p) {
				t.Errorf("%s is in the route table (gatewayd/route) but gatewayd serves no such route: register the family's handler", p)
			}
		}
	}
}
