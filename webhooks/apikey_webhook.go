package webhooks

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-apikey,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=gateway.modelgate.io,resources=apikeys,verbs=create;update;delete,versions=v1alpha1,name=vapikey-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

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
	return nil, revokePrefix(ctx, v.Claims, apiKeyKind, k, k.Spec.Prefix, k.Spec.Hash)
}

func (v *APIKeyValidator) validate(ctx context.Context, k *gatewayv1.APIKey) error {
	if err := admitSecretKey(ctx, v.Reader, apiKeyKind, k, k.Spec.KeySource); err != nil {
		return err
	}
	return admitPrefix(ctx, v.Reader, v.Claims, apiKeyKind, workspaceAPIKeyKind, k, k.Spec.Prefix)
}
