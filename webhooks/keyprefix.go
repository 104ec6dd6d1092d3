package webhooks

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
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

var secretRefPath = field.NewPath("spec", "secretRef")

// admitSecretKey refuses a key of kind own whose spec.secretRef names a Secret holding a key whose prefix was
// revoked: revocation covers every key source, so a revoked REST key cannot come back through a Secret. A Secret
// that does not exist yet, or that is written later, is checked by the key reconciler, which refuses to derive a
// revoked prefix (docs/security.md "Revocation covers every key source").
func admitSecretKey(ctx context.Context, r client.Reader, own keyKind, k client.Object, src gatewayv1.KeySource) error {
	if src.SecretRef == nil {
		return nil
	}
	var secret corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: k.GetNamespace(), Name: src.SecretRef.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return apierrors.NewInternalError(fmt.Errorf("admission of %s %s: failed to read Secret %s: %w", own.name, k.GetName(), src.SecretRef.Name, err))
	}
	plain := strings.TrimSpace(string(secret.Data[cmp.Or(src.SecretRef.Key, gatewayv1.DefaultKeySecretEntry)]))
	if plain == "" {
		return nil
	}
	prefix := apikey.Prefix(plain)
	// The workspace's revocation records first, then a tombstone claim from before them.
	var shard, claim corev1.ConfigMap
	for _, read := range []struct {
		name string
		into *corev1.ConfigMap
	}{{gatewayv1.RevokedShardName(prefix), &shard}, {gatewayv1.ClaimName(gatewayv1.ClaimKindKeyPrefix, prefix), &claim}} {
		if err := r.Get(ctx, client.ObjectKey{Namespace: k.GetNamespace(), Name: read.name}, read.into); err != nil && !apierrors.IsNotFound(err) {
			return apierrors.NewInternalError(fmt.Errorf("admission of %s %s: failed to read %s for prefix %s: %w", own.name, k.GetName(), read.name, prefix, err))
		}
	}
	if _, recorded := shard.Data[prefix]; !recorded && !gatewayv1.ClaimRevoked(claim.Data) {
		return nil
	}
	return refuse(ctx, own.name, k.GetName(), field.ErrorList{field.Forbidden(secretRefPath, fmt.Sprintf(
		"Secret %s holds the key with prefix %s, which was revoked; a revoked key can never be registered or used again, whatever its source", src.SecretRef.Name, prefix))})
}
