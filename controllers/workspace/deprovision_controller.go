package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// DeprovisionReconciler revokes the PERSONAL keys of people the Workspace no longer lists: when a Workspace that
// lists its members (spec.members set) does not list a key's owner, it deletes the key, with one KeyRevoked Event
// on the Workspace per key. Which keys go is translate.KeysToRevoke, the rule the snapshot applies too, so a
// deprovisioned key stops authenticating with the next snapshot even before it is deleted. A person removed from
// a Team only loses that team's role; nothing is deleted for it.
type DeprovisionReconciler struct {
	client.Client
	// APIReader reads the Workspace past the cache before a deletion, so a member added a moment ago, whom the
	// cache does not show yet, never loses a key created right after.
	APIReader client.Reader
	// Recorder receives the KeyRevoked Events; none are sent when nil.
	Recorder record.EventRecorder
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *DeprovisionReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	personal := predicate.NewPredicateFuncs(func(o client.Object) bool {
		k, ok := o.(*gatewayv1.WorkspaceAPIKey)
		return ok && k.Spec.Type == gatewayv1.KeyTypePersonal
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("deprovision").
		For(&gatewayv1.Workspace{}, builder.WithPredicates(kit.SpecOrLifecycleChanged)).
		// Deleting the Workspace in charge hands the namespace, and its member list, to the next oldest.
		Watches(&gatewayv1.Workspace{}, handler.EnqueueRequestsFromMapFunc(r.workspacesOf), builder.WithPredicates(kit.SpecOrLifecycleChanged)).
		// A PERSONAL key written for someone who is not (or no longer) a member is revoked too.
		Watches(&gatewayv1.WorkspaceAPIKey{}, handler.EnqueueRequestsFromMapFunc(r.workspacesOf), builder.WithPredicates(personal)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile deletes the PERSONAL keys of the namespace whose owner the Workspace in charge does not list.
func (r *DeprovisionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var all gatewayv1.WorkspaceList
	if err := r.List(ctx, &all, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list Workspaces of %s: %w", req.Namespace, err)
	}
	ws := translate.InCharge(all.Items)
	if ws == nil || ws.Name != req.Name {
		return ctrl.Result{}, nil // only the Workspace in charge says who the members are
	}
	var keys gatewayv1.WorkspaceAPIKeyList
	if err := r.List(ctx, &keys, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list WorkspaceAPIKeys of %s: %w", req.Namespace, err)
	}
	revoke := translate.KeysToRevoke(ws, keys.Items)
	if len(revoke) == 0 {
		return ctrl.Result{}, nil
	}
	// Deletion cannot be undone: decide on the Workspace as stored, not as cached.
	live := &gatewayv1.Workspace{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ws), live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.UID != ws.UID || !live.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	members := translate.NewMembers(live)
	var errs []error
	for _, k := range revoke {
		if !members.Deprovisioned(k) {
			continue
		}
		if err := r.revoke(ctx, live, k); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, kerrors.NewAggregate(errs)
}

// revoke deletes k, on condition that it is still the key that was listed, and records the revocation. A key
// deleted meanwhile was revoked by someone else: no Event.
func (r *DeprovisionReconciler) revoke(ctx context.Context, ws *gatewayv1.Workspace, k *gatewayv1.WorkspaceAPIKey) error {
	uid := k.UID
	err := r.Delete(ctx, k, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to revoke WorkspaceAPIKey %s/%s: %w", k.Namespace, k.Name, err)
	}
	owner := ""
	if k.Spec.Owner != nil {
		owner = k.Spec.Owner.UserID
	}
	logf.FromContext(ctx).Info("Revoked personal key of a deprovisioned user", "key", k.Name, "user", owner)
	if r.Recorder != nil {
		r.Recorder.Eventf(ws, corev1.EventTypeNormal, gatewayv1.ReasonKeyRevoked,
			"Deleted PERSONAL WorkspaceAPIKey %s of user %s: Workspace %s no longer lists the user in spec.members.",
			k.Name, owner, ws.Name)
	}
	return nil
}

// workspacesOf enqueues every Workspace of obj's namespace; Reconcile acts for the one in charge.
func (r *DeprovisionReconciler) workspacesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	return kit.ListRequests(ctx, r, &gatewayv1.WorkspaceList{}, nil, client.InNamespace(obj.GetNamespace()))
}
