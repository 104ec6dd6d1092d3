package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// keyReconciler derives the prefix and hash of a federated (APIKey) or workspace (WorkspaceAPIKey) key from its
// source, minting it into a Secret when there is none, and reports whether it is usable. The two kinds differ
// only in the accessors below.
type keyReconciler[T client.Object] struct {
	client.Client
	reader     client.Reader
	kind       string
	mintPrefix string
	newObject  func() T
	source     func(T) *gatewayv1.KeySource
	status     func(T) *gatewayv1.KeyStatus
	// groupID is the Group a federated key belongs to; nil for workspace keys.
	groupID  func(T) string
	setOwner func(owner T, secret *corev1.Secret) error
	// recorder receives the Event of a key deleted with the group it was created under; none when nil.
	recorder record.EventRecorder
}

func newAPIKeyReconciler(mgr ctrl.Manager) *keyReconciler[*gatewayv1.APIKey] {
	return &keyReconciler[*gatewayv1.APIKey]{
		Client: mgr.GetClient(), reader: mgr.GetAPIReader(), kind: translate.KindAPIKey, mintPrefix: apikey.Federated,
		newObject: func() *gatewayv1.APIKey { return &gatewayv1.APIKey{} },
		source:    func(k *gatewayv1.APIKey) *gatewayv1.KeySource { return &k.Spec.KeySource },
		status:    func(k *gatewayv1.APIKey) *gatewayv1.KeyStatus { return &k.Status },
		groupID:   func(k *gatewayv1.APIKey) string { return k.Spec.GroupID },
		recorder:  mgr.GetEventRecorderFor("modelgate-manager"),
		setOwner: func(k *gatewayv1.APIKey, s *corev1.Secret) error {
			return controllerutil.SetControllerReference(k, s, mgr.GetScheme())
		},
	}
}

func newWorkspaceAPIKeyReconciler(mgr ctrl.Manager) *keyReconciler[*gatewayv1.WorkspaceAPIKey] {
	return &keyReconciler[*gatewayv1.WorkspaceAPIKey]{
		Client: mgr.GetClient(), reader: mgr.GetAPIReader(), kind: translate.KindWorkspaceAPIKey, mintPrefix: apikey.Workspace,
		newObject: func() *gatewayv1.WorkspaceAPIKey { return &gatewayv1.WorkspaceAPIKey{} },
		source:    func(k *gatewayv1.WorkspaceAPIKey) *gatewayv1.KeySource { return &k.Spec.KeySource },
		status:    func(k *gatewayv1.WorkspaceAPIKey) *gatewayv1.KeyStatus { return &k.Status },
		setOwner: func(k *gatewayv1.WorkspaceAPIKey, s *corev1.Secret) error {
			return controllerutil.SetControllerReference(k, s, mgr.GetScheme())
		},
	}
}

func (r *keyReconciler[T]) setup(mgr ctrl.Manager, opts controller.Options) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(r.newObject()).
		// Minted Secrets are owned by their key; referenced Secrets are found through the index, so rotating
		// either re-derives the hash.
		Owns(&corev1.Secret{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.keysReferencing)).
		// Whichever key holds a prefix depends on the other keys claiming it, of both kinds.
		Watches(&gatewayv1.APIKey{}, handler.EnqueueRequestsFromMapFunc(r.keysSharingPrefix)).
		Watches(&gatewayv1.WorkspaceAPIKey{}, handler.EnqueueRequestsFromMapFunc(r.keysSharingPrefix))
	if r.groupID != nil {
		b = b.Watches(&gatewayv1.Group{}, handler.EnqueueRequestsFromMapFunc(r.keysOfGroup))
	}
	return b.WithOptions(opts).Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile derives the key's credentials, then runs the ordered checks that decide its Ready condition. A key
