package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// KeyReconciler derives the prefix and hash of a federated (APIKey) or workspace (WorkspaceAPIKey) key from its
// source, minting it into a Secret when there is none, and reports whether it is usable. The two kinds differ
// only in the accessors below.
type KeyReconciler[T client.Object] struct {
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

// NewAPIKeyReconciler is the reconciler of federated keys (APIKeys), with mgr's clients.
func NewAPIKeyReconciler(mgr ctrl.Manager) *KeyReconciler[*gatewayv1.APIKey] {
	return &KeyReconciler[*gatewayv1.APIKey]{
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

// NewWorkspaceAPIKeyReconciler is the reconciler of workspace keys (WorkspaceAPIKeys), with mgr's clients.
func NewWorkspaceAPIKeyReconciler(mgr ctrl.Manager) *KeyReconciler[*gatewayv1.WorkspaceAPIKey] {
	return &KeyReconciler[*gatewayv1.WorkspaceAPIKey]{
		Client: mgr.GetClient(), reader: mgr.GetAPIReader(), kind: translate.KindWorkspaceAPIKey, mintPrefix: apikey.Workspace,
		newObject: func() *gatewayv1.WorkspaceAPIKey { return &gatewayv1.WorkspaceAPIKey{} },
		source:    func(k *gatewayv1.WorkspaceAPIKey) *gatewayv1.KeySource { return &k.Spec.KeySource },
		status:    func(k *gatewayv1.WorkspaceAPIKey) *gatewayv1.KeyStatus { return &k.Status },
		setOwner: func(k *gatewayv1.WorkspaceAPIKey, s *corev1.Secret) error {
			return controllerutil.SetControllerReference(k, s, mgr.GetScheme())
		},
	}
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *KeyReconciler[T]) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
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
func (r *KeyReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[T]{Kind: r.kind, Status: func(o T) any { return *r.status(o) }, Prepare: r.deleteUnbound}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

// deleteUnbound deletes a federated key whose bound group is gone.
func (r *KeyReconciler[T]) deleteUnbound(ctx context.Context, obj T) (ctrl.Result, bool, error) {
	if r.groupID == nil {
		return ctrl.Result{}, false, nil
	}
	deleted, res, err := deleteUnbound(ctx, r.Client, r.reader, r.recorder, obj, r.kind, r.groupID(obj))
	return res, deleted, err
}

func (r *KeyReconciler[T]) reconcileStatus(ctx context.Context, obj T) (ctrl.Result, error) {
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

// keysReferencing maps a Secret to the keys of this kind that name it in spec.secretRef.
func (r *KeyReconciler[T]) keysReferencing(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listRequests(ctx, obj.GetNamespace(), client.MatchingFields{IndexKeySecretRef: obj.GetName()})
}

// keysSharingPrefix maps a key of either kind to the keys of this kind that claim one of its prefixes.
func (r *KeyReconciler[T]) keysSharingPrefix(ctx context.Context, obj client.Object) []reconcile.Request {
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
func (r *KeyReconciler[T]) keysOfGroup(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listRequests(ctx, obj.GetNamespace(), client.MatchingFields{gatewayv1.FieldAPIKeyGroup: obj.GetName()})
}

func (r *KeyReconciler[T]) listRequests(ctx context.Context, namespace string, fields client.MatchingFields) []reconcile.Request {
	var list client.ObjectList = &gatewayv1.APIKeyList{}
	if r.kind == translate.KindWorkspaceAPIKey {
		list = &gatewayv1.WorkspaceAPIKeyList{}
	}
	return kit.ListRequests(ctx, r, list, nil, client.InNamespace(namespace), fields)
}
