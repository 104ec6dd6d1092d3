package controllers

import (
	"context"
	"fmt"

	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// ModelReconciler reports what each environment of a Model serves: its deployment and that deployment's status.
type ModelReconciler struct {
	client.Client
}

func (r *ModelReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Model{}).
		Watches(&gatewayv1.ModelDeployment{}, enqueueOwner(func(md *gatewayv1.ModelDeployment) string { return md.Spec.ModelID })).
		WithOptions(opts).
		Complete(requeueOnConflict{r})
}

// Reconcile writes the Model's status.
func (r *ModelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	m := &gatewayv1.Model{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := m.DeepCopy()
	defer func() {
		if err := patchStatus(ctx, r.Client, "Model", before, m, before.Status, m.Status); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	var list gatewayv1.ModelDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{gatewayv1.FieldDeploymentModel: m.Name}, unsafeNoCopy); err != nil {
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
	setReady(&out.Conditions, c, m.Generation)
	return out
}
