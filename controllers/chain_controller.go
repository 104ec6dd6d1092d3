package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// ChainReconciler reports what each environment of a Chain serves, and, through its finalizer, deletes the
// chain's ChainDeployments (whose own finalizers delete their chainlet deployments) before the Chain goes.
type ChainReconciler struct {
	client.Client
}

func (r *ChainReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Chain{}).
		Watches(&gatewayv1.ChainDeployment{}, enqueueOwner(func(cd *gatewayv1.ChainDeployment) string { return cd.Spec.ChainID })).
		WithOptions(opts).
		Complete(requeueOnConflict{r})
}

// Reconcile writes the Chain's status, or finalizes a Chain being deleted.
func (r *ChainReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	c := &gatewayv1.Chain{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list gatewayv1.ChainDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingFields{gatewayv1.FieldChainDeploymentChain: c.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the deployments of Chain %s/%s: %w", c.Namespace, c.Name, err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, c, list.Items)
	}
	if controllerutil.AddFinalizer(c, gatewayv1.ChainFinalizer) {
		if err := r.Update(ctx, c); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add the finalizer to Chain %s/%s: %w", c.Namespace, c.Name, err)
		}
		return ctrl.Result{}, nil
	}
	before := c.DeepCopy()
	defer func() {
		if err := patchStatus(ctx, r.Client, "Chain", before, c, before.Status, c.Status); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	status := liveStatuses(list.Items, func(cd *gatewayv1.ChainDeployment) gatewayv1.DeploymentStatus { return cd.Status.Status })
	c.Status = ChainStatusOf(c, status, c.Status)
	return ctrl.Result{}, nil
}

// ChainStatusOf is the status of c given the status of each of its deployments that exist; prev keeps the
// conditions' transition times.
func ChainStatusOf(c *gatewayv1.Chain, deployments map[string]gatewayv1.DeploymentStatus, prev gatewayv1.ChainStatus) gatewayv1.ChainStatus {
	envs, ch := environmentsServed(c, deployments, "chain deployment")
	out := gatewayv1.ChainStatus{ObservedGeneration: c.Generation, DeploymentsCount: int32(len(deployments)), Environments: envs,
		Conditions: prev.Conditions}
	setReady(&out.Conditions, ch, c.Generation)
	return out
}

// finalize deletes the chain's deployments and releases the Chain once none is left. The Chain left the
// snapshot when its deletion started; this only cleans up.
func (r *ChainReconciler) finalize(ctx context.Context, c *gatewayv1.Chain, deployments []gatewayv1.ChainDeployment) error {
	if !controllerutil.ContainsFinalizer(c, gatewayv1.ChainFinalizer) {
		return nil
	}
	for i := range deployments {
		cd := &deployments[i]
		if cd.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, cd); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("failed to delete ChainDeployment %s/%s: %w", cd.Namespace, cd.Name, err)
			}
		}
	}
	if len(deployments) > 0 {
		// Each deployment's removal requeues the Chain through the watch.
		return nil
	}
	controllerutil.RemoveFinalizer(c, gatewayv1.ChainFinalizer)
	return client.IgnoreNotFound(r.Update(ctx, c))
}
