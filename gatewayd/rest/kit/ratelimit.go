package kit

import (
	"net/http"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// Row is one row of the management rate-limit table (docs/rest-api.md "Management rate limits"): the endpoint it
// names and its limit, N calls per Window for each API key. Every row is a bucket of its own.
type Row struct {
	// Endpoint names the row: the table's endpoint ("POST /v1/models/{model_id}/deployments/production/retry"), or,
	// for every endpoint the table does not list, the route pattern that serves it ("GET /v1/gateway/groups").
	Endpoint string
	N        int
	Window   time.Duration
}

// limitTable holds the rows of the table that name an endpoint, in the table's order: an environment's row
// (development, production) before the deployment id's, so the first row that matches a call is the one that
// names it most exactly.
var limitTable = []Row{
	{"POST /v1/models/{model_id}/deployments/development/activate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/production/activate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/{deployment_id}/activate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/development/deactivate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/production/deactivate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/{deployment_id}/deactivate", 20, time.Minute},
	{"POST /v1/models/{model_id}/deployments/development/retry", 10, time.Minute},
	{"POST /v1/models/{model_id}/deployments/production/retry", 10, time.Minute},
	{"POST /v1/models/{model_id}/deployments/{deployment_id}/retry", 10, time.Minute},
	{"POST /v1/models/{model_id}/deployments/{deployment_id}/logs", 30, time.Second},
}

// The limit of every endpoint the table does not list, each its own bucket.
const (
	defaultLimitN      = 100
	defaultLimitWindow = time.Second
)

// ManagementRow is the row of the table that a call belongs to: pattern is the route pattern that matched it
// ("POST /v1/models/{model_id}/deployments/{deployment_id}/retry") and pathValue reads the call's value of a
// wildcard of that pattern (http.Request.PathValue). A call belongs to the first row of the table whose method
// and path match, a wildcard of the row matching any segment, a literal only itself: so a deployment id of
// "production" is the production row, any other id the {deployment_id} row. A call no row names belongs to its
// route pattern's own row at the default limit: one bucket per method and route.
func ManagementRow(pattern string, pathValue func(string) string) Row {
	for _, row := range limitTable {
		if matchRow(row.Endpoint, pattern, pathValue) {
			return row
		}
	}
	return Row{Endpoint: pattern, N: defaultLimitN, Window: defaultLimitWindow}
}

// matchRow reports whether a call matched by pattern is one of the table's endpoint: same method, same number of
// segments, and each segment of the endpoint a wildcard or the call's segment (a literal of the pattern, or the
// call's value of its wildcard).
func matchRow(endpoint, pattern string, pathValue func(string) string) bool {
	em, ep, _ := strings.Cut(endpoint, " ")
	pm, pp, ok := strings.Cut(pattern, " ")
	if !ok || em != pm {
		return false
	}
	es, ps := strings.Split(ep, "/"), strings.Split(pp, "/")
	if len(es) != len(ps) {
		return false
	}
	for i, e := range es {
		if isWildcard(e) {
			continue
		}
		seg := ps[i]
		if isWildcard(seg) {
			seg = pathValue(strings.Trim(seg, "{}"))
		}
		if seg != e {
			return false
		}
	}
	return true
}

func isWildcard(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// rateLimited counts the call r of c against its row and, when the row's window is full, answers 429 with the
// whole seconds until it ends (rounded up, at least 1) and reports true.
func (k *Kit) rateLimited(w http.ResponseWriter, r *http.Request, c auth.Caller) bool {
	row := ManagementRow(r.Pattern, r.PathValue)
	ok, wait := k.Opts.Limits.Take(r.Context(), c.Namespace+"/"+c.Key.Prefix+" "+row.Endpoint, row.N, row.Window, k.Opts.Clock())
	if ok {
		return false
	}
	httperr.RateLimited(w, max(int((wait+time.Second-1)/time.Second), 1))
	return true
}
