package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// checkGroup fails a federated key whose Group does not exist or is not Ready. Workspace keys have no group.
func (r *KeyReconciler[T]) checkGroup(ctx context.Context, obj T) (kit.Check, error) {
	if r.groupID == nil {
		return kit.Check{}, nil
	}
	id := r.groupID(obj)
	var g gatewayv1.Group
	if err := r.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: id}, &g); err != nil {
		if !apierrors.IsNotFound(err) {
			return kit.Check{}, fmt.Errorf("failed to read Group %s/%s: %w", obj.GetNamespace(), id, err)
		}
		return kit.Check{Reason: gatewayv1.ReasonGroupNotFound, Failed: true,
			Message: fmt.Sprintf("Group %s named by spec.groupID does not exist.", id)}, nil
	}
	if !g.DeletionTimestamp.IsZero() {
		return kit.Check{Reason: gatewayv1.ReasonGroupNotReady, Failed: true,
			Message: fmt.Sprintf("Group %s is being deleted, and its keys with it.", id)}, nil
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, gatewayv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		reason := "it has not been reconciled yet"
		if c != nil {
			reason = c.Reason
		}
		return kit.Check{Reason: gatewayv1.ReasonGroupNotReady, Failed: true,
			Message: fmt.Sprintf("Group %s is not Ready (%s), so the key is not served.", id, reason)}, nil
	}
	return kit.Check{}, nil
}

// checkRevoked fails a key brought by a Secret, or minted, whose prefix was revoked (in the workspace's
// revocation records, or by a tombstone claim a deleted key left before the records existed): revocation covers
// every key source, so a revoked REST key cannot come back through a Secret written after admission
// (docs/security.md "Revocation covers every key source"). A key whose prefix is in its spec was checked at
// admission.
func (r *KeyReconciler[T]) checkRevoked(ctx context.Context, obj T) (kit.Check, error) {
	st := r.status(obj)
	if r.source(obj).Hash != "" || st.Prefix == "" {
		return kit.Check{}, nil
	}
	revoked, err := r.prefixRevoked(ctx, obj.GetNamespace(), st.Prefix)
	if err != nil || !revoked {
		return kit.Check{}, err
	}
	prefix := st.Prefix
	st.Prefix, st.Hash = "", ""
	return kit.Check{Reason: gatewayv1.ReasonPrefixRevoked, Failed: true, Message: fmt.Sprintf(
		"The key's prefix %s was revoked; a revoked key can never be used again, whatever its source: put a new key in the Secret.", prefix)}, nil
}

// prefixRevoked reads the revocation records of ns, then the prefix's claim for a tombstone.
func (r *KeyReconciler[T]) prefixRevoked(ctx context.Context, ns, prefix string) (bool, error) {
	var shard corev1.ConfigMap
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.RevokedShardName(prefix)}, &shard)
	switch {
	case err == nil:
		if _, ok := shard.Data[prefix]; ok {
			return true, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("failed to read the revocation records of prefix %s: %w", prefix, err)
	}
	var claim corev1.ConfigMap
	err = r.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName(gatewayv1.ClaimKindKeyPrefix, prefix)}, &claim)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to read the claim of prefix %s: %w", prefix, err)
	}
	return gatewayv1.ClaimRevoked(claim.Data), nil
}

// checkPrefix fails the key when an older key of either kind holds the same prefix.
func (r *KeyReconciler[T]) checkPrefix(ctx context.Context, obj T) (kit.Check, error) {
	prefix, _, ok := translate.KeyCredentials(*r.source(obj), *r.status(obj))
	if !ok {
		return kit.Check{}, nil
	}
	me := translate.KeyRef{Kind: r.kind, Name: obj.GetName(), Created: obj.GetCreationTimestamp()}
	others, err := claimants(ctx, r.Client, obj.GetNamespace(), prefix)
	if err != nil {
		return kit.Check{}, err
	}
	for _, o := range others {
		if o.Kind == me.Kind && o.Name == me.Name {
			continue
		}
		if translate.OlderKey(o, me) {
			return kit.Check{Reason: gatewayv1.ReasonDuplicatePrefix, Failed: true,
				Message: fmt.Sprintf("Prefix %s is already held by the older %s; prefixes are unique within the workspace, so revoke this key and mint another.",
					prefix, o.Describe())}, nil
		}
	}
	return kit.Check{}, nil
}

// claimants returns the keys of both kinds that are not being deleted and whose credentials carry prefix.
func claimants(ctx context.Context, c client.Client, namespace, prefix string) ([]translate.KeyRef, error) {
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingFields{IndexKeyPrefix: prefix}, kit.UnsafeNoCopy}
	var keys gatewayv1.APIKeyList
	if err := c.List(ctx, &keys, opts...); err != nil {
		return nil, fmt.Errorf("failed to list APIKeys by prefix: %w", err)
	}
	var wkeys gatewayv1.WorkspaceAPIKeyList
	if err := c.List(ctx, &wkeys, opts...); err != nil {
		return nil, fmt.Errorf("failed to list WorkspaceAPIKeys by prefix: %w", err)
	}
	var out []translate.KeyRef
	for _, k := range keys.Items {
		if p, _, ok := translate.KeyCredentials(k.Spec.KeySource, k.Status); ok && p == prefix && k.DeletionTimestamp.IsZero() {
			out = append(out, translate.KeyRef{Kind: translate.KindAPIKey, Name: k.Name, Created: k.CreationTimestamp})
		}
	}
	for _, k := range wkeys.Items {
		if p, _, ok := translate.KeyCredentials(k.Spec.KeySource, k.Status); ok && p == prefix && k.DeletionTimestamp.IsZero() {
			out = append(out, translate.KeyRef{Kind: translate.KindWorkspaceAPIKey, Name: k.Name, Created: k.CreationTimestamp})
		}
	}
	return out, nil
}
