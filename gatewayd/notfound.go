package gatewayd

import (
	"net/http"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// routeMethods are the methods gatewayd's routes use, tried to tell a 405 from a 404.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// unrouted answers what no route matches, in the envelope rather than ServeMux's plain text: 405 with Allow
// when the path has routes for other methods, 404 otherwise. It is mounted at "/", so it runs only for calls
// that no other pattern matched and costs nothing on routed calls. Under the model-call prefixes (/models/,
// /chains/) it answers in the model-call envelope, whose detail is a string.
func (g *Gateway) unrouted(w http.ResponseWriter, r *http.Request) {
	write := httperr.Write
	if strings.HasPrefix(r.URL.Path, "/models/") || strings.HasPrefix(r.URL.Path, "/chains/") {
		write = httperr.WriteModelCall
	}
	var allow []string
	for _, m := range routeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := g.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		write(w, http.StatusMethodNotAllowed, httperr.CodeMethodNotAllowed,
			"Method "+r.Method+" is not allowed on "+r.URL.Path+".", map[string][]string{"allow": allow})
		return
	}
	write(w, http.StatusNotFound, httperr.CodeNotFound, "No route for "+r.Method+" "+r.URL.Path+".", nil)
}
