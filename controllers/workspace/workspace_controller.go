package workspace

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// NewWorkspaceReconciler reports whether a Workspace is the one that configures its namespace and whether a
// snapshot of it is published. status.snapshotVersion is written by the materializer. Deleting the Workspace in
// charge hands the namespace to the next oldest.
func NewWorkspaceReconciler(c client.Client) *kit.ReadyReconciler[*gatewayv1.Workspace] {
	return &kit.ReadyReconciler[*gatewayv1.Workspace]{Client: c, Kind: "Workspace",
		Status: func(ws *gatewayv1.Workspace) (*[]metav1.Condition, *int64) {
			return &ws.Status.Conditions, &ws.Status.ObservedGeneration
		},
		Check: workspaceInCharge, Peers: sameNamespace}
}

func workspaceInCharge(ctx context.Context, c client.Reader, ws *gatewayv1.Workspace) (kit.Check, error) {
	var all gatewayv1.WorkspaceList
	if err := c.List(ctx, &all, client.InNamespace(ws.Namespace), kit.UnsafeNoCopy); err != nil {
		return kit.Check{}, fmt.Errorf("failed to list Workspaces of %s: %w", ws.Namespace, err)
	}
	for i := range all.Items {
		o := &all.Items[i]
		if o.Name != ws.Name && o.DeletionTimestamp.IsZero() && translate.Older(o, ws) {
			return kit.Check{Reason: gatewayv1.ReasonDuplicateWorkspace, Failed: true,
				Message: fmt.Sprintf("Workspace %s is older and configures namespace %s; a namespace has at most one Workspace, so this one is ignored.",
					o.Name, ws.Namespace)}, nil
		}
	}
	if ws.Status.SnapshotVersion == 0 {
		return kit.Check{Reason: gatewayv1.ReasonSnapshotPending, Failed: true, Message: "No snapshot of the workspace is published yet."}, nil
	}
	return kit.Ready(fmt.Sprintf("Snapshot version %d of the workspace is published.", ws.Status.SnapshotVersion)), nil
}

// sameNamespace maps a change of a Workspace to the others of its namespace.
func sameNamespace(ctx context.Context, c client.Reader, obj client.Object) []reconcile.Request {
	return kit.ListRequests(ctx, c, &gatewayv1.WorkspaceList{}, kit.Others(obj), client.InNamespace(obj.GetNamespace()))
}
