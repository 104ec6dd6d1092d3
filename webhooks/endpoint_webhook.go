package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-endpoint,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=endpoints,verbs=create;update,versions=v1alpha1,name=vendpoint-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var slugPath = field.NewPath("spec", "slug")

// EndpointValidator refuses an Endpoint whose spec.slug another Endpoint of the namespace already routes: a slug
// must lead to one upstream.
type EndpointValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Endpoint] = &EndpointValidator{}

// ValidateCreate checks the slug.
func (v *EndpointValidator) ValidateCreate(ctx context.Context, e *gatewayv1.Endpoint) (admission.Warnings, error) {
	return nil, v.validate(ctx, e)
}

// ValidateUpdate checks the slug only when it changes (CEL makes it immutable).
func (v *EndpointValidator) ValidateUpdate(ctx context.Context, old, e *gatewayv1.Endpoint) (admission.Warnings, error) {
	if e.DeletionTimestamp != nil || old.Spec.Slug == e.Spec.Slug {
		return nil, nil
	}
	return nil, v.validate(ctx, e)
}

// ValidateDelete admits every deletion.
func (v *EndpointValidator) ValidateDelete(context.Context, *gatewayv1.Endpoint) (admission.Warnings, error) {
	return nil, nil
}

func (v *EndpointValidator) validate(ctx context.Context, e *gatewayv1.Endpoint) error {
	o, err := holder(ctx, v.Reader, &gatewayv1.EndpointList{}, e, e.Spec.Slug, gatewayv1.FieldEndpointSlug)
	if err != nil {
		return listFailed("Endpoints", e.Namespace, err)
	}
	if o != nil {
		return refuse(ctx, "Endpoint", e.Name, field.ErrorList{duplicate(slugPath, e.Spec.Slug, "Endpoint", o.GetName(), "within the namespace")})
	}
	return nil
}
