package gateway

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// KeyNameClaimReconciler deletes the name claim of a WorkspaceAPIKey (gatewayv1.ClaimKindKeyName, which the
// admission webhook takes so that two keys of one name scope cannot both be created) once no key holds it: its
// key was deleted, or renamed. Without it a namespace keeps one claim ConfigMap for every key name ever used.
//
// A claim is deleted only when its holder, read past the cache, does not hold it (gone, another object under its
// name, being deleted, or holding another name now), and only once the holder took it longer than
// gatewayv1.ClaimGrace ago: an admission in flight holds a claim before its key is stored, and every admission
// that takes a claim, a take-over or a key renamed back included, stamps that time anew. The delete is
// conditional on the claim's UID and resourceVersion as read, so a claim an admission took or stamped meanwhile
// stays.
//
// Requests name claim ConfigMaps. They come from a key's deletion or rename (the claim of its old name), and at
// start from every key name claim of the cluster, for the keys deleted while no manager ran. The manager caches
// no ConfigMap, so none is watched.
type KeyNameClaimReconciler struct {
	// Client deletes claims.
	Client client.Client
	// Reader reads claims and keys past the cache.
	Reader client.Reader
	// Now is the clock of the grace; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler on mgr.
func (r *KeyNameClaimReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("workspaceapikey-nameclaim").
		WatchesRawSource(source.Func(r.everyClaim)).
		Watches(&gatewayv1.WorkspaceAPIKey{}, handler.Funcs{
			UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				old, ok1 := e.ObjectOld.(*gatewayv1.WorkspaceAPIKey)
				k, ok2 := e.ObjectNew.(*gatewayv1.WorkspaceAPIKey)
				if ok1 && ok2 && old.NameClaim() != k.NameClaim() {
					enqueueNameClaim(q, old)
				}
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if k, ok := e.Object.(*gatewayv1.WorkspaceAPIKey); ok {
					enqueueNameClaim(q, k)
				}
			},
		}).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

func enqueueNameClaim(q workqueue.TypedRateLimitingInterface[reconcile.Request], k *gatewayv1.WorkspaceAPIKey) {
	if v := k.NameClaim(); v != "" {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: k.Namespace,
			Name: gatewayv1.ClaimName(gatewayv1.ClaimKindKeyName, v)}})
	}
}

// everyClaim queues every key name claim of the cluster once, when the controller starts.
func (r *KeyNameClaimReconciler) everyClaim(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	var list corev1.ConfigMapList
	if err := r.Reader.List(ctx, &list, client.MatchingLabels{gatewayv1.LabelClaim: gatewayv1.ClaimKindKeyName}); err != nil {
		return fmt.Errorf("failed to list the key name claims: %w", err)
	}
	for i := range list.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return nil
}

// Reconcile deletes the claim named by req when no key holds it and the grace has passed, and comes back at the
// end of the grace when only the grace keeps it.
func (r *KeyNameClaimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var claim corev1.ConfigMap
	if err := r.Reader.Get(ctx, req.NamespacedName, &claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if claim.Labels[gatewayv1.LabelClaim] != gatewayv1.ClaimKindKeyName {
		return ctrl.Result{}, nil
	}
	held, err := r.held(ctx, &claim)
	if err != nil || held {
		return ctrl.Result{}, err
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if wait := gatewayv1.ClaimedAt(claim.Data, claim.CreationTimestamp.Time).Add(gatewayv1.ClaimGrace).Sub(now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	err = r.Client.Delete(ctx, &claim, client.Preconditions{UID: &claim.UID, ResourceVersion: &claim.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		// A conflict: an admission took or stamped the claim since it was read; RequeueOnConflict reads it again.
		return ctrl.Result{}, fmt.Errorf("failed to delete the key name claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Deleted a key name claim no key holds", "claim", claim.Name, "holder", claim.Data[gatewayv1.ClaimDataHolderName])
	return ctrl.Result{}, nil
}

// held reports whether the holder the claim names holds it now: it exists (the same object), is not being
// deleted, and claims the claim's value. A claim of another kind of holder is left alone.
func (r *KeyNameClaimReconciler) held(ctx context.Context, claim *corev1.ConfigMap) (bool, error) {
	if claim.Data[gatewayv1.ClaimDataHolderKind] != translate.KindWorkspaceAPIKey {
		return true, nil
	}
	var k gatewayv1.WorkspaceAPIKey
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Data[gatewayv1.ClaimDataHolderName]}, &k)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to read WorkspaceAPIKey %s/%s, the holder of claim %s: %w", claim.Namespace,
			claim.Data[gatewayv1.ClaimDataHolderName], claim.Name, err)
	}
	uid := claim.Data[gatewayv1.ClaimDataHolderUID]
	return (uid == "" || uid == string(k.UID)) && k.DeletionTimestamp == nil && k.NameClaim() == claim.Data[gatewayv1.ClaimDataValue], nil
}
