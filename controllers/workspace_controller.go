package controllers

import (
	"context"
	"fmt"

	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/translate"
)

// WorkspaceReconciler reports whether a Workspace is the one that configures its namespace and whether a
// snapshot of it is published. status.snapshotVersion is written by the materializer.
type WorkspaceReconciler struct {
	client.Client
}

func (r *WorkspaceReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Workspace{}).
		// Deleting the Workspace in charge hands the namespace to the next oldest.
		Watches(&gatewayv1.Workspace{}, handler.EnqueueRequestsFromMapFunc(r.sameNamespace)).
		WithOptions(opts).
		Complete(requeueOnConflict{r})
}

// Reconcile writes the Workspace's Ready condition.
func (r *WorkspaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	ws := &gatewayv1.Workspace{}
	if err := r.Get(ctx, req.NamespacedName, ws); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ws.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := ws.DeepCopy()
	defer func() {
		if err := patchStatus(ctx, r.Client, "Workspace", before, ws, before.Status, ws.Status); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	var all gatewayv1.WorkspaceList
	if err := r.List(ctx, &all, client.InNamespace(ws.Namespace), unsafeNoCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list Workspaces of %s: %w", ws.Namespace, err)
	}
	c := ready(fmt.Sprintf("Snapshot version %d of the workspace is published.", ws.Status.SnapshotVersion))
	for i := range all.Items {
		o := &all.Items[i]
		if o.Name != ws.Name && o.DeletionTimestamp.IsZero() && translate.Older(o, ws) {
			c = check{reason: gatewayv1.ReasonDuplicateWorkspace, failed: true,
				message: fmt.Sprintf("Workspace %s is older and configures namespace %s; a namespace has at most one Workspace, so this one is ignored.",
					o.Name, ws.Namespace)}
			break
		}
	}
	if !c.failed && ws.Status.SnapshotVersion == 0 {
		c = check{reason: gatewayv1.ReasonSnapshotPending, failed: true, message: "No snapshot of the workspace is published yet."}
	}
	ws.Status.ObservedGeneration = ws.Generation
	setReady(&ws.Status.Conditions, c, ws.Generation)
	return ctrl.Result{}, nil
}

func (r *WorkspaceReconciler) sameNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var all gatewayv1.WorkspaceList
	if err := r.List(ctx, &all, client.InNamespace(obj.GetNamespace()), unsafeNoCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list Workspaces")
		return nil
	}
	var out []reconcile.Request
	for i := range all.Items {
		if all.Items[i].Name != obj.GetName() {
			out = append(out, requests(&all.Items[i])...)
		}
	}
	return out
}
