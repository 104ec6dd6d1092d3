package billing

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// Page sizes of GET /v1/gateway/events.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

type page struct {
	Items      []Event    `json:"items"`
	Pagination pagination `json:"pagination"`
}

type pagination struct {
	HasMore bool    `json:"has_more"`
	Cursor  *string `json:"cursor"`
}

func badRequest(w http.ResponseWriter, field, msg string) {
	httperr.Write(w, http.StatusBadRequest, httperr.CodeClientError, field+": "+msg, map[string]string{"field": field})
}

// Handler serves GET /v1/gateway/events for workspace ns, whose key the management API's wrapper authenticated
// and allowed to manage the gateway: the workspace's events in ascending time order, filtered by start_time
// (inclusive) and end_time (exclusive), both RFC 3339 or Unix seconds, by api_keys (key prefixes) and
// external_entity_ids (comma-separated or repeated), paged by limit and cursor in the
// {items, pagination{has_more, cursor}} envelope of the other list routes.
func Handler(store Store) func(w http.ResponseWriter, r *http.Request, ns string) {
	return func(w http.ResponseWriter, r *http.Request, ns string) {
		qv := r.URL.Query()
		var q Query
		var err error
		if q.Start, err = parseTime(qv.Get("start_time")); err != nil {
			badRequest(w, "start_time", "must be RFC 3339 or Unix seconds")
			return
		}
		if q.End, err = parseTime(qv.Get("end_time")); err != nil {
			badRequest(w, "end_time", "must be RFC 3339 or Unix seconds")
			return
		}
		if !q.Start.IsZero() && !q.End.IsZero() && !q.End.After(q.Start) {
			badRequest(w, "end_time", "must be after start_time")
			return
		}
		q.Limit = DefaultLimit
		if s := qv.Get("limit"); s != "" {
			if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > MaxLimit {
				badRequest(w, "limit", "must be an integer from 1 to "+strconv.Itoa(MaxLimit))
				return
			}
		}
		q.Cursor = qv.Get("cursor")
		q.APIKeyPrefixes = list(qv["api_keys"])
		q.ExternalEntityIDs = list(qv["external_entity_ids"])
		events, next, err := store.List(r.Context(), ns, q)
		if err != nil {
			if strings.HasPrefix(err.Error(), "cursor:") {
				badRequest(w, "cursor", "not one this server issued")
				return
			}
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Billing events could not be read; retry shortly.", nil)
			return
		}
		p := page{Items: events}
		if p.Items == nil {
			p.Items = []Event{}
		}
		if next != "" {
			p.Pagination = pagination{HasMore: true, Cursor: &next}
		}
		httperr.WriteJSON(w, http.StatusOK, p)
	}
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

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
