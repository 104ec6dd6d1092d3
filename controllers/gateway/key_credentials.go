package gateway

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// deriveCredentials fills status.prefix and status.hash from the key's source: the spec (REST), a referenced
// Secret (GitOps), or a Secret the controller mints once and never overwrites. On failure both are cleared, so
// the key is not served.
func (r *KeyReconciler[T]) deriveCredentials(ctx context.Context, obj T) (kit.Check, error) {
	src, st := r.source(obj), r.status(obj)
	switch {
	case src.Hash != "":
		st.Prefix, st.Hash, st.SecretName = src.Prefix, src.Hash, ""
		return kit.Check{}, nil
	case src.SecretRef != nil:
		st.SecretName = ""
		return r.fromSecret(ctx, obj, src.SecretRef.Name, cmp.Or(src.SecretRef.Key, translate.DefaultAPIKeyEntry))
	default:
		name := obj.GetName() + "-key"
		c, err := r.mint(ctx, obj, name)
		st.SecretName = name
		return c, err
	}
}

func (r *KeyReconciler[T]) fromSecret(ctx context.Context, obj T, name, entry string) (kit.Check, error) {
	st := r.status(obj)
	var secret corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, &secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return kit.Check{}, fmt.Errorf("failed to read Secret %s/%s of %s %s: %w", obj.GetNamespace(), name, r.kind, obj.GetName(), err)
		}
		st.Prefix, st.Hash = "", ""
		return kit.Check{Reason: gatewayv1.ReasonSecretNotFound, Failed: true,
			Message: fmt.Sprintf("Secret %s named by spec.secretRef does not exist.", name)}, nil
	}
	if _, ok := secret.Labels[gatewayv1.LabelUpstreamCredential]; ok {
		// A Secret gatewayd may send to an upstream must never also authenticate callers.
		st.Prefix, st.Hash = "", ""
		return kit.Check{Reason: gatewayv1.ReasonSecretInvalid, Failed: true, Message: fmt.Sprintf(
			"Secret %s is labelled %s; a key must not be kept in a Secret that may be sent to an upstream.", name, gatewayv1.LabelUpstreamCredential)}, nil
	}
	return r.fromKey(obj, name, entry, secret.Data[entry]), nil
}

// fromKey validates a key read from a Secret and derives its prefix and hash. Surrounding whitespace is ignored,
// because Secrets written from files often end in a newline that no client sends.
func (r *KeyReconciler[T]) fromKey(obj T, secretName, entry string, raw []byte) kit.Check {
	st := r.status(obj)
	key := strings.TrimSpace(string(raw))
	var problem string
	switch {
	case raw == nil:
		problem = fmt.Sprintf("Secret %s has no entry %q.", secretName, entry)
	case len(key) < apikey.MinRegisteredLen || len(key) > apikey.MaxRegisteredLen:
		problem = fmt.Sprintf("Entry %q of Secret %s holds %d characters; a key must have %d to %d.",
			entry, secretName, len(key), apikey.MinRegisteredLen, apikey.MaxRegisteredLen)
	case apikey.Entropy(key) < apikey.MinEntropy:
		problem = fmt.Sprintf("Entry %q of Secret %s has less than %.1f bits of entropy per character; use a random key.",
			entry, secretName, apikey.MinEntropy)
	}
	if problem != "" {
		st.Prefix, st.Hash = "", ""
		return kit.Check{Reason: gatewayv1.ReasonSecretInvalid, Message: problem, Failed: true}
	}
	st.Prefix, st.Hash = apikey.Prefix(key), apikey.Hash(key)
	return kit.Check{}
}

// mint reads the key from the Secret the controller owns for obj, creating the Secret with a new key when it is
// absent. An existing Secret is never overwritten: its key may already be in use.
func (r *KeyReconciler[T]) mint(ctx context.Context, obj T, name string) (kit.Check, error) {
	key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}
	var secret corev1.Secret
	err := r.Get(ctx, key, &secret)
	if err == nil {
		return r.fromKey(obj, name, translate.DefaultAPIKeyEntry, secret.Data[translate.DefaultAPIKeyEntry]), nil
	}
	if !apierrors.IsNotFound(err) {
		return kit.Check{}, fmt.Errorf("failed to read Secret %s/%s: %w", key.Namespace, name, err)
	}
	plaintext, err := apikey.Mint(r.mintPrefix)
	if err != nil {
		return kit.Check{}, err
	}
	secret = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: name, Labels: map[string]string{gatewayv1.LabelKeyMaterial: "true"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{translate.DefaultAPIKeyEntry: []byte(plaintext)},
	}
	if err := r.setOwner(obj, &secret); err != nil {
		return kit.Check{}, fmt.Errorf("failed to own Secret %s/%s: %w", key.Namespace, name, err)
	}
	if err := r.Create(ctx, &secret); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return kit.Check{}, fmt.Errorf("failed to create Secret %s/%s: %w", key.Namespace, name, err)
		}
		// The cache had not seen a Secret created by an earlier pass: use that one, read past the cache.
		if err := r.reader.Get(ctx, key, &secret); err != nil {
			return kit.Check{}, fmt.Errorf("failed to read Secret %s/%s: %w", key.Namespace, name, err)
		}
		return r.fromKey(obj, name, translate.DefaultAPIKeyEntry, secret.Data[translate.DefaultAPIKeyEntry]), nil
	}
	logf.FromContext(ctx).Info("Minted API key", "secret", name, "prefix", apikey.Prefix(plaintext))
	return r.fromKey(obj, name, translate.DefaultAPIKeyEntry, []byte(plaintext)), nil
}
