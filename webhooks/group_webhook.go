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
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/hierarchy"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-group,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=groups,verbs=create;update,versions=v1alpha1,name=vgroup-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var externalIDPath = field.NewPath("spec", "externalEntityID")

// GroupValidator checks a Group against the other Groups of its namespace: the hierarchy rules of
// hierarchy.Validate and the uniqueness of spec.externalEntityID.
type GroupValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Group] = &GroupValidator{}

// ValidateCreate checks every rule.
func (v *GroupValidator) ValidateCreate(ctx context.Context, g *gatewayv1.Group) (admission.Warnings, error) {
	return nil, v.validate(ctx, g, withDescendants, true)
}

// ValidateUpdate checks the hierarchy when models change and uniqueness when the external id changes. A group
// being deleted is left alone so that its finalizer can always be removed. The hierarchy is immutable, so an
// update can only break the cascading rule: against an ancestor by raising a limit, against a descendant by
// lowering or adding one. Only the second needs the subtree read.
func (v *GroupValidator) ValidateUpdate(ctx context.Context, old, g *gatewayv1.Group) (admission.Warnings, error) {
	if g.DeletionTimestamp != nil {
		return nil, nil
	}
	tree := skipTree
	if !equality.Semantic.DeepEqual(old.Spec.Models, g.Spec.Models) || !equality.Semantic.DeepEqual(old.Spec.Hierarchy, g.Spec.Hierarchy) {
		tree = ancestorsOnly
		if tightens(old, g) {
			tree = withDescendants
		}
	}
	idChanged := old.Spec.ExternalEntityID != g.Spec.ExternalEntityID
	if tree == skipTree && !idChanged {
		return nil, nil
	}
	return nil, v.validate(ctx, g, tree, idChanged)
}

// treeCheck says how much of the hierarchy a write is checked against.
type treeCheck int

const (
	skipTree treeCheck = iota
	ancestorsOnly
	withDescendants
)

// tightens reports whether g declares a limit that old did not, or a lower threshold than old for the same
// (slug, type, unit): the only changes a descendant's declared limit can newly exceed.
func tightens(old, g *gatewayv1.Group) bool {
	type key struct{ slug, typ, unit string }
	before := map[key]int64{}
	for _, m := range old.Spec.Models {
		for _, l := range append(slices.Clone(m.RateLimits), m.UsageLimits...) {
			before[key{m.Slug, string(l.Type), string(l.Unit)}] = l.Threshold
		}
	}
	for _, m := range g.Spec.Models {
		for _, l := range append(slices.Clone(m.RateLimits), m.UsageLimits...) {
			if t, ok := before[key{m.Slug, string(l.Type), string(l.Unit)}]; !ok || l.Threshold < t {
				return true
			}
		}
	}
	return false
}

// ValidateDelete admits every deletion: the finalizer removes the subtree.
func (v *GroupValidator) ValidateDelete(context.Context, *gatewayv1.Group) (admission.Warnings, error) {
	return nil, nil
}

func (v *GroupValidator) validate(ctx context.Context, g *gatewayv1.Group, tree treeCheck, checkID bool) error {
	var errs field.ErrorList
	if checkID {
		o, err := holder(ctx, v.Reader, &gatewayv1.GroupList{}, g, g.Spec.ExternalEntityID, fieldExternalID)
		if err != nil {
			return listFailed("Groups", g.Namespace, err)
		}
		if o != nil {
			errs = append(errs, duplicate(externalIDPath, g.Spec.ExternalEntityID, "Group", o.GetName(), "within the namespace"))
		}
	}
	if tree != skipTree {
		related, err := v.neighbourhood(ctx, g, tree == withDescendants)
		if err != nil {
			return err
		}
		errs = append(errs, hierarchy.Validate(g, hierarchy.NewIndex(related).With(g))...)
	}
	return refuse(ctx, "Group", g.Name, errs)
}

// neighbourhood reads the groups the hierarchy rules of g depend on: its ancestors (at most MaxDepth, enough to
// tell that a chain is too deep) and, when asked, its descendants (at most MaxDepth levels), each level through
// the parent field selector with the level's reads in parallel. That costs a handful of small reads for a
// group with few descendants, whatever the size of the workspace, where listing the namespace would cost time
// in proportion to every group in it. Groups being deleted do not count.
func (v *GroupValidator) neighbourhood(ctx context.Context, g *gatewayv1.Group, descendants bool) ([]*gatewayv1.Group, error) {
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
	if !descendants {
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
			next = append(next, k.Name)
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
			return v.Reader.List(ctx, &lists[i], client.InNamespace(ns), client.MatchingFields{fieldParent: id})
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
