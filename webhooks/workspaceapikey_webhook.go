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

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-workspaceapikey,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=gateway.modelgate.io,resources=workspaceapikeys,verbs=create;update;delete,versions=v1alpha1,name=vworkspaceapikey-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

// WorkspaceAPIKeyValidator refuses a WorkspaceAPIKey whose spec.prefix another WorkspaceAPIKey of the namespace
// already uses, in its spec or its status.
type WorkspaceAPIKeyValidator struct {
	Reader client.Reader
	// Claims makes the prefix's uniqueness across both key kinds atomic, and keeps revoked prefixes (see
	// claimer); only the list checks run when nil.
	Claims *claimer
}

var _ admission.Validator[*gatewayv1.WorkspaceAPIKey] = &WorkspaceAPIKeyValidator{}

// ValidateCreate checks the prefix.
func (v *WorkspaceAPIKeyValidator) ValidateCreate(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	return nil, v.validate(ctx, k)
}

// ValidateUpdate checks the prefix only when it changes.
func (v *WorkspaceAPIKeyValidator) ValidateUpdate(ctx context.Context, old, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	if k.DeletionTimestamp != nil || old.Spec.Prefix == k.Spec.Prefix {
		return nil, nil
	}
	return nil, v.validate(ctx, k)
}

// ValidateDelete admits every deletion.
func (v *WorkspaceAPIKeyValidator) ValidateDelete(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	if k.Spec.Prefix == "" || v.Claims == nil {
		return nil, nil
	}
	// Deleting a key revokes it for good: its prefix claim becomes a tombstone.
	if err := v.Claims.revoke(ctx, k.Namespace, k.Spec.Prefix, k.Spec.Hash, claimantOf("WorkspaceAPIKey", k)); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("revocation of WorkspaceAPIKey %s: %w", k.Name, err))
	}
	return nil, nil
}

func (v *WorkspaceAPIKeyValidator) validate(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) error {
	if k.Spec.Prefix == "" {
		return nil
	}
	o, err := holder(ctx, v.Reader, &gatewayv1.WorkspaceAPIKeyList{}, k, k.Spec.Prefix, gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix)
	if err != nil {
		return listFailed("WorkspaceAPIKeys", k.Namespace, err)
	}
	if o != nil {
		return refuse(ctx, "WorkspaceAPIKey", k.Name, field.ErrorList{duplicate(prefixPath, k.Spec.Prefix, "WorkspaceAPIKey", o.GetName(), "among the WorkspaceAPIKeys of the namespace")})
	}
	// The other kind of key shares the prefix space: gatewayd finds either kind by its prefix.
	o, err = holder(ctx, v.Reader, &gatewayv1.APIKeyList{}, k, k.Spec.Prefix, gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix)
	if err != nil {
		return listFailed("APIKeys", k.Namespace, err)
	}
	if o != nil {
		return refuse(ctx, "WorkspaceAPIKey", k.Name, field.ErrorList{duplicate(prefixPath, k.Spec.Prefix, "APIKey", o.GetName(), "among the keys of the namespace")})
	}
	if v.Claims == nil {
		return nil
	}
	refusal, err := v.Claims.take(ctx, k.Namespace, claimKeyPrefix, k.Spec.Prefix, claimantOf("WorkspaceAPIKey", k))
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission of WorkspaceAPIKey %s: %w", k.Name, err))
	}
	if refusal != nil {
		return refuse(ctx, "WorkspaceAPIKey", k.Name, field.ErrorList{refusal.fieldError(prefixPath, k.Spec.Prefix, "among the keys of the namespace")})
	}
	return nil
}
