package kit

import (
	"fmt"
	"net/http"
)

// Query is the query parameter name of a route that reads it once: "" when absent. Given more than once it is
// 400 invalid_request naming it, and Query reports false: which of two values a route would take is a guess the
// client cannot see ("?team_id=a&team_id=b").
func Query(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	vs := r.URL.Query()[name]
	if len(vs) > 1 {
		BadRequest(w, name, fmt.Sprintf("%s is given %d times; give it once.", name, len(vs)))
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}

// Header is Query for a request header a route reads once.
func Header(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	vs := r.Header.Values(name)
	if len(vs) > 1 {
		BadRequest(w, name, fmt.Sprintf("The %s header is given %d times; give it once.", name, len(vs)))
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}
