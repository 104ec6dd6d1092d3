package kit

import (
	"fmt"
	"net/http"
)

// Query is the query parameter name of a route that reads it once: "" when absent. Given more than once it is
// 400 invalid_request naming it, and Query reports false: which of two values a route would take is a guess the
// client cannot see ("?team_id=a&team_id=b").
func Query(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	return once(w, name, "", r.URL.Query()[name])
}

// Header is Query for a request header a route reads once.
func Header(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	return once(w, name, "The header ", r.Header.Values(name))
}

// once is the only value of vs, "" for none, or the 400 naming name when there are several.
func once(w http.ResponseWriter, name, prefix string, vs []string) (string, bool) {
	switch len(vs) {
	case 0:
		return "", true
	case 1:
		return vs[0], true
	}
	BadRequest(w, name, fmt.Sprintf("%s%s is given %d times; give it once.", prefix, name, len(vs)))
	return "", false
}
