package workspace

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// WorkspaceReconciler reports whether a Workspace is the one that configures its namespace and whether a
// snapshot of it is published. status.snapshotVersion is written by the materializer.
type WorkspaceReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *WorkspaceReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Workspace{}).
		// Deleting the Workspace in charge hands the namespace to the next oldest.
		Watches(&gatewayv1.Workspace{}, handler.EnqueueRequestsFromMapFunc(r.sameNamespace)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile writes the Workspace's Ready condition.
func (r *WorkspaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Workspace]{Kind: "Workspace", Status: func(ws *gatewayv1.Workspace) any { return ws.Status }}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

func (r *WorkspaceReconciler) reconcileStatus(ctx context.Context, ws *gatewayv1.Workspace) (ctrl.Result, error) {
	var all gatewayv1.WorkspaceList
	if err := r.List(ctx, &all, client.InNamespace(ws.Namespace), kit.UnsafeNoCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list Workspaces of %s: %w", ws.Namespace, err)
	}
	c := kit.Ready(fmt.Sprintf("Snapshot version %d of the workspace is published.", ws.Status.SnapshotVersion))
	for i := range all.Items {
		o := &all.Items[i]
		if o.Name != ws.Name && o.DeletionTimestamp.IsZero() && translate.Older(o, ws) {
			c = kit.Check{Reason: gatewayv1.ReasonDuplicateWorkspace, Failed: true,
				Message: fmt.Sprintf("Workspace %s is older and configures namespace %s; a namespace has at most one Workspace, so this one is ignored.",
					o.Name, ws.Namespace)}
			break
		}
	}
	if !c.Failed && ws.Status.SnapshotVersion == 0 {
		c = kit.Check{Reason: gatewayv1.ReasonSnapshotPending, Failed: true, Message: "No snapshot of the workspace is published yet."}
	}
	ws.Status.ObservedGeneration = ws.Generation
	kit.SetReady(&ws.Status.Conditions, c, ws.Generation)
	return ctrl.Result{}, nil
}

func (r *WorkspaceReconciler) sameNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	return kit.ListRequests(ctx, r, &gatewayv1.WorkspaceList{}, kit.Others(obj), client.InNamespace(obj.GetNamespace()))
}
