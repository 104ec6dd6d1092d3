// Package throttles serves GET /v1/gateway/throttles: how many model calls were refused with 429 over the last
// hour, per group, slug and the limit that refused them (the group's own, an ancestor's in CASCADING mode, the
// workspace's model-API tier, or none of the gateway's). It reads the throttle rollup that billing keeps beside
// the events (billing.Store.Throttles), written in the same write as each event. The dashboard charts it on the
// group page and filters the group tree with it.
package throttles

import (
	"context"
	"net/http"
	"time"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// Window is the span counted, ending now. The rollup counts per minute, so the answer starts at the minute that
// holds now minus Window: up to one minute more than an hour, never less.
const Window = time.Hour

// Count is the 429s of one (group, slug, limit).
type Count struct {
	GroupID          string `json:"group_id"`
	ExternalEntityID string `json:"external_entity_id"`
	Slug             string `json:"slug"`
	Count            int64  `json:"count"`
	// RefusedBy is billing.RefusedByGroup, RefusedByTier or RefusedByOther.
	RefusedBy string `json:"refused_by"`
	// LimitType and LimitUnit name the limit (REQUEST, TOKEN or COST; SECOND, MINUTE, DAY or MONTH); empty for OTHER.
	LimitType string `json:"limit_type"`
	LimitUnit string `json:"limit_unit"`
	// SourceGroupID is the group that set a GROUP_LIMIT: the group itself or, in CASCADING mode, an ancestor.
	SourceGroupID string `json:"source_group_id"`
}

// Answer is the body of GET /v1/gateway/throttles.
type Answer struct {
	Start string  `json:"start"`
	End   string  `json:"end"`
	Items []Count `json:"items"`
	// Truncated is always false since counts come from the rollup; kept for clients of the earlier answer.
	Truncated bool `json:"truncated"`
}

// Handler serves GET /v1/gateway/throttles for workspace ns, whose key the management API's wrapper authenticated
// and allowed to manage the gateway, as events.Handler does; optionally narrowed to one group with ?group_id=.
func Handler(store billing.Store, now func() time.Time) func(w http.ResponseWriter, r *http.Request, ns string) {
	return func(w http.ResponseWriter, r *http.Request, ns string) {
		group, ok := kit.Query(w, r, "group_id")
		if !ok {
			return
		}
		ans, err := Count429(r.Context(), store, ns, group, now().UTC())
		if err != nil {
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Billing events are unavailable; retry shortly.", nil)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, ans)
	}
}

// Count429 counts the 429s of namespace ns over the hour ending at end, of group when it is not empty.
func Count429(ctx context.Context, store billing.Store, ns, group string, end time.Time) (Answer, error) {
	start := end.Add(-Window).Truncate(billing.ThrottleBucket)
	counts, err := store.Throttles(ctx, ns, start, end)
	if err != nil {
		return Answer{}, err
	}
	items := make([]Count, 0, len(counts))
	for _, c := range counts {
		if group != "" && c.GroupID != group {
			continue
		}
		items = append(items, Count{
			GroupID: c.GroupID, ExternalEntityID: c.ExternalEntityID, Slug: c.Slug, Count: c.Count,
			RefusedBy: c.By, LimitType: c.Type, LimitUnit: c.Unit, SourceGroupID: c.SourceGroup,
		})
	}
	return Answer{Start: start.Format(time.RFC3339), End: end.Format(time.RFC3339), Items: items}, nil
}
