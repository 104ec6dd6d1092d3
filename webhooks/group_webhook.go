package webhooks

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-group,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=gateway.modelgate.io,resources=groups,verbs=create;update,versions=v1alpha1,name=vgroup-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var externalIDPath = field.NewPath("spec", "externalEntityID")

// GroupValidator checks a Group against the other Groups of its namespace: the hierarchy rules of
// hierarchy.Validate and the uniqueness of spec.externalEntityID.
type GroupValidator struct {
	Reader client.Reader
	// Claims makes the external id's uniqueness atomic (see claimer); only the list check runs when nil.
	Claims *claimer
}

var _ admission.Validator[*gatewayv1.Group] = &GroupValidator{}

// ValidateCreate checks every rule. The whole subtree is read: a group created above groups that already name
// it as their parent is checked against all of them (depth, enforcement, thresholds).
func (v *GroupValidator) ValidateCreate(ctx context.Context, g *gatewayv1.Group) (admission.Warnings, error) {
	if err := v.parentNotDeleting(ctx, g); err != nil {
		return nil, err
	}
	return nil, v.validate(ctx, g, treeCheck{ancestors: true, descendants: true}, true)
}

// parentNotDeleting refuses a child of a group being deleted: the parent's finalizer is removing its subtree,
// and a child created now would be left without a parent, unserved. A parent that does not exist yet is fine
// (GitOps applies in any order); only one on its way out refuses.
func (v *GroupValidator) parentNotDeleting(ctx context.Context, g *gatewayv1.Group) error {
	pid := g.ParentID()
	if pid == "" {
		return nil
	}
	parent := &gatewayv1.Group{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: pid}, parent)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return apierrors.NewInternalError(fmt.Errorf("admission of group %s: failed to read parent %s: %w", g.Name, pid, err))
	case parent.DeletionTimestamp != nil:
		return refuse(ctx, "Group", g.Name, field.ErrorList{field.Forbidden(field.NewPath("spec", "hierarchy", "parentGroupID"),
			fmt.Sprintf("parent group %s is being deleted; a child cannot be created under it", pid))})
	}
	return nil
}

// ValidateUpdate checks the hierarchy when models change and uniqueness when the external id changes. A group
// being deleted is left alone so that its finalizer can always be removed. The hierarchy is immutable, so an
// update can only break the cascading rule: against an ancestor by raising a limit, against a descendant by
// lowering or adding one. Only the second needs the subtree read, and only as far down as a descendant that
// does not already hold the new limits (see treeCheck.shields).
func (v *GroupValidator) ValidateUpdate(ctx context.Context, old, g *gatewayv1.Group) (admission.Warnings, error) {
	if g.DeletionTimestamp != nil {
		if len(g.Finalizers) == 0 && v.Claims != nil {
			// The last finalizer goes and the group with it: its external id is free at once, not only once its
			// claim is older than an admission can take. A failure only leaves that wait; it never blocks the
			// finalizer.
			if err := v.Claims.release(ctx, g.Namespace, claimExternalID, g.Spec.ExternalEntityID, claimantOf("Group", g)); err != nil {
				log.FromContext(ctx).Error(err, "Failed to release the external id of a deleted group", "group", g.Name)
			}
			if err := v.Claims.dropLimitClaim(ctx, g.Namespace, g.Name); err != nil {
				log.FromContext(ctx).Error(err, "Failed to delete the limit claim of a deleted group", "group", g.Name)
			}
		}
		return nil, nil
	}
	var tree treeCheck
	if !equality.Semantic.DeepEqual(old.Spec.Models, g.Spec.Models) || !equality.Semantic.DeepEqual(old.Spec.Hierarchy, g.Spec.Hierarchy) {
		tree.ancestors = true
		if t := tightened(old, g); len(t) > 0 {
			tree.descendants, tree.tightened = true, t
		}
	}
	idChanged := old.Spec.ExternalEntityID != g.Spec.ExternalEntityID
	if !tree.ancestors && !idChanged {
		return nil, nil
	}
	return nil, v.validate(ctx, g, tree, idChanged)
}

