package hierarchy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// MsgChildExceedsParent is the exact refusal of a CASCADING threshold above an ancestor's, or of an ancestor
// lowered below a descendant's.
const MsgChildExceedsParent = "Child group exceeds parent group limit."

var (
	specPath      = field.NewPath("spec")
	parentPath    = specPath.Child("hierarchy", "parentGroupID")
	modePath      = specPath.Child("hierarchy", "limitEnforcement")
	modelsPath    = specPath.Child("models")
	rateLimitsKey = "rateLimits"
	usageKey      = "usageLimits"
)

// Validate checks g against the other groups of its workspace: no cycle, a depth of at most MaxDepth counting
// both g's ancestors and its existing descendants, the same limitEnforcement as the root of its tree, and, in
// CASCADING trees, no threshold above an ancestor's and none below a descendant's for the same (slug, type,
// unit). ix must hold g as written (see Index.With). A missing parent is not an error: GitOps applies objects in
// any order, and the reconciler reports it as a condition.
func Validate(g *gatewayv1.Group, ix *Index) field.ErrorList {
	if errs := ValidateStructure(g, ix); len(errs) > 0 {
		return errs
	}
	return ThresholdConflicts(g, ix)
}

// ValidateStructure checks the rules whose breach leaves a group without a meaning: no cycle, at most MaxDepth
// levels, the root's limitEnforcement. A group that breaks one is not served.
func ValidateStructure(g *gatewayv1.Group, ix *Index) field.ErrorList {
	var errs field.ErrorList
	chain, status := ix.Chain(g)
	if status.Cycle {
		return append(errs, field.Invalid(parentPath, g.ParentID(),
			fmt.Sprintf("parent chain %s returns to %s: a hierarchy may not contain a cycle", chain, chain[len(chain)-1].ParentID())))
	}
	below := ix.Height(g.Name) - 1
	if depth := len(chain) + below; depth > gatewayv1.MaxDepth {
		msg := fmt.Sprintf("hierarchy would be %d levels deep (%d above, %d below %s); at most %d levels are allowed",
			depth, len(chain)-1, below, g.Name, gatewayv1.MaxDepth)
		return append(errs, field.Invalid(parentPath, g.ParentID(), msg))
	}

	root := chain.Root()
	mode := g.Enforcement()
	if root != g && root.Enforcement() != mode {
		errs = append(errs, field.Invalid(modePath, mode,
			fmt.Sprintf("must equal the limitEnforcement of the tree's root %s (%s)", root.Name, root.Enforcement())))
	}
	for _, d := range ix.Descendants(g.Name) {
		if d.Enforcement() != root.Enforcement() {
			errs = append(errs, field.Invalid(modePath, mode,
				fmt.Sprintf("descendant %s uses %s; every group of a tree must use the root's limitEnforcement", d.Name, d.Enforcement())))
			break
		}
	}
	return errs
}

// ThresholdConflicts returns, in a CASCADING tree, each declared limit of g above the same (slug, type, unit) of
// an ancestor or below that of a descendant. Admission refuses them; but two racing writes (a parent lowered
// while a child is raised) can both be stored. Such a group is still served: in CASCADING mode every call
// charges every ancestor's bucket too, so the ancestor's lower limit binds whatever the child declares, and taking
// the child out of service would only turn its customers' calls into 401s.
func ThresholdConflicts(g *gatewayv1.Group, ix *Index) field.ErrorList {
	chain, status := ix.Chain(g)
	if status.Cycle || chain.Root().Enforcement() != gatewayv1.EnforcementCascading {
		return nil
	}
	return validateCascading(g, chain[1:], ix.Descendants(g.Name))
}

// CascadingConflicts is the cascading threshold rule of g against the given ancestors and descendants alone,
// whatever the index says: the admission webhook runs it against the limits that concurrent admissions have
// claimed but not yet stored (docs/decisions.md), so its refusals read as Validate's.
func CascadingConflicts(g *gatewayv1.Group, ancestors, descendants []*gatewayv1.Group) field.ErrorList {
	return validateCascading(g, ancestors, descendants)
}

// validateCascading refuses any declared limit of g above the same (slug, type, unit) of an ancestor, or below
// that of a descendant.
func validateCascading(g *gatewayv1.Group, ancestors []*gatewayv1.Group, descendants []*gatewayv1.Group) field.ErrorList {
	var errs field.ErrorList
	for i, m := range g.Spec.Models {
		for _, kind := range []struct {
			name   string
			limits []gatewayv1.Limit
		}{{rateLimitsKey, m.RateLimits}, {usageKey, m.UsageLimits}} {
			for j, l := range kind.limits {
				path := modelsPath.Index(i).Child(kind.name).Index(j).Child("threshold")
				if a, t, ok := tightest(ancestors, m.Slug, l, func(other, mine int64) bool { return other < mine }); ok {
					errs = append(errs, field.Forbidden(path, fmt.Sprintf("%s (%s %s %s: %d here, ancestor %s allows %d)",
						MsgChildExceedsParent, m.Slug, l.Type, l.Unit, l.Threshold, a, t)))
				}
				if d, t, ok := tightest(descendants, m.Slug, l, func(other, mine int64) bool { return other > mine }); ok {
					errs = append(errs, field.Forbidden(path, fmt.Sprintf("%s (%s %s %s: %d here, descendant %s declares %d; lower the descendant first)",
						MsgChildExceedsParent, m.Slug, l.Type, l.Unit, l.Threshold, d, t)))
				}
			}
		}
	}
	return errs
}

// tightest returns the first group among others that declares the same (slug, type, unit) as l with a threshold
// for which conflicts(threshold, l.Threshold) holds.
func tightest(others []*gatewayv1.Group, slug string, l gatewayv1.Limit, conflicts func(other, mine int64) bool) (string, int64, bool) {
	for _, o := range others {
		m := modelOf(o, slug)
		if m == nil {
			continue
		}
		for _, ol := range append(append([]gatewayv1.Limit{}, m.RateLimits...), m.UsageLimits...) {
			if ol.Type == l.Type && ol.Unit == l.Unit && conflicts(ol.Threshold, l.Threshold) {
				return o.Name, ol.Threshold, true
			}
		}
	}
	return "", 0, false
}
