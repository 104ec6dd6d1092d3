package controllers

import (
	"context"
	"fmt"
	"strings"

	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// ModelReconciler reports what each environment of a Model serves: its deployment and that deployment's status.
type ModelReconciler struct {
	client.Client
}

func (r *ModelReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Model{}).
		Watches(&gatewayv1.ModelDeployment{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			md := obj.(*gatewayv1.ModelDeployment)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.ModelID}}}
		})).
		WithOptions(opts).
		Complete(r)
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
	status := make(map[string]gatewayv1.DeploymentStatus, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			status[list.Items[i].Name] = list.Items[i].Status.Status
		}
	}
	m.Status = ModelStatusOf(m, status, m.Status)
	return ctrl.Result{}, nil
}

// ModelStatusOf is the status of m given the status of each of its deployments that exist; prev keeps the
// conditions' transition times.
func ModelStatusOf(m *gatewayv1.Model, deployments map[string]gatewayv1.DeploymentStatus, prev gatewayv1.ModelStatus) gatewayv1.ModelStatus {
	out := gatewayv1.ModelStatus{ObservedGeneration: m.Generation, DeploymentsCount: int32(len(deployments)), Conditions: prev.Conditions}
	env := func(name, deployment string) {
		out.Environments = append(out.Environments, gatewayv1.EnvironmentStatus{Name: name, Deployment: deployment, Status: deployments[deployment]})
	}
	for _, e := range m.Spec.Environments {
		env(e.Name, e.Deployment)
	}
	if m.Spec.Development != "" {
		env(gatewayv1.EnvironmentDevelopment, m.Spec.Development)
	}
	var missing []string
	for _, e := range out.Environments {
		if _, ok := deployments[e.Deployment]; e.Deployment != "" && !ok {
			missing = append(missing, fmt.Sprintf("%s → %s", e.Name, e.Deployment))
		}
	}
	prod, _ := m.Environment(gatewayv1.EnvironmentProduction)
	c := ready(fmt.Sprintf("production serves deployment %s.", prod))
	switch {
	case len(missing) > 0:
		c = check{reason: "DeploymentNotFound", failed: true,
			message: "Environments point at deployments that do not exist: " + strings.Join(missing, ", ") + "."}
	case prod == "":
		c = check{reason: "NoProductionDeployment", failed: true, message: "No deployment is promoted to production yet."}
	}
	setReady(&out.Conditions, c, m.Generation)
	return out
}
