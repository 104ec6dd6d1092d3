package state

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/dashboard"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestDashboardSignOutEndsTheSessionOnEveryGatewayd: two gatewayd processes share Redis and the sealing secrets
// (docs/security.md "Dashboard sessions end on the server"). A session signed in on one works on the other; once
// it signs out on the first, the same cookie is refused by both.
func TestDashboardSignOutEndsTheSessionOnEveryGatewayd(t *testing.T) {
	srv := redistest.Start(t)
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(100)}}, nil)
	secrets := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(secrets, []byte(strings.Repeat("s3cr3t", 8)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store=redis", "--redis-url=" + srv.URL(), "--dashboard-session-secrets-file=" + secrets, "--state-dir=" + t.TempDir()}
	a, b := startGatewayd(t, w.ns, flags...), startGatewayd(t, w.ns, flags...)

	send := func(g *gatewayd, method, path, cookie, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Content-Type", "application/json")
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	login := send(a, "POST", "/dashboard/api/login", "", `{"api_key":"`+w.admin+`"}`)
	var cookie string
	for _, c := range login.Cookies() {
		if c.Name == dashboard.CookieName {
			cookie = c.Name + "=" + c.Value
		}
	}
	if login.StatusCode != http.StatusOK || cookie == "" {
		t.Fatalf("login: %d, cookie %q", login.StatusCode, cookie)
	}
	for name, g := range map[string]*gatewayd{"the gatewayd signed in on": a, "the other gatewayd": b} {
		if r := send(g, "GET", "/dashboard/api/session", cookie, ""); r.StatusCode != http.StatusOK {
			t.Fatalf("%s before sign-out: %d", name, r.StatusCode)
		}
	}
	if r := send(a, "POST", "/dashboard/api/logout", cookie, ""); r.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", r.StatusCode)
	}
	for name, g := range map[string]*gatewayd{"the gatewayd signed out on": a, "the other gatewayd": b} {
		if r := send(g, "GET", "/dashboard/api/session", cookie, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s after sign-out: %d, want 401", name, r.StatusCode)
		}
	}
}
