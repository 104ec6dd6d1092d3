package models

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// ChainReconciler reports what each environment of a Chain serves, and, through its finalizer, deletes the
// chain's ChainDeployments (whose own finalizers delete their chainlet deployments) before the Chain goes.
type ChainReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *ChainReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Chain{}).
		Watches(&gatewayv1.ChainDeployment{}, enqueueOwner(func(cd *gatewayv1.ChainDeployment) string { return cd.Spec.ChainID })).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile writes the Chain's status, or finalizes a Chain being deleted.
func (r *ChainReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Chain]{Kind: "Chain", Status: func(c *gatewayv1.Chain) any { return c.Status },
		Deleting: r.finalize, Prepare: kit.AddFinalizer[*gatewayv1.Chain](r.Client, "Chain", gatewayv1.ChainFinalizer)}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

func (r *ChainReconciler) reconcileStatus(ctx context.Context, c *gatewayv1.Chain) (ctrl.Result, error) {
	list, err := r.deployments(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	status := liveStatuses(list, func(cd *gatewayv1.ChainDeployment) gatewayv1.DeploymentStatus { return cd.Status.Status })
	c.Status = ChainStatusOf(c, status, c.Status)
	return ctrl.Result{}, nil
}

// deployments lists the ChainDeployments of c.
func (r *ChainReconciler) deployments(ctx context.Context, c *gatewayv1.Chain) ([]gatewayv1.ChainDeployment, error) {
	var list gatewayv1.ChainDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingFields{gatewayv1.FieldChainDeploymentChain: c.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the deployments of Chain %s/%s: %w", c.Namespace, c.Name, err)
	}
	return list.Items, nil
}

// ChainStatusOf is the status of c given the status of each of its deployments that exist; prev keeps the
// conditions' transition times.
func ChainStatusOf(c *gatewayv1.Chain, deployments map[string]gatewayv1.DeploymentStatus, prev gatewayv1.ChainStatus) gatewayv1.ChainStatus {
	envs, ch := environmentsServed(c, deployments, "chain deployment")
	out := gatewayv1.ChainStatus{ObservedGeneration: c.Generation, DeploymentsCount: int32(len(deployments)), Environments: envs,
		Conditions: prev.Conditions}
	kit.SetReady(&out.Conditions, ch, c.Generation)
	return out
}

// finalize deletes the chain's deployments and releases the Chain once none is left. The Chain left the
// snapshot when its deletion started; this only cleans up.
func (r *ChainReconciler) finalize(ctx context.Context, c *gatewayv1.Chain) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, gatewayv1.ChainFinalizer) {
		return ctrl.Result{}, nil
	}
	deployments, err := r.deployments(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	for i := range deployments {
		cd := &deployments[i]
		if cd.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, cd); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("failed to delete ChainDeployment %s/%s: %w", cd.Namespace, cd.Name, err)
			}
		}
	}
	if len(deployments) > 0 {
		// Each deployment's removal requeues the Chain through the watch.
		return ctrl.Result{}, nil
	}
	controllerutil.RemoveFinalizer(c, gatewayv1.ChainFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, c))
}
