// Package throttles serves GET /v1/gateway/throttles: how many model calls of each group and slug were refused
// with 429 over the last hour, counted from the billing events (every call made with a federated key records one,
// refusals included). The dashboard charts it on the group page and filters the group tree with it. The events
// do not record which limit refused a call, so a count is per (group, slug); the limit in force is the group's
// effective limit for that slug.
package throttles

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// Window is the span counted, ending now.
const Window = time.Hour

// maxEvents bounds the events read for one answer; past it the answer says truncated.
const maxEvents = 200_000

// Caller authenticates a call and answers the namespace it may read, as billing.Handler's callers do.
type Caller func(r *http.Request) (namespace string, refusal *httperr.Error)

// Count is the 429s of one (group, slug).
type Count struct {
	GroupID          string `json:"group_id"`
	ExternalEntityID string `json:"external_entity_id"`
	Slug             string `json:"slug"`
	Count            int    `json:"count"`
}

// Answer is the body of GET /v1/gateway/throttles.
type Answer struct {
	Start     string  `json:"start"`
	End       string  `json:"end"`
	Items     []Count `json:"items"`
	Truncated bool    `json:"truncated"`
}

// Handler serves GET /v1/gateway/throttles, optionally narrowed to one group with ?group_id=.
func Handler(store billing.Store, caller Caller, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, refusal := caller(r)
		if refusal != nil {
			httperr.WriteError(w, refusal)
			return
		}
		end := now().UTC()
		ans, err := Count429(r.Context(), store, ns, r.URL.Query().Get("group_id"), end.Add(-Window), end)
		if err != nil {
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Billing events are unavailable; retry shortly.", nil)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, ans)
	})
}

// Count429 counts the 429 events of namespace ns in [start, end), of group when it is not empty.
func Count429(ctx context.Context, store billing.Store, ns, group string, start, end time.Time) (Answer, error) {
	type key struct{ group, slug string }
	counts := map[key]*Count{}
	q := billing.Query{Start: start, End: end, Limit: 1000}
	read := 0
	truncated := false
	for {
		events, next, err := store.List(ctx, ns, q)
		if err != nil {
			return Answer{}, err
		}
		for _, e := range events {
			if e.StatusCode != http.StatusTooManyRequests || (group != "" && e.GroupID != group) {
				continue
			}
			k := key{e.GroupID, e.ModelSlug}
			c := counts[k]
			if c == nil {
				c = &Count{GroupID: e.GroupID, ExternalEntityID: e.ExternalEntityID, Slug: e.ModelSlug}
				counts[k] = c
			}
			c.Count++
		}
		read += len(events)
		if next == "" || len(events) == 0 {
			break
		}
		if read >= maxEvents {
			truncated = true
			break
		}
		q.Cursor = next
	}
	items := make([]Count, 0, len(counts))
	for _, c := range counts {
		items = append(items, *c)
	}
	slices.SortFunc(items, func(a, b Count) int {
		if c := strings.Compare(a.GroupID, b.GroupID); c != 0 {
			return c
		}
		return strings.Compare(a.Slug, b.Slug)
	})
	return Answer{Start: start.Format(time.RFC3339), End: end.Format(time.RFC3339), Items: items, Truncated: truncated}, nil
}
