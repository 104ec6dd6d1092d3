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

var (
	keyDisplayNamePath = field.NewPath("spec", "displayName")
	keyTeamIDPath      = field.NewPath("spec", "teamID")
)

// WorkspaceAPIKeyValidator refuses a WorkspaceAPIKey whose spec.prefix another key of the namespace already uses,
// in its spec or its status, and one whose spec.displayName another key uses within the same name scope
// (gatewayv1.WorkspaceAPIKey.NameScope: per team, per user for PERSONAL keys, per workspace for key-management
// keys). A team key naming a Team that does not exist is admitted with a warning: GitOps may apply the Team
// after the key.
type WorkspaceAPIKeyValidator struct {
	Reader client.Reader
	// Claims makes the prefix's uniqueness across both key kinds, and the name's within its scope, atomic, and
	// keeps revoked prefixes (see claimer); only the list checks run when nil.
	Claims *claimer
}

var _ admission.Validator[*gatewayv1.WorkspaceAPIKey] = &WorkspaceAPIKeyValidator{}

// ValidateCreate checks the name and the prefix.
func (v *WorkspaceAPIKeyValidator) ValidateCreate(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	if err := v.validateName(ctx, k, false); err != nil {
		return nil, err
	}
	if err := v.validate(ctx, k); err != nil {
		return nil, err
	}
	if err := v.validateName(ctx, k, true); err != nil {
		return nil, err
	}
	return v.teamWarnings(ctx, k)
}

// ValidateUpdate checks the prefix, the name and the team only when they change: a rename, a new owner or a new
// team moves the key into another name scope.
func (v *WorkspaceAPIKeyValidator) ValidateUpdate(ctx context.Context, old, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	if k.DeletionTimestamp != nil {
		return nil, nil
	}
	nameChanged := old.NameClaim() != k.NameClaim()
	if nameChanged {
		if err := v.validateName(ctx, k, false); err != nil {
			return nil, err
		}
	}
	if old.Spec.Prefix != k.Spec.Prefix {
		if err := v.validate(ctx, k); err != nil {
			return nil, err
		}
	}
	if nameChanged {
		if err := v.validateName(ctx, k, true); err != nil {
			return nil, err
		}
	}
	if old.Spec.TeamID == k.Spec.TeamID {
		return nil, nil
	}
	return v.teamWarnings(ctx, k)
}

// validateName refuses a displayName that another key of the same name scope has. The list (through the
// spec.displayName field selector) runs first; claim, once every other rule passed, takes the name's claim, which
// makes two concurrent creates of one name in one scope admit exactly one.
func (v *WorkspaceAPIKeyValidator) validateName(ctx context.Context, k *gatewayv1.WorkspaceAPIKey, claim bool) error {
	value := k.NameClaim()
	if value == "" {
		return nil
	}
	if claim {
		if v.Claims == nil {
			return nil
		}
		refusal, err := v.Claims.take(ctx, k.Namespace, claimKeyName, value, claimantOf("WorkspaceAPIKey", k))
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("admission of WorkspaceAPIKey %s: %w", k.Name, err))
		}
		if refusal != nil {
			return refuse(ctx, "WorkspaceAPIKey", k.Name, field.ErrorList{
				duplicate(keyDisplayNamePath, k.Spec.DisplayName, refusal.holder.kind, refusal.holder.name, k.DescribeNameScope())})
		}
		return nil
	}
	var list gatewayv1.WorkspaceAPIKeyList
	if err := v.Reader.List(ctx, &list, client.InNamespace(k.Namespace),
		client.MatchingFields{gatewayv1.FieldWorkspaceKeyDisplayName: k.Spec.DisplayName}); err != nil {
		return listFailed("WorkspaceAPIKeys", k.Namespace, err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if counts(k, o) && o.NameClaim() == value {
			return refuse(ctx, "WorkspaceAPIKey", k.Name, field.ErrorList{
				duplicate(keyDisplayNamePath, k.Spec.DisplayName, "WorkspaceAPIKey", o.Name, k.DescribeNameScope())})
		}
	}
	return nil
}

// teamWarnings warns of a team key whose spec.teamID names a Team that does not exist. The key is admitted, since
// GitOps applies in any order; until the Team exists the key reaches no team's resources.
func (v *WorkspaceAPIKeyValidator) teamWarnings(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	if k.Spec.TeamID == "" {
		return nil, nil
	}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Spec.TeamID}, &gatewayv1.Team{})
	if apierrors.IsNotFound(err) {
		return admission.Warnings{fmt.Sprintf("%s: Team %s does not exist in namespace %s (yet); the key is admitted, but reaches no team resources until the Team exists",
			keyTeamIDPath, k.Spec.TeamID, k.Namespace)}, nil
	}
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to read Team %s for admission of WorkspaceAPIKey %s: %w", k.Spec.TeamID, k.Name, err))
	}
	return nil, nil
}

// ValidateDelete admits every deletion: deleting a key revokes it.
func (v *WorkspaceAPIKeyValidator) ValidateDelete(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (admission.Warnings, error) {
	return nil, revokePrefix(ctx, v.Claims, workspaceAPIKeyKind, k, k.Spec.Prefix, k.Spec.Hash)
}

func (v *WorkspaceAPIKeyValidator) validate(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) error {
	if err := admitSecretKey(ctx, v.Reader, workspaceAPIKeyKind, k, k.Spec.KeySource); err != nil {
		return err
	}
	return admitPrefix(ctx, v.Reader, v.Claims, workspaceAPIKeyKind, apiKeyKind, k, k.Spec.Prefix)
}
