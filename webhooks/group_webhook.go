package webhooks

import (
	"context"
	"fmt"

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
	return nil, v.validate(ctx, g, true, true)
}

// ValidateUpdate checks the hierarchy when models change and uniqueness when the external id changes. A group
// being deleted is left alone so that its finalizer can always be removed.
func (v *GroupValidator) ValidateUpdate(ctx context.Context, old, g *gatewayv1.Group) (admission.Warnings, error) {
	if g.DeletionTimestamp != nil {
		return nil, nil
	}
	modelsChanged := !equality.Semantic.DeepEqual(old.Spec.Models, g.Spec.Models) ||
		!equality.Semantic.DeepEqual(old.Spec.Hierarchy, g.Spec.Hierarchy)
	idChanged := old.Spec.ExternalEntityID != g.Spec.ExternalEntityID
	if !modelsChanged && !idChanged {
		return nil, nil
	}
	return nil, v.validate(ctx, g, modelsChanged, idChanged)
}

// ValidateDelete admits every deletion: the finalizer removes the subtree.
func (v *GroupValidator) ValidateDelete(context.Context, *gatewayv1.Group) (admission.Warnings, error) {
	return nil, nil
}

func (v *GroupValidator) validate(ctx context.Context, g *gatewayv1.Group, checkTree, checkID bool) error {
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
	if checkTree {
		related, err := v.neighbourhood(ctx, g)
		if err != nil {
			return err
		}
		errs = append(errs, hierarchy.Validate(g, hierarchy.NewIndex(related).With(g))...)
	}
	return refuse(ctx, "Group", g.Name, errs)
}

// neighbourhood reads the groups the hierarchy rules of g depend on: its ancestors (at most MaxDepth, enough to
// tell that a chain is too deep) and its descendants (at most MaxDepth levels), each level through the parent
// field selector. That is a handful of small reads whatever the size of the workspace, where listing the
// namespace would cost time in proportion to every group in it. Groups being deleted do not count.
func (v *GroupValidator) neighbourhood(ctx context.Context, g *gatewayv1.Group) ([]*gatewayv1.Group, error) {
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
	seen := map[string]bool{g.Name: true}
	for _, a := range out {
		seen[a.Name] = true
	}
	level := []string{g.Name}
	for depth := 1; depth <= gatewayv1.MaxDepth && len(level) > 0; depth++ {
		var next []string
		for _, id := range level {
			var kids gatewayv1.GroupList
			if err := v.Reader.List(ctx, &kids, client.InNamespace(g.Namespace), client.MatchingFields{fieldParent: id}); err != nil {
				return nil, listFailed("Groups", g.Namespace, err)
			}
			for i := range kids.Items {
				k := &kids.Items[i]
				if seen[k.Name] || !counts(g, k) {
					continue
				}
				seen[k.Name] = true
				out = append(out, k)
				next = append(next, k.Name)
			}
		}
		level = next
	}
	return out, nil
}
