package inference

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// limitDetail is the detail of a gateway 429: the limit that fired and the group that set it.
type limitDetail struct {
	Slug        string `json:"slug"`
	Type        string `json:"type"`
	Unit        string `json:"unit"`
	Threshold   int64  `json:"threshold"`
	SourceGroup string `json:"source_group"`
}

// tierDetail is the detail of a 429 from the workspace's model-API tier: Limit names the field that fired, as
// "workspace modelAPILimits.requestsPerMinute" or "workspace modelAPILimits.tokensPerMinute". The tier counts the
// key as a whole, so the detail names no slug.
type tierDetail struct {
	Limit     string `json:"limit"`
	Type      string `json:"type"`
	Unit      string `json:"unit"`
	Threshold int64  `json:"threshold"`
}

// Values of the limit label of modelgate_gateway_limit_refusals_total, and the fields a tier 429 names.
const (
	refusedByGroup    = "group"
	tierRequestsField = "modelAPILimits.requestsPerMinute"
	tierTokensField   = "modelAPILimits.tokensPerMinute"
)

// tierField is the Workspace field a tier limit comes from.
func tierField(l limits.Limit) string {
	if l.Key.Type == limits.Token {
		return tierTokensField
	}
	return tierRequestsField
}

// admit charges the REQUEST limits of plan, for call c, or returns the 429 of the first limit hit (a group's or
// the workspace's model-API tier) and names that limit in c.refusal for the throttle rollup, or a 503 when the
// limit store cannot be reached (fail closed). Either way nothing is charged unless every limit had room.
func (h *Handler) admit(ctx context.Context, plan *limits.Plan, c *call) *httperr.Error {
	workspace, slug := c.workspace, c.model
	if plan.Empty() {
		return nil
	}
	res, err := h.opts.Limits.Admit(ctx, plan, h.opts.Clock.Now())
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Failed to check limits", "slug", slug)
		return httperr.New(http.StatusServiceUnavailable, httperr.CodeLimitsUnavailable, "Limits could not be checked; retry shortly.", nil)
	}
	if res.Allowed {
		return nil
	}
	l := plan.Limits[res.Hit]
	c.refusal = &billing.Refusal{By: billing.RefusedByGroup, Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), SourceGroup: l.SourceGroup}
	var e *httperr.Error
	if l.IsTier() {
		c.refusal.By, c.refusal.SourceGroup = billing.RefusedByTier, ""
		field := tierField(l)
		h.opts.Metrics.refusals.WithLabelValues(workspace, field).Inc()
		e = httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
			fmt.Sprintf("Rate limit exceeded: %d %s per %s for this API key on the model API, set by the workspace's %s.", l.Threshold, l.Key.Type, l.Key.Unit, field),
			tierDetail{Limit: "workspace " + field, Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), Threshold: l.Threshold})
	} else {
		h.opts.Metrics.refusals.WithLabelValues(workspace, refusedByGroup).Inc()
		code, kind := httperr.CodeRateLimited, "Rate limit"
		if l.Key.Unit.Calendar() {
			code, kind = httperr.CodeUsageLimitExceeded, "Usage limit"
		}
		e = httperr.New(http.StatusTooManyRequests, code,
			fmt.Sprintf("%s exceeded: %d %s per %s on model %s, set by group %s.", kind, l.Threshold, measure(l.Key.Type), l.Key.Unit, slug, l.SourceGroup),
			limitDetail{Slug: slug, Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), Threshold: l.Threshold, SourceGroup: l.SourceGroup})
	}
	e.RetryAfter = int64(math.Max(1, math.Ceil(res.RetryAfter.Seconds())))
	return e
}

// measure names what a limit's threshold counts in a 429's message: the type, and for COST its unit of money.
func measure(t limits.Type) string {
	if t == limits.Cost {
		return "micro-USD (COST)"
	}
	return t.String()
}

// settle charges what call c used to plan, all together: its tokens to the TOKEN limits and its cost to the COST
// limits, up the whole chain (docs/limits.md, "Check and charge"). A call that used nothing charges nothing.
func (h *Handler) settle(ctx context.Context, plan *limits.Plan, c *call, charge limits.Charge) {
	if plan.Empty() || (charge.Tokens <= 0 && charge.Cost <= 0) {
		return
	}
	if err := h.opts.Limits.Settle(context.WithoutCancel(ctx), plan, charge, h.opts.Clock.Now()); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Failed to charge tokens and cost", "workspace", c.workspace, "slug", c.model, "prefix", c.prefix)
	}
}
