package webhooks

import (
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestTightens decides whether an update must be checked against the subtree: only a limit that is new, or
// lower than before for the same (slug, type, unit), can fall below a descendant's.
func TestTightens(t *testing.T) {
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
		if got := tightens(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: tightens = %v, want %v", tc.name, got, tc.want)
		}
	}
}
