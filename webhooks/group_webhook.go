package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
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
	var list gatewayv1.GroupList
	if err := v.Reader.List(ctx, &list, client.InNamespace(g.Namespace)); err != nil {
		return listFailed("Groups", g.Namespace, err)
	}
	others := make([]*gatewayv1.Group, 0, len(list.Items))
	var errs field.ErrorList
	for i := range list.Items {
		o := &list.Items[i]
		if !counts(g, o) {
			continue
		}
		others = append(others, o)
		if checkID && o.Spec.ExternalEntityID == g.Spec.ExternalEntityID {
			errs = append(errs, duplicate(externalIDPath, g.Spec.ExternalEntityID, "Group", o.Name, "within the namespace"))
		}
	}
	if checkTree {
		errs = append(errs, hierarchy.Validate(g, hierarchy.NewIndex(others).With(g))...)
	}
	return refuse(ctx, "Group", g.Name, errs)
}
