package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-apikey,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=gateway.modelgate.io,resources=apikeys,verbs=create;update;delete,versions=v1alpha1,name=vapikey-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var prefixPath = field.NewPath("spec", "prefix")

// APIKeyValidator refuses an APIKey whose spec.prefix another APIKey of the namespace already uses, in its spec
// or, for keys brought through a Secret or minted by the controller, in its status. gatewayd finds a key by its
// prefix, so two keys with one prefix would make one of them unreachable.
type APIKeyValidator struct {
	Reader client.Reader
	// Claims makes the prefix's uniqueness across both key kinds atomic, and keeps revoked prefixes (see
	// claimer); only the list checks run when nil.
	Claims *claimer
}

var _ admission.Validator[*gatewayv1.APIKey] = &APIKeyValidator{}

// ValidateCreate checks the prefix.
func (v *APIKeyValidator) ValidateCreate(ctx context.Context, k *gatewayv1.APIKey) (admission.Warnings, error) {
	return nil, v.validate(ctx, k)
}

// ValidateUpdate checks the prefix only when it changes (CEL makes it immutable, so this is belt and braces).
func (v *APIKeyValidator) ValidateUpdate(ctx context.Context, old, k *gatewayv1.APIKey) (admission.Warnings, error) {
	if k.DeletionTimestamp != nil || old.Spec.Prefix == k.Spec.Prefix {
		return nil, nil
	}
	return nil, v.validate(ctx, k)
}

// ValidateDelete admits every deletion: deleting a key revokes it.
func (v *APIKeyValidator) ValidateDelete(ctx context.Context, k *gatewayv1.APIKey) (admission.Warnings, error) {
	if k.Spec.Prefix == "" || v.Claims == nil {
		return nil, nil
	}
	// Deleting a key revokes it for good: its prefix claim becomes a tombstone.
	if err := v.Claims.revoke(ctx, k.Namespace, k.Spec.Prefix, k.Spec.Hash, claimantOf("APIKey", k)); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("revocation of APIKey %s: %w", k.Name, err))
	}
	return nil, nil
}

func (v *APIKeyValidator) validate(ctx context.Context, k *gatewayv1.APIKey) error {
	if k.Spec.Prefix == "" {
		return nil
	}
	o, err := holder(ctx, v.Reader, &gatewayv1.APIKeyList{}, k, k.Spec.Prefix, gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix)
	if err != nil {
		return listFailed("APIKeys", k.Namespace, err)
	}
	if o != nil {
		return refuse(ctx, "APIKey", k.Name, field.ErrorList{duplicate(prefixPath, k.Spec.Prefix, "APIKey", o.GetName(), "among the APIKeys of the namespace")})
	}
	// The other kind of key shares the prefix space: gatewayd finds either kind by its prefix.
	o, err = holder(ctx, v.Reader, &gatewayv1.WorkspaceAPIKeyList{}, k, k.Spec.Prefix, gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix)
	if err != nil {
		return listFailed("WorkspaceAPIKeys", k.Namespace, err)
	}
	if o != nil {
		return refuse(ctx, "APIKey", k.Name, field.ErrorList{duplicate(prefixPath, k.Spec.Prefix, "WorkspaceAPIKey", o.GetName(), "among the keys of the namespace")})
	}
	if v.Claims == nil {
		return nil
	}
	refusal, err := v.Claims.take(ctx, k.Namespace, claimKeyPrefix, k.Spec.Prefix, claimantOf("APIKey", k))
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission of APIKey %s: %w", k.Name, err))
	}
	if refusal != nil {
		return refuse(ctx, "APIKey", k.Name, field.ErrorList{refusal.fieldError(prefixPath, k.Spec.Prefix, "among the keys of the namespace")})
	}
	return nil
}
