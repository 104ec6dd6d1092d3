// Package dashboard serves the operator dashboard at /dashboard/: a Preact single-page app whose built files (dist,
// produced by `make dashboard` from web/ and committed) are embedded in the binary, so `go build` needs no Node. It
// also owns the dashboard's login: a workspace key is exchanged for a sealed session cookie (session.go), which
// then authenticates the management routes of /v1 as that key. The app calls the public /v1 API and nothing else;
// what a session may see and do is what gatewayd/authz.Decide allows its key.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

//go:embed all:dist
var dist embed.FS

// Prefix is where the dashboard is served.
const Prefix = "/dashboard/"

// ContentSecurityPolicy allows only the dashboard's own scripts, styles and API calls: no inline script or
// style, no third-party origin, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Files returns the built files, rooted at dist.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: Sub cannot fail on it
	}
	return sub
}

// Handler serves the built files under Prefix. Hashed assets (assets/*) are immutable and cached for a year;
// every other path that names no file is a client-side route and gets index.html, which is never cached, so a new
// build is picked up at the next load. Nothing outside Prefix is served here, so /v1 never falls back to the app.
func Handler() http.Handler {
	files := Files()
	index, _ := fs.ReadFile(files, "index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			allow := []string{http.MethodGet, http.MethodHead}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httperr.WriteError(w, httperr.MethodNotAllowed(r, allow))
			return
		}
		setSecurityHeaders(w.Header())
		name := strings.TrimPrefix(path.Clean(r.URL.Path), strings.TrimSuffix(Prefix, "/"))
		name = strings.TrimPrefix(name, "/")
		if name == "api" || strings.HasPrefix(name, "api/") {
			// The session routes are not pages: an unknown one is a 404, never the app.
			httperr.WriteError(w, httperr.NoRoute(r))
			return
		}
		if strings.HasPrefix(name, "assets/") {
			b, err := fs.ReadFile(files, name)
			if err != nil {
				httperr.WriteError(w, httperr.NoRoute(r))
				return
			}
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			w.Header().Set("Content-Type", contentType(name))
			_, _ = w.Write(b)
			return
		}
		if name != "" && name != "index.html" && path.Ext(name) != "" {
			// A file name outside assets/ (favicon.ico, a stale asset): no fallback, so a missing file is a 404.
			b, err := fs.ReadFile(files, name)
			if err != nil {
				httperr.WriteError(w, httperr.NoRoute(r))
				return
			}
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("Content-Type", contentType(name))
			_, _ = w.Write(b)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
}

// setSecurityHeaders sets what every dashboard answer carries.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	case ".json", ".map":
		return "application/json"
	case ".html":
		return "text/html; charset=utf-8"
	}
	return "application/octet-stream"
}
