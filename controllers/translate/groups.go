package translate

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// Verdict is whether one group can be served, and why not. The Group reconciler writes it into the Ready
// condition, and Translate materializes exactly the groups whose verdict is Ready, so status and snapshot agree.
type Verdict struct {
	// Ready is true when the group is materialized.
	Ready bool
	// Reason is a CamelCase condition reason, gatewayv1.ReasonReady when Ready.
	Reason string
	// Message is a full sentence for the condition.
	Message string
	// Chain is the group followed by its ancestors. It is complete (ends at a root) when Resolved is true.
	Chain hierarchy.Chain
	// Resolved is true when the chain reaches a root without a cycle, so depth and effective models are known.
	Resolved bool
	// Conflict, when not empty, says which declared limit of the group is above an ancestor's in its CASCADING
	// tree (two racing writes can store that). The group is served all the same: the ancestor's limit binds.
	Conflict string
}

// Groups judges the groups of one workspace. Build it once per pass over a workspace; judging a group memoizes
// the checks of its ancestors, so judging every group costs little more than judging the deepest.
type Groups struct {
	// live indexes the groups that count: neither being deleted nor below a group being deleted.
	live *hierarchy.Index
	// deleting maps a group that is being deleted, or lies below one, to the group being deleted.
	deleting map[string]string
	// externalOwner maps an externalEntityID to the live group that holds it: the oldest.
	externalOwner map[string]string
	// own memoizes ownCheck per group id.
	own map[string]check
}

// check is the outcome of one ordered pure check: failed with a reason and message, or passed.
type check struct {
	reason, message string
	failed          bool
	// conflict reports a threshold above an ancestor's, which does not fail the group (Verdict.Conflict).
	conflict string
}

// NewGroups indexes groups for judging. groups are not modified.
func NewGroups(groups []*gatewayv1.Group) *Groups {
	all := hierarchy.NewIndex(groups)
	gs := &Groups{deleting: map[string]string{}, externalOwner: map[string]string{}, own: map[string]check{}}
	for _, g := range groups {
		if g.DeletionTimestamp == nil {
			continue
		}
		gs.deleting[g.Name] = g.Name
		for _, d := range all.Descendants(g.Name) {
			if _, ok := gs.deleting[d.Name]; !ok {
				gs.deleting[d.Name] = g.Name
			}
		}
	}
	live := make([]*gatewayv1.Group, 0, len(groups))
	owners := map[string]*gatewayv1.Group{}
	for _, g := range groups {
		if _, ok := gs.deleting[g.Name]; ok {
			continue
		}
		live = append(live, g)
		// A group being deleted frees its external id at once, so only live groups compete for one.
		if cur, ok := owners[g.Spec.ExternalEntityID]; !ok || Older(g, cur) {
			owners[g.Spec.ExternalEntityID] = g
		}
	}
	for id, g := range owners {
		gs.externalOwner[id] = g.Name
	}
	gs.live = hierarchy.NewIndex(live)
	return gs
}

// Judge returns the verdict of g, which must be one of the groups NewGroups was given. The checks run in order
// and the first failure decides: being deleted, an incomplete chain, its own validity, then its ancestors'.
func (gs *Groups) Judge(g *gatewayv1.Group) Verdict {
	if by, ok := gs.deleting[g.Name]; ok {
		msg := fmt.Sprintf("Group %s is being deleted.", g.Name)
		if by != g.Name {
			msg = fmt.Sprintf("Ancestor group %s is being deleted, and this group with it.", by)
		}
		return Verdict{Reason: gatewayv1.ReasonDeleting, Message: msg}
	}
	chain, status := gs.live.Chain(g)
	// Chain gives up one step past MaxDepth without a status, so only a chain that ends at a root is resolved.
	v := Verdict{Chain: chain, Resolved: status.Complete() && chain.Root().ParentID() == ""}
	if status.MissingParent != "" {
		v.Reason = gatewayv1.ReasonParentNotFound
		v.Message = fmt.Sprintf("Parent group %s does not exist, so the chain %s does not reach a root; the group is not served until it does.",
			status.MissingParent, chain)
		return v
	}
	if c := gs.ownCheck(g); c.failed {
		v.Reason, v.Message = c.reason, c.message
		return v
	}
	for _, a := range chain[1:] {
		if c := gs.ownCheck(a); c.failed {
			v.Reason = gatewayv1.ReasonInvalid
			v.Message = fmt.Sprintf("Ancestor group %s is not Ready (%s), so its subtree is not served.", a.Name, c.reason)
			return v
		}
	}
	v.Ready, v.Reason = true, gatewayv1.ReasonReady
	v.Message = fmt.Sprintf("Group is resolved at depth %d under root %s and served.", len(chain), chain.Root().Name)
	v.Conflict = gs.ownCheck(g).conflict
	return v
}

// ownCheck runs the checks that concern g itself: the cross-object rules of hierarchy.Validate (which the
// admission webhook also runs, but concurrent admissions can race) and uniqueness of the external id.
//
// Validate sees only g and its ancestors, not its descendants. Admission refuses a conflict from either side
// (a child above its parent, or a parent lowered below a child), but once both are stored the blame goes to the
// lower group: a child that raced past a limit, or a tree grown too deep, must never take its ancestors, and
// with them every sibling subtree, out of service.
func (gs *Groups) ownCheck(g *gatewayv1.Group) check {
	if c, ok := gs.own[g.Name]; ok {
		return c
	}
	var c check
	chain, _ := gs.live.Chain(g)
	ix := hierarchy.NewIndex(chain)
	if errs := hierarchy.ValidateStructure(g, ix); len(errs) > 0 {
		c = check{reason: gatewayv1.ReasonInvalid, message: "Group is invalid: " + joinErrors(errs) + ".", failed: true}
	} else if owner := gs.externalOwner[g.Spec.ExternalEntityID]; owner != g.Name {
		c = check{reason: gatewayv1.ReasonDuplicateExternal, failed: true,
			message: fmt.Sprintf("spec.externalEntityID %q is already held by the older group %s; it must be unique within the workspace.",
				g.Spec.ExternalEntityID, owner)}
	}
	if errs := hierarchy.ThresholdConflicts(g, ix); len(errs) > 0 && !c.failed {
		c.conflict = "A declared limit is above an ancestor's, which two concurrent writes can store: " + joinErrors(errs) +
			". The group is served; the ancestor's limit binds, since every call charges the ancestor too. Lower this limit to clear the conflict."
	}
	gs.own[g.Name] = c
	return c
}

func joinErrors(errs field.ErrorList) string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}