// treeCheck says how much of the hierarchy a write is checked against.
type treeCheck struct {
	// ancestors reads g's chain of ancestors; descendants reads its subtree as well.
	ancestors, descendants bool
	// tightened, on an update, holds the limits the update adds or lowers; nil on a create.
	tightened limitSet
}

// shields reports whether the subtree below descendant d can be left unread: d declares every tightened limit
// at or under its new threshold, and d's own descendants were admitted against d (no threshold above an
// ancestor's), so none of them can exceed the new thresholds either. d itself is still checked. A create
// has no tightened set and reads the whole subtree. Should two racing writes have left a descendant above d,
// the reconciler's own check of that descendant against its ancestors still reports it.
func (t treeCheck) shields(d *gatewayv1.Group) bool {
	if len(t.tightened) == 0 {
		return false
	}
	held := declaredLimits(d)
	for k, threshold := range t.tightened {
		if h, ok := held[k]; !ok || h > threshold {
			return false
		}
	}
	return true
}

// limitKey is what the cascading rule compares limits by.
type limitKey struct{ slug, typ, unit string }

// limitSet maps limits to their thresholds.
type limitSet map[limitKey]int64

// declaredLimits returns every rate and usage limit g declares.
func declaredLimits(g *gatewayv1.Group) limitSet {
	out := limitSet{}
	for _, m := range g.Spec.Models {
		for _, l := range append(slices.Clone(m.RateLimits), m.UsageLimits...) {
			out[limitKey{m.Slug, string(l.Type), string(l.Unit)}] = l.Threshold
		}
	}
	return out
}

// tightened returns the limits g declares that old did not, or at a lower threshold than old for the same
// (slug, type, unit): the only changes a descendant's declared limit can newly exceed.
func tightened(old, g *gatewayv1.Group) limitSet {
	before := declaredLimits(old)
	out := limitSet{}
	for k, t := range declaredLimits(g) {
		if b, ok := before[k]; !ok || t < b {
			out[k] = t
		}
	}
	return out
}

// ValidateDelete admits every deletion: the finalizer removes the subtree.
func (v *GroupValidator) ValidateDelete(context.Context, *gatewayv1.Group) (admission.Warnings, error) {
	return nil, nil
}

func (v *GroupValidator) validate(ctx context.Context, g *gatewayv1.Group, tree treeCheck, checkID bool) error {
	var errs field.ErrorList
	if checkID {
		o, err := holder(ctx, v.Reader, &gatewayv1.GroupList{}, g, g.Spec.ExternalEntityID, gatewayv1.FieldGroupExternalID)
		if err != nil {
			return listFailed("Groups", g.Namespace, err)
		}
		if o != nil {
			errs = append(errs, duplicate(externalIDPath, g.Spec.ExternalEntityID, "Group", o.GetName(), "within the namespace"))
		}
	}
	if tree.ancestors {
		related, err := v.neighbourhood(ctx, g, tree)
		if err != nil {
			return err
		}
		errs = append(errs, hierarchy.Validate(g, hierarchy.NewIndex(related).With(g))...)
		if len(errs) == 0 && v.Claims != nil && g.Enforcement() == gatewayv1.EnforcementCascading && len(declaredLimits(g)) > 0 {
			// The claim on (parent, limit): what concurrent admissions of the tree were admitted with counts as if
			// stored (see claimLimitsOf).
			ancestors, err := v.claimedChain(ctx, g, related)
			if err != nil {
				return err
			}
			claimed, err := v.Claims.claimLimitsOf(ctx, g, ancestors)
			if err != nil {
				return apierrors.NewConflict(gatewayv1.GroupVersion.WithResource("groups").GroupResource(), g.Name,
					fmt.Errorf("admission of group %s: %w", g.Name, err))
			}
			errs = append(errs, claimed...)
		}
	}
	if len(errs) == 0 && checkID && v.Claims != nil {
		// Last, so a write refused for another reason claims nothing.
		refusal, err := v.Claims.take(ctx, g.Namespace, claimExternalID, g.Spec.ExternalEntityID, claimantOf("Group", g))
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("admission of group %s: %w", g.Name, err))
		}
		if refusal != nil {
			errs = append(errs, refusal.fieldError(externalIDPath, g.Spec.ExternalEntityID, "within the namespace"))
		}
	}
	return refuse(ctx, "Group", g.Name, errs)
}

