package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// The two kinds of key share one prefix space: gatewayd finds either kind by its prefix, so a prefix belongs
// to at most one key of the namespace, and a deleted key's prefix is revoked for good. admitPrefix and
// revokePrefix are that rule, for both validators.

var prefixPath = field.NewPath("spec", "prefix")

// keyKind is a kind of key, by name, with a list of its objects.
type keyKind struct {
	name    string
	newList func() client.ObjectList
}

var (
	apiKeyKind          = keyKind{"APIKey", func() client.ObjectList { return &gatewayv1.APIKeyList{} }}
	workspaceAPIKeyKind = keyKind{"WorkspaceAPIKey", func() client.ObjectList { return &gatewayv1.WorkspaceAPIKeyList{} }}
)

// admitPrefix refuses key k, of kind own, when another key of its own kind or of kind other uses prefix in its
// spec or its status, then claims the prefix (atomic across both kinds; a revoked prefix stays refused). Only the
// list checks run when claims is nil.
func admitPrefix(ctx context.Context, r client.Reader, claims *claimer, own, other keyKind, k client.Object, prefix string) error {
	if prefix == "" {
		return nil
	}
	for _, kind := range []keyKind{own, other} {
		o, err := holder(ctx, r, kind.newList(), k, prefix, gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix)
		if err != nil {
			return listFailed(kind.name+"s", k.GetNamespace(), err)
		}
		if o != nil {
			scope := "among the keys of the namespace"
			if kind.name == own.name {
				scope = "among the " + own.name + "s of the namespace"
			}
			return refuse(ctx, own.name, k.GetName(), field.ErrorList{duplicate(prefixPath, prefix, kind.name, o.GetName(), scope)})
		}
	}
	if claims == nil {
		return nil
	}
	refusal, err := claims.take(ctx, k.GetNamespace(), claimKeyPrefix, prefix, claimantOf(own.name, k))
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission of %s %s: %w", own.name, k.GetName(), err))
	}
	if refusal != nil {
		return refuse(ctx, own.name, k.GetName(), field.ErrorList{refusal.fieldError(prefixPath, prefix, "among the keys of the namespace")})
	}
	return nil
}

// revokePrefix turns the prefix claim of key k, of kind own, into a tombstone as the key is deleted, so its
// prefix is never admitted again. Nothing to do without a prefix or without claims.
func revokePrefix(ctx context.Context, claims *claimer, own keyKind, k client.Object, prefix, hash string) error {
	if prefix == "" || claims == nil {
		return nil
	}
	if err := claims.revoke(ctx, k.GetNamespace(), prefix, hash, claimantOf(own.name, k)); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("revocation of %s %s: %w", own.name, k.GetName(), err))
	}
	return nil
}
