package webhooks

import (
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestTightened decides whether an update must be checked against the subtree: only a limit that is new, or
// lower than before for the same (slug, type, unit), can fall below a descendant's.
func TestTightened(t *testing.T) {
	group := func(models ...gatewayv1.ModelConfig) *gatewayv1.Group {
		return &gatewayv1.Group{Spec: gatewayv1.GroupSpec{Models: models}}
	}
	rate := func(slug string, typ gatewayv1.LimitType, threshold int64) gatewayv1.ModelConfig {
		return gatewayv1.ModelConfig{Slug: slug, RateLimits: []gatewayv1.Limit{{Type: typ, Unit: gatewayv1.UnitMinute, Threshold: threshold}}}
	}
	usage := func(slug string, threshold int64) gatewayv1.ModelConfig {
		return gatewayv1.ModelConfig{Slug: slug, UsageLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitDay, Threshold: threshold}}}
	}
	req, tok := gatewayv1.LimitTypeRequest, gatewayv1.LimitTypeToken
	for _, tc := range []struct {
		name     string
		old, new *gatewayv1.Group
		want     bool
	}{
		{"raised", group(rate("m", req, 10)), group(rate("m", req, 20)), false},
		{"unchanged", group(rate("m", req, 10)), group(rate("m", req, 10)), false},
		{"removed", group(rate("m", req, 10)), group(gatewayv1.ModelConfig{Slug: "m"}), false},
		{"slug added without limits", group(rate("m", req, 10)), group(rate("m", req, 10), gatewayv1.ModelConfig{Slug: "n"}), false},
		{"lowered", group(rate("m", req, 10)), group(rate("m", req, 9)), true},
		{"added", group(gatewayv1.ModelConfig{Slug: "m"}), group(rate("m", req, 10)), true},
		{"same threshold, other type", group(rate("m", req, 10)), group(rate("m", tok, 10)), true},
		{"same limit, other slug", group(rate("m", req, 10)), group(rate("n", req, 10)), true},
		{"usage lowered", group(usage("m", 100)), group(usage("m", 50)), true},
		{"usage raised", group(usage("m", 100)), group(usage("m", 150)), false},
	} {
		if got := len(tightened(tc.old, tc.new)) > 0; got != tc.want {
			t.Errorf("%s: tightened = %v, want some: %v", tc.name, tightened(tc.old, tc.new), tc.want)
		}
	}
}

// TestShields decides where a lowering's walk down the subtree may stop: at a descendant that declares every
// tightened limit at or under its new threshold.
func TestShields(t *testing.T) {
	limits := func(ls ...gatewayv1.Limit) *gatewayv1.Group {
		return &gatewayv1.Group{Spec: gatewayv1.GroupSpec{Models: []gatewayv1.ModelConfig{{Slug: "m", RateLimits: ls}}}}
	}
	reqMin := func(threshold int64) gatewayv1.Limit {
		return gatewayv1.Limit{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: threshold}
	}
	tokMin := func(threshold int64) gatewayv1.Limit {
		return gatewayv1.Limit{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitMinute, Threshold: threshold}
	}
	// The update lowers REQUEST/MINUTE to 60 and adds TOKEN/MINUTE 1000.
	update := treeCheck{ancestors: true, descendants: true,
		tightened: tightened(limits(reqMin(100)), limits(reqMin(60), tokMin(1000)))}
	for _, tc := range []struct {
		name  string
		tree  treeCheck
		child *gatewayv1.Group
		want  bool
	}{
		{"holds both, lower", update, limits(reqMin(50), tokMin(500)), true},
		{"holds both, equal", update, limits(reqMin(60), tokMin(1000)), true},
		{"one above", update, limits(reqMin(61), tokMin(500)), false},
		{"one missing", update, limits(reqMin(50)), false},
		{"none", update, limits(), false},
		{"other slug", update, &gatewayv1.Group{Spec: gatewayv1.GroupSpec{Models: []gatewayv1.ModelConfig{
			{Slug: "n", RateLimits: []gatewayv1.Limit{reqMin(1), tokMin(1)}}}}}, false},
		{"a create reads everything", treeCheck{ancestors: true, descendants: true}, limits(reqMin(1), tokMin(1)), false},
	} {
		if got := tc.tree.shields(tc.child); got != tc.want {
			t.Errorf("%s: shields = %v, want %v", tc.name, got, tc.want)
		}
	}
}