// being deleted is left alone: deletion is revocation; the snapshot drops the key at once and nothing is left to
// clean up.
func (r *keyReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[T]{Kind: r.kind, Status: func(o T) any { return *r.status(o) }, Prepare: r.deleteUnbound}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

// deleteUnbound deletes a federated key whose bound group is gone.
func (r *keyReconciler[T]) deleteUnbound(ctx context.Context, obj T) (ctrl.Result, bool, error) {
	if r.groupID == nil {
		return ctrl.Result{}, false, nil
	}
	deleted, res, err := deleteUnbound(ctx, r.Client, r.reader, r.recorder, obj, r.kind, r.groupID(obj))
	return res, deleted, err
}

func (r *keyReconciler[T]) reconcileStatus(ctx context.Context, obj T) (ctrl.Result, error) {
	st := r.status(obj)
	st.ObservedGeneration = obj.GetGeneration()
	c, err := r.deriveCredentials(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, next := range []func(context.Context, T) (kit.Check, error){r.checkRevoked, r.checkGroup, r.checkPrefix} {
		if c.Failed {
			break
		}
		if c, err = next(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !c.Failed {
		what := "Key"
		if r.groupID != nil {
			what = "Key of group " + r.groupID(obj)
		}
		c = kit.Ready(fmt.Sprintf("%s is served under prefix %s.", what, st.Prefix))
	}
	kit.SetReady(&st.Conditions, c, obj.GetGeneration())
	return ctrl.Result{}, nil
}

// deriveCredentials fills status.prefix and status.hash from the key's source: the spec (REST), a referenced
// Secret (GitOps), or a Secret the controller mints once and never overwrites. On failure both are cleared, so
// the key is not served.
func (r *keyReconciler[T]) deriveCredentials(ctx context.Context, obj T) (kit.Check, error) {
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

func (r *keyReconciler[T]) fromSecret(ctx context.Context, obj T, name, entry string) (kit.Check, error) {
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
func (r *keyReconciler[T]) fromKey(obj T, secretName, entry string, raw []byte) kit.Check {
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
func (r *keyReconciler[T]) mint(ctx context.Context, obj T, name string) (kit.Check, error) {
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

// checkGroup fails a federated key whose Group does not exist or is not Ready. Workspace keys have no group.
func (r *keyReconciler[T]) checkGroup(ctx context.Context, obj T) (kit.Check, error) {
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
func (r *keyReconciler[T]) checkRevoked(ctx context.Context, obj T) (kit.Check, error) {
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
func (r *keyReconciler[T]) prefixRevoked(ctx context.Context, ns, prefix string) (bool, error) {
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
func (r *keyReconciler[T]) checkPrefix(ctx context.Context, obj T) (kit.Check, error) {
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

// keysReferencing maps a Secret to the keys of this kind that name it in spec.secretRef.
func (r *keyReconciler[T]) keysReferencing(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listRequests(ctx, obj.GetNamespace(), client.MatchingFields{IndexKeySecretRef: obj.GetName()})
}

// keysSharingPrefix maps a key of either kind to the keys of this kind that claim one of its prefixes.
func (r *keyReconciler[T]) keysSharingPrefix(ctx context.Context, obj client.Object) []reconcile.Request {
	var src gatewayv1.KeySource
	var st gatewayv1.KeyStatus
	switch k := obj.(type) {
	case *gatewayv1.APIKey:
		src, st = k.Spec.KeySource, k.Status
	case *gatewayv1.WorkspaceAPIKey:
		src, st = k.Spec.KeySource, k.Status
	default:
		return nil
	}
	var out []reconcile.Request
	for _, p := range kit.NonEmpty(src.Prefix, st.Prefix) {
		out = append(out, r.listRequests(ctx, obj.GetNamespace(), client.MatchingFields{IndexKeyPrefix: p})...)
	}
	return out
}

// keysOfGroup maps a Group to its federated keys.
func (r *keyReconciler[T]) keysOfGroup(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listRequests(ctx, obj.GetNamespace(), client.MatchingFields{gatewayv1.FieldAPIKeyGroup: obj.GetName()})
}

func (r *keyReconciler[T]) listRequests(ctx context.Context, namespace string, fields client.MatchingFields) []reconcile.Request {
	var list client.ObjectList = &gatewayv1.APIKeyList{}
	if r.kind == translate.KindWorkspaceAPIKey {
		list = &gatewayv1.WorkspaceAPIKeyList{}
	}
	if err := r.List(ctx, list, client.InNamespace(namespace), fields, kit.UnsafeNoCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list keys", "kind", r.kind, "fields", fields)
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		out = append(out, kit.Requests(o.(client.Object))...)
		return nil
	})
	return out
}
