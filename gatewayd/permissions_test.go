package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// call sends method path with a Bearer key and a JSON body (nil for none) to f's gatewayd.
func (f *fixture) call(method, path, key string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, f.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m
}

// managementRoutes reads every route of the management API's OpenAPI document (the document a test in
// gatewayd/rest checks against the registered routes), as method and a path with made-up ids.
func managementRoutes(t *testing.T) [][2]string {
	t.Helper()
	raw, err := os.ReadFile("rest/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			MountedWith string `json:"x-mounted-with"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	var out [][2]string
	for path, ops := range doc.Paths {
		if path == "/v1/spec" {
			continue // public
		}
		url := param.ReplaceAllStringFunc(path, func(p string) string {
			if strings.Contains(p, "prefix") {
				return "mgw_NoSuchKey000"
			}
			return "no-such-object"
		})
		for method, op := range ops {
			if op.MountedWith == "billing" {
				continue // mounted only with a part (billing) the fixture leaves off
			}
			out = append(out, [2]string{strings.ToUpper(method), url})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1]+out[i][0] < out[j][1]+out[j][0] })
	return out
}

// TestInvokeKeyScopes: a WORKSPACE_INVOKE key scoped to one model calls it, gets 403 on another model, and 403 on
// every management route and on the metrics export; a key scoped to staging cannot call production; a
// key-management key cannot invoke.
func TestInvokeKeyScopes(t *testing.T) {
	f := newModelFixture(t, 0)
	scoped := f.keys["invoke-other-model"] // models: [other]
	if status, by, body, _ := f.predict("/models/other/production/predict", "Bearer "+scoped, "application/json", []byte(`{}`)); status != 200 || by != "v1" {
		t.Fatalf("the scoped key calling its model: %d from %q: %s", status, by, body)
	}
	if status, _, body, _ := f.predict("/models/sentiment/production/predict", "Bearer "+scoped, "application/json", []byte(`{}`)); status != 403 ||
		!strings.Contains(string(body), "not scoped to the model") {
		t.Errorf("the scoped key calling another model: %d %s, want 403 naming the model scope", status, body)
	}
	if status, _, body, _ := f.predict("/models/sentiment/production/predict", "Bearer "+f.keys["invoke-staging"], "application/json", nil); status != 403 ||
		!strings.Contains(string(body), "not scoped to the environment") {
		t.Errorf("a staging key calling production: %d %s, want 403 naming the environment scope", status, body)
	}
	if status, _, body, _ := f.predict("/models/sentiment/production/predict", "Bearer "+f.keys["keys"], "application/json", nil); status != 403 {
		t.Errorf("a key-management key invoking: %d %s, want 403", status, body)
	}

	routes := managementRoutes(t)
	if len(routes) < 30 {
		t.Fatalf("only %d management routes read from the OpenAPI document", len(routes))
	}
	for _, rt := range routes {
		var body any
		if rt[0] == http.MethodPost || rt[0] == http.MethodPatch {
			body = map[string]any{}
		}
		status, env := f.call(rt[0], rt[1], scoped, body)
		if status != http.StatusForbidden || env["error_code"] != "forbidden" || env["error"] == "" {
			t.Errorf("%s %s with a WORKSPACE_INVOKE key: %d %v, want 403 forbidden with the rule", rt[0], rt[1], status, env)
		}
	}
}

// TestLastUsedAt: a workspace key's last_used_at appears after a call, is not rewritten within the minute, and
// moves once the minute has passed (gatewayd's fake clock).
func TestLastUsedAt(t *testing.T) {
	f := newModelFixture(t, 0)
	scheme := runtime.NewScheme()
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The management API lists keys from the API server: store the invoke key's object, as the manager would.
	var rec snapshot.WorkspaceAPIKey
	for _, k := range f.snap.WorkspaceAPIKeys {
		if k.ID == "invoke" {
			rec = k
		}
	}
	if err := c.Create(context.Background(), &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{Name: "invoke", Namespace: f.ns},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeInvoke, DisplayName: "invoke",
			KeySource: gatewayv1.KeySource{Prefix: rec.Prefix, Hash: rec.Hash}},
	}); err != nil {
		t.Fatal(err)
	}
	lastUsed := func() any {
		t.Helper()
		status, body := f.call(http.MethodGet, "/v1/api_keys", f.keys["keys"], nil)
		if status != http.StatusOK {
			t.Fatalf("GET /v1/api_keys: %d %v", status, body)
		}
		for _, k := range body["keys"].([]any) {
			if k.(map[string]any)["prefix"] == rec.Prefix {
				return k.(map[string]any)["last_used_at"]
			}
		}
		t.Fatalf("the invoke key is not listed: %v", body)
		return nil
	}
	if got := lastUsed(); got != nil {
		t.Fatalf("last_used_at of a key never used = %v, want null", got)
	}
	call := func() {
		t.Helper()
		if status, _, body, _ := f.predict("/models/sentiment/production/predict", "Bearer "+f.keys["invoke"], "application/json", nil); status != 200 {
			t.Fatalf("predict: %d %s", status, body)
		}
	}
	call()
	if got := lastUsed(); got != "2026-03-16T10:00:00Z" {
		t.Errorf("after a call at t0: last_used_at = %v", got)
	}
	f.clock.SetTime(t0.Add(59 * time.Second))
	call()
	if got := lastUsed(); got != "2026-03-16T10:00:00Z" {
		t.Errorf("a call within the minute rewrote last_used_at: %v", got)
	}
	f.clock.SetTime(t0.Add(61 * time.Second))
	call()
	if got := lastUsed(); got != "2026-03-16T10:01:01Z" {
		t.Errorf("a call past the minute: last_used_at = %v, want 2026-03-16T10:01:01Z", got)
	}
}
