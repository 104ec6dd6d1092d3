package gatewayd

import (
	"net/http"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// routeMethods are the methods gatewayd's routes use, tried to tell a 405 from a 404.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// unrouted answers what no route of mux matches, in the envelope rather than ServeMux's plain text: 405 with
// Allow when the path has routes for other methods, 404 otherwise. It is mounted at "/" of each listener (the
// customers' and the metrics listener), so it runs only for calls that no other pattern matched and costs nothing
// on routed calls. Under the model-call prefixes (/models/, /chains/) it answers in the model-call envelope,
// whose detail is a string.
func unrouted(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		write := httperr.WriteError
		if strings.HasPrefix(r.URL.Path, "/models/") || strings.HasPrefix(r.URL.Path, "/chains/") {
			write = httperr.WriteModelCallError
		}
		var allow []string
		for _, m := range routeMethods {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			write(w, httperr.MethodNotAllowed(r, allow))
			return
		}
		write(w, httperr.NoRoute(r))
	}
}
