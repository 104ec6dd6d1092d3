package gateway

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// reconcileDelete removes g's direct children (whose own finalizers cascade further) and every APIKey of g, and
// releases the finalizer once none is left. It needs no garbage collector. The snapshot drops the subtree as
// soon as the deletion starts; this only cleans up the objects.
func (r *GroupReconciler) reconcileDelete(ctx context.Context, g *gatewayv1.Group) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	if !controllerutil.ContainsFinalizer(g, gatewayv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	children, keys, err := r.subtree(ctx, g)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A child or key the cache does not show yet (admitted as the deletion began) is bound to g
	// (gatewayv1.AnnotationParentUID) and deletes itself once g is gone: see deleteUnbound.
	var errs []error
	for i := range children.Items {
		errs = append(errs, r.deleteOnce(ctx, &children.Items[i]))
	}
	for i := range keys.Items {
		errs = append(errs, r.deleteOnce(ctx, &keys.Items[i]))
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to cascade deletion of Group %s/%s: %w", g.Namespace, g.Name, err)
	}
	if remaining := len(children.Items) + len(keys.Items); remaining > 0 {
		// The watches on Groups and APIKeys bring g back when these are gone.
		log.V(1).Info("Waiting for the subtree of a deleted group", "children", len(children.Items), "apiKeys", len(keys.Items))
		before := g.DeepCopy()
		kit.SetReady(&g.Status.Conditions, kit.Check{Reason: gatewayv1.ReasonDeleting, Failed: true,
			Message: fmt.Sprintf("Group is being deleted; waiting for %d child groups and %d API keys to be removed.",
				len(children.Items), len(keys.Items))}, g.Generation)
		return ctrl.Result{}, kit.PatchStatus(ctx, r.Client, "Group", before, g, before.Status, g.Status)
	}
	before := g.DeepCopy()
	controllerutil.RemoveFinalizer(g, gatewayv1.Finalizer)
	if err := r.Patch(ctx, g, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to remove finalizer from Group %s/%s: %w", g.Namespace, g.Name, err)
	}
	log.Info("Deleted group and its subtree")
	return ctrl.Result{}, nil
}

// subtree lists g's direct children and its APIKeys.
func (r *GroupReconciler) subtree(ctx context.Context, g *gatewayv1.Group) (*gatewayv1.GroupList, *gatewayv1.APIKeyList, error) {
	var children gatewayv1.GroupList
	if err := r.List(ctx, &children, client.InNamespace(g.Namespace), client.MatchingFields{gatewayv1.FieldGroupParent: g.Name}); err != nil {
		return nil, nil, fmt.Errorf("failed to list children of Group %s/%s: %w", g.Namespace, g.Name, err)
	}
	var keys gatewayv1.APIKeyList
	if err := r.List(ctx, &keys, client.InNamespace(g.Namespace), client.MatchingFields{gatewayv1.FieldAPIKeyGroup: g.Name}); err != nil {
		return nil, nil, fmt.Errorf("failed to list APIKeys of Group %s/%s: %w", g.Namespace, g.Name, err)
	}
	return &children, &keys, nil
}

func (r *GroupReconciler) deleteOnce(ctx context.Context, obj client.Object) error {
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	if err := r.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete %s: %w", obj.GetName(), err)
	}
	return nil
}
