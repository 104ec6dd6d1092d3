// Package events serves GET /v1/gateway/events: the workspace's billing events (one per model call made with a
// federated key, refusals included) in ascending time order, read from the billing store (billing.Store.List),
// filtered by time, key prefixes and external entity ids, paged in the {items, pagination} envelope of the other
// list routes. gatewayd mounts it beside the throttles and usage routes, behind the management wrapper.
package events

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// Handler serves GET /v1/gateway/events for workspace ns, whose key the management API's wrapper authenticated
// and allowed to manage the gateway: the workspace's events in ascending time order, filtered by start_time
// (inclusive) and end_time (exclusive), both RFC 3339 or Unix seconds, by api_keys (key prefixes) and
// external_entity_ids (comma-separated or repeated), paged by limit (kit.ParseLimit, as every list route) and
// cursor (the store's own). A refused parameter, or one of the first four given twice (kit.Query), is 400
// invalid_request naming it, as on every route.
func Handler(store billing.Store) func(w http.ResponseWriter, r *http.Request, ns string) {
	return func(w http.ResponseWriter, r *http.Request, ns string) {
		qv := r.URL.Query()
		var q billing.Query
		for _, t := range []struct {
			name string
			at   *time.Time
		}{{"start_time", &q.Start}, {"end_time", &q.End}} {
			s, ok := kit.Query(w, r, t.name)
			if !ok {
				return
			}
			var err error
			if *t.at, err = parseTime(s); err != nil {
				kit.BadRequest(w, t.name, t.name+" must be RFC 3339 or Unix seconds.")
				return
			}
		}
		if !q.Start.IsZero() && !q.End.IsZero() && !q.End.After(q.Start) {
			kit.BadRequest(w, "end_time", "end_time must be after start_time.")
			return
		}
		var ok bool
		if q.Limit, ok = kit.ParseLimit(w, r); !ok {
			return
		}
		if q.Cursor, ok = kit.Query(w, r, "cursor"); !ok {
			return
		}
		q.APIKeyPrefixes = list(qv["api_keys"])
		q.ExternalEntityIDs = list(qv["external_entity_ids"])
		events, next, err := store.List(r.Context(), ns, q)
		if errors.Is(err, billing.ErrCursor) {
			kit.BadCursor(w)
			return
		}
		if err != nil {
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Billing events could not be read; retry shortly.", nil)
			return
		}
		p := kit.PageJSON[billing.Event]{Items: events}
		if p.Items == nil {
			p.Items = []billing.Event{}
		}
		if next != "" {
			p.Pagination = kit.PaginationJSON{HasMore: true, Cursor: &next}
		}
		httperr.WriteJSON(w, http.StatusOK, p)
	}
}

// parseTime reads RFC 3339 or Unix seconds; the zero time for "".
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// list splits comma-separated and repeated values, dropping empty items.
func list(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}
