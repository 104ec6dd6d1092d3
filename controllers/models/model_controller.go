package models

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// ModelReconciler reports what each environment of a Model serves: its deployment and that deployment's status.
type ModelReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *ModelReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Model{}).
		Watches(&gatewayv1.ModelDeployment{}, enqueueOwner(func(md *gatewayv1.ModelDeployment) string { return md.Spec.ModelID })).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile writes the Model's status.
func (r *ModelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Model]{Kind: "Model", Status: func(m *gatewayv1.Model) any { return m.Status }}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

func (r *ModelReconciler) reconcileStatus(ctx context.Context, m *gatewayv1.Model) (ctrl.Result, error) {
	var list gatewayv1.ModelDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{gatewayv1.FieldDeploymentModel: m.Name}, kit.UnsafeNoCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the deployments of Model %s/%s: %w", m.Namespace, m.Name, err)
	}
	status := liveStatuses(list.Items, func(md *gatewayv1.ModelDeployment) gatewayv1.DeploymentStatus { return md.Status.Status })
	m.Status = ModelStatusOf(m, status, m.Status)
	return ctrl.Result{}, nil
}

// ModelStatusOf is the status of m given the status of each of its deployments that exist; prev keeps the
// conditions' transition times.
func ModelStatusOf(m *gatewayv1.Model, deployments map[string]gatewayv1.DeploymentStatus, prev gatewayv1.ModelStatus) gatewayv1.ModelStatus {
	envs, c := environmentsServed(m, deployments, "deployment")
	out := gatewayv1.ModelStatus{ObservedGeneration: m.Generation, DeploymentsCount: int32(len(deployments)), Environments: envs,
		Conditions: prev.Conditions}
	kit.SetReady(&out.Conditions, c, m.Generation)
	return out
}
