package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// newServer serves the dashboard as gatewayd mounts it: GET /dashboard/ and, beside it, a /v1 route and the
// catch-all of unrouted paths, over a real socket.
func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix, Handler())
	mux.HandleFunc("GET /v1/gateway/groups", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items":[]}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"Not found."}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// asset is the path of the first hashed asset the index names with ext.
func asset(t *testing.T, index, ext string) string {
	t.Helper()
	i := strings.Index(index, "/dashboard/assets/")
	for i >= 0 {
		rest := index[i:]
		end := strings.IndexByte(rest, '"')
		p := rest[:end]
		if strings.HasSuffix(p, ext) {
			return p
		}
		next := strings.Index(rest[1:], "/dashboard/assets/")
		if next < 0 {
			break
		}
		i += next + 1
	}
	t.Fatalf("index.html names no %s asset:\n%s", ext, index)
	return ""
}

func TestIndexIsNeverCachedAndCarriesTheCSP(t *testing.T) {
	srv := newServer(t)
	for _, p := range []string{"/dashboard/", "/dashboard/index.html", "/dashboard/groups/grp-1", "/dashboard/events?status=429"} {
		resp, body := get(t, srv.URL+p)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", p, resp.StatusCode)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("%s: Cache-Control %q, want no-cache", p, got)
		}
		if got := resp.Header.Get("Content-Type"); got != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", p, got)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP allows unsafe sources: %q", p, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", p)
		}
		if !strings.Contains(body, `<div id="app">`) {
			t.Errorf("%s: not the app's index.html", p)
		}
		// The CSP forbids inline script and style, so the built index must hold none.
		if strings.Contains(body, "<script>") || strings.Contains(body, "<style") || strings.Contains(body, " style=") {
			t.Errorf("%s: index.html holds inline script or style", p)
		}
	}
}

func TestHashedAssetsAreImmutable(t *testing.T) {
	srv := newServer(t)
	_, index := get(t, srv.URL+"/dashboard/")
	for _, ext := range []string{".js", ".css"} {
		p := asset(t, index, ext)
		resp, body := get(t, srv.URL+p)
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("%s: status %d, %d bytes", p, resp.StatusCode, len(body))
		}
		if got := resp.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q", p, got)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), map[string]string{".js": "text/javascript", ".css": "text/css"}[ext]) {
			t.Errorf("%s: Content-Type %q", p, resp.Header.Get("Content-Type"))
		}
	}
	// A missing asset is a 404, never the app.
	resp, body := get(t, srv.URL+"/dashboard/assets/index-missing.js")
	if resp.StatusCode != http.StatusNotFound || strings.Contains(body, `<div id="app">`) {
		t.Errorf("missing asset: status %d, body %.60q", resp.StatusCode, body)
	}
}

func TestNoFallbackOutsideTheDashboard(t *testing.T) {
	srv := newServer(t)
	for _, p := range []string{"/v1/unknown", "/v1/gateway/nope", "/dashboardx", "/", "/index.html", "/assets/index.js", "/dashboard/api/nope", "/dashboard/api/login"} {
		resp, body := get(t, srv.URL+p)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, resp.StatusCode)
		}
		if strings.Contains(body, `<div id="app">`) || (!strings.HasPrefix(p, "/dashboard/") && resp.Header.Get("Content-Security-Policy") != "") {
			t.Errorf("%s: served the app", p)
		}
	}
	resp, body := get(t, srv.URL+"/v1/gateway/groups")
	if resp.StatusCode != http.StatusOK || body != `{"items":[]}` {
		t.Errorf("/v1/gateway/groups: %d %q", resp.StatusCode, body)
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	srv := newServer(t)
	resp, err := http.Post(srv.URL+"/dashboard/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("POST /dashboard/: status %d", resp.StatusCode)
	}
	// Mounted on its own, the handler refuses another method itself, in the envelope of every answer.
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, Prefix, nil))
	var env struct {
		ErrorCode string              `json:"error_code"`
		Detail    map[string][]string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || rec.Code != http.StatusMethodNotAllowed ||
		env.ErrorCode != httperr.CodeMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" ||
		strings.Join(env.Detail["allow"], ",") != "GET,HEAD" {
		t.Errorf("DELETE %s: %d, Allow %q, %s", Prefix, rec.Code, rec.Header().Get("Allow"), rec.Body)
	}
}

// TestNotFoundIsTheEnvelope: a path under the dashboard that names nothing is 404 not_found in the envelope of
// every answer, not plain text.
func TestNotFoundIsTheEnvelope(t *testing.T) {
	srv := newServer(t)
	for _, p := range []string{"/dashboard/api/nope", "/dashboard/assets/index-missing.js", "/dashboard/missing.ico"} {
		resp, body := get(t, srv.URL+p)
		var env struct {
			ErrorCode string `json:"error_code"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || resp.StatusCode != http.StatusNotFound ||
			env.ErrorCode != httperr.CodeNotFound || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s %q", p, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}
