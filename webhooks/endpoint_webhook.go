package webhooks

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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

// ValidateCreate checks the slug and the upstream credentials.
func (v *EndpointValidator) ValidateCreate(ctx context.Context, e *gatewayv1.Endpoint) (admission.Warnings, error) {
	if err := v.validate(ctx, e); err != nil {
		return nil, err
	}
	return v.credentials(ctx, nil, e)
}

// ValidateUpdate checks the slug only when it changes (CEL makes it immutable), and the upstream credentials.
func (v *EndpointValidator) ValidateUpdate(ctx context.Context, old, e *gatewayv1.Endpoint) (admission.Warnings, error) {
	if e.DeletionTimestamp != nil {
		return nil, nil
	}
	if old.Spec.Slug != e.Spec.Slug {
		if err := v.validate(ctx, e); err != nil {
			return nil, err
		}
	}
	return v.credentials(ctx, old, e)
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

// credentials refuses an upstream key Secret that is not marked as one (gatewayv1.IsUpstreamCredential), so an
// Endpoint cannot make gatewayd send the workspace's own keys or webhook secrets to a server of its choosing, and
// a baseURL whose host the Secret does not list (gatewayv1.UpstreamHostAllowed), so it cannot send the provider's
// key anywhere else either. A Secret that lists no hosts (labelled before hosts were bound) keeps its Endpoints
// as they are, with a warning, but no target may newly point it anywhere: a create, or a target whose baseURL and
// Secret no target had before, is refused. Every target is checked, not only the first. A Secret that does not exist yet is admitted with a warning (GitOps applies in
// any order); gatewayd refuses to use it until it exists and is marked, and sends it only to a host it lists.
func (v *EndpointValidator) credentials(ctx context.Context, old, e *gatewayv1.Endpoint) (admission.Warnings, error) {
	var warnings admission.Warnings
	var errs field.ErrorList
	for i, t := range e.Spec.Targets {
		if t.APIKeySecretRef == nil {
			continue
		}
		target := field.NewPath("spec", "targets").Index(i)
		path := target.Child("apiKeySecretRef", "name")
		var s corev1.Secret
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: t.APIKeySecretRef.Name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("%s: Secret %q does not exist yet; calls fail until it exists with the label %s=true and the annotation %s listing the host of %s.",
				path, t.APIKeySecretRef.Name, gatewayv1.LabelUpstreamCredential, gatewayv1.AnnotationUpstreamHosts, t.BaseURL))
			continue
		case err != nil:
			return nil, fmt.Errorf("failed to read Secret %s/%s: %w", e.Namespace, t.APIKeySecretRef.Name, err)
		case !gatewayv1.IsUpstreamCredential(s.Labels):
			errs = append(errs, field.Invalid(path, t.APIKeySecretRef.Name, fmt.Sprintf(
				"an upstream key Secret must carry the label %s=true and not %s; label the Secret that holds the upstream's key",
				gatewayv1.LabelUpstreamCredential, gatewayv1.LabelKeyMaterial)))
			continue
		}
		allowed, listed := gatewayv1.UpstreamHostAllowed(s.Annotations, t.BaseURL)
		switch {
		case listed && !allowed:
			errs = append(errs, field.Forbidden(target.Child("baseURL"), fmt.Sprintf(
				"the key of Secret %q may be sent only to the hosts its annotation %s lists (%s); %s names another host",
				s.Name, gatewayv1.AnnotationUpstreamHosts, s.Annotations[gatewayv1.AnnotationUpstreamHosts], t.BaseURL)))
		case !listed && targetChanged(old, t):
			errs = append(errs, field.Forbidden(path, fmt.Sprintf(
				"Secret %q lists no hosts: annotate it with %s naming the host of %s before an Endpoint sends its key there (docs/operations.md)",
				s.Name, gatewayv1.AnnotationUpstreamHosts, t.BaseURL)))
		case !listed:
			warnings = append(warnings, fmt.Sprintf("%s: Secret %q lists no hosts; annotate it with %s, or this Endpoint cannot be repointed (docs/operations.md).",
				path, s.Name, gatewayv1.AnnotationUpstreamHosts))
		}
	}
	return warnings, refuse(ctx, "Endpoint", e.Name, errs)
}

// targetChanged reports whether target t of the update from old (nil on a create) sends its Secret where no
// target of old sent it: to another baseURL, or another Secret to its baseURL. A target kept as it was, though
// moved in the list, renamed or reweighted, has not changed.
func targetChanged(old *gatewayv1.Endpoint, t gatewayv1.EndpointTarget) bool {
	if old == nil {
		return true
	}
	return !slices.ContainsFunc(old.Spec.Targets, func(o gatewayv1.EndpointTarget) bool {
		return o.BaseURL == t.BaseURL && o.APIKeySecretRef != nil && o.APIKeySecretRef.Name == t.APIKeySecretRef.Name
	})
}