// claimedChain is chainNames of g, without its last name when that group is stored but being deleted: admission
// reads it as missing (see neighbourhood), and so does the claim.
func (v *GroupValidator) claimedChain(ctx context.Context, g *gatewayv1.Group, related []*gatewayv1.Group) ([]string, error) {
	names := chainNames(g, related)
	n := len(names)
	if n == 0 || slices.ContainsFunc(related, func(o *gatewayv1.Group) bool { return o.Name == names[n-1] }) {
		return names, nil
	}
	last := &gatewayv1.Group{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: names[n-1]}, last)
	switch {
	case apierrors.IsNotFound(err):
		return names, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("admission of group %s: failed to read group %s: %w", g.Name, names[n-1], err))
	case last.DeletionTimestamp != nil:
		return names[:n-1], nil
	}
	return names, nil
}

// neighbourhood reads the groups the hierarchy rules of g depend on: its ancestors (at most MaxDepth, enough to
// tell that a chain is too deep) and, when asked, its descendants (at most MaxDepth levels), each level through
// the parent field selector with the level's reads in parallel. That costs a handful of small reads for a
// group with few descendants, whatever the size of the workspace, where listing the namespace would cost time
// in proportion to every group in it. The walk does not go below a descendant that shields its subtree (see
// treeCheck.shields), so lowering a limit of a group whose many children already hold lower limits costs one
// read of the children. Groups being deleted do not count.
func (v *GroupValidator) neighbourhood(ctx context.Context, g *gatewayv1.Group, tree treeCheck) ([]*gatewayv1.Group, error) {
	out, err := hierarchy.FetchAncestors(g, func(id string) (*gatewayv1.Group, error) {
		parent := &gatewayv1.Group{}
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: id}, parent)
		if apierrors.IsNotFound(err) || (err == nil && parent.DeletionTimestamp != nil) {
			return nil, nil
		}
		return parent, err
	})
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("admission of group %s: %w", g.Name, err))
	}
	if !tree.descendants {
		return out, nil
	}
	seen := map[string]bool{g.Name: true}
	for _, a := range out {
		seen[a.Name] = true
	}
	level := []string{g.Name}
	for depth := 1; depth <= gatewayv1.MaxDepth && len(level) > 0; depth++ {
		kids, err := v.children(ctx, g.Namespace, level)
		if err != nil {
			return nil, listFailed("Groups", g.Namespace, err)
		}
		var next []string
		for _, k := range kids {
			if seen[k.Name] || !counts(g, k) {
				continue
			}
			seen[k.Name] = true
			out = append(out, k)
			if !tree.shields(k) {
				next = append(next, k.Name)
			}
		}
		level = next
	}
	return out, nil
}

// childReads bounds the concurrent reads of one level of a subtree.
const childReads = 8

// children lists the groups whose parent is one of parents, in the order of parents.
func (v *GroupValidator) children(ctx context.Context, ns string, parents []string) ([]*gatewayv1.Group, error) {
	lists := make([]gatewayv1.GroupList, len(parents))
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(childReads)
	for i, id := range parents {
		eg.Go(func() error {
			return v.Reader.List(ctx, &lists[i], client.InNamespace(ns), client.MatchingFields{gatewayv1.FieldGroupParent: id})
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var out []*gatewayv1.Group
	for i := range lists {
		for j := range lists[i].Items {
			out = append(out, &lists[i].Items[j])
		}
	}
	return out, nil
}
