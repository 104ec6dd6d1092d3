package inference

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// limitDetail is the detail of a gateway 429: the limit that fired and the group that set it.
type limitDetail struct {
	Slug        string `json:"slug"`
	Type        string `json:"type"`
	Unit        string `json:"unit"`
	Threshold   int64  `json:"threshold"`
	SourceGroup string `json:"source_group"`
}

// admit charges the REQUEST limits of the call, or returns the 429 of the first limit hit, or a 503 when the
// limit store cannot be reached (fail closed).
func (h *Handler) admit(ctx context.Context, m *view.Model) *httperr.Error {
	if m.Plan.Empty() {
		return nil
	}
	res, err := h.opts.Limits.Admit(ctx, m.Plan, h.opts.Clock.Now())
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Failed to check limits", "slug", m.Slug)
		return httperr.New(http.StatusServiceUnavailable, httperr.CodeLimitsUnavailable, "Limits could not be checked; retry shortly.", nil)
	}
	if res.Allowed {
		return nil
	}
	l := m.Plan.Limits[res.Hit]
	code, kind := httperr.CodeRateLimited, "Rate limit"
	if l.Key.Unit == limits.Day {
		code, kind = httperr.CodeUsageLimitExceeded, "Usage limit"
	}
	e := httperr.New(http.StatusTooManyRequests, code,
		fmt.Sprintf("%s exceeded: %d %s per %s on model %s, set by group %s.", kind, l.Threshold, l.Key.Type, l.Key.Unit, m.Slug, l.SourceGroup),
		limitDetail{Slug: m.Slug, Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), Threshold: l.Threshold, SourceGroup: l.SourceGroup})
	e.RetryAfter = int64(math.Max(1, math.Ceil(res.RetryAfter.Seconds())))
	return e
}
