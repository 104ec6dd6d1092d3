package hierarchy

import (
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Short names keep the tables readable.
const (
	indep   = gatewayv1.EnforcementIndependent
	cascade = gatewayv1.EnforcementCascading
	tok     = gatewayv1.LimitTypeToken
	req     = gatewayv1.LimitTypeRequest
	sec     = gatewayv1.UnitSecond
	minute  = gatewayv1.UnitMinute
	day     = gatewayv1.UnitDay
)

// grp builds a group; parent "" makes a root.
func grp(name, parent string, mode gatewayv1.LimitEnforcement, models ...gatewayv1.ModelConfig) *gatewayv1.Group {
	g := &gatewayv1.Group{}
	g.Name = name
	g.Namespace = "ws"
	g.Spec.ExternalEntityID = "ext-" + name
	g.Spec.Hierarchy.LimitEnforcement = mode
	if parent != "" {
		g.Spec.Hierarchy.ParentGroupID = &parent
	}
	g.Spec.Models = models
	return g
}

// mdl builds a model config, sorting limits into rate and usage by unit.
func mdl(slug string, limits ...gatewayv1.Limit) gatewayv1.ModelConfig {
	m := gatewayv1.ModelConfig{Slug: slug}
	for _, l := range limits {
		if l.Unit == gatewayv1.UnitDay {
			m.UsageLimits = append(m.UsageLimits, l)
		} else {
			m.RateLimits = append(m.RateLimits, l)
		}
	}
	return m
}

func lim(t gatewayv1.LimitType, u gatewayv1.LimitUnit, threshold int64) gatewayv1.Limit {
	return gatewayv1.Limit{Type: t, Unit: u, Threshold: threshold}
}

func eff(t gatewayv1.LimitType, u gatewayv1.LimitUnit, threshold int64, source string) gatewayv1.EffectiveLimit {
	return gatewayv1.EffectiveLimit{Limit: lim(t, u, threshold), SourceGroup: source}
}

// chain is a linear tree root -> ... -> leaf of the given depth, named g1..gN, every group declaring slug "m".
func chainOf(n int, mode gatewayv1.LimitEnforcement) []*gatewayv1.Group {
	out := make([]*gatewayv1.Group, 0, n)
	parent := ""
	for i := 1; i <= n; i++ {
		name := "g" + string(rune('0'+i))
		out = append(out, grp(name, parent, mode, mdl("m")))
		parent = name
	}
	return out
}
