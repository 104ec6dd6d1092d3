package workspace

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// TeamReconciler writes a Team's Ready condition and observedGeneration. A team is always served (the snapshot
// carries it); Ready is False only when it claims spec.default while an older team is the default, which two
// racing creates can store although admission refuses a second default.
type TeamReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *TeamReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Team{}).
		// Which team is the default depends on the others: deleting the default hands it to the next oldest.
		Watches(&gatewayv1.Team{}, handler.EnqueueRequestsFromMapFunc(r.otherDefaults), builder.WithPredicates(kit.SpecOrLifecycleChanged)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile writes the Team's status.
func (r *TeamReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Team]{Kind: "Team", Status: func(t *gatewayv1.Team) any { return t.Status }}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

func (r *TeamReconciler) reconcileStatus(ctx context.Context, t *gatewayv1.Team) (ctrl.Result, error) {
	c := kit.Ready(fmt.Sprintf("Team is served with %d members.", len(t.Spec.Members)))
	if t.Spec.Default {
		var all gatewayv1.TeamList
		if err := r.List(ctx, &all, client.InNamespace(t.Namespace)); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to list Teams of %s: %w", t.Namespace, err)
		}
		if def := translate.DefaultTeam(all.Items); def != nil && def.Name != t.Name {
			c = kit.Check{Reason: gatewayv1.ReasonDuplicateDefault, Failed: true, Message: fmt.Sprintf(
				"Team %s is older and is the workspace's default; this team is served, but not as the default, until spec.default is cleared on one of them.", def.Name)}
		}
	}
	t.Status.ObservedGeneration = t.Generation
	kit.SetReady(&t.Status.Conditions, c, t.Generation)
	return ctrl.Result{}, nil
}

// otherDefaults enqueues the other default teams of obj's namespace when obj is or was a default.
func (r *TeamReconciler) otherDefaults(ctx context.Context, obj client.Object) []reconcile.Request {
	others := kit.Others(obj)
	return kit.ListRequests(ctx, r, &gatewayv1.TeamList{}, func(o client.Object) bool { return others(o) && o.(*gatewayv1.Team).Spec.Default },
		client.InNamespace(obj.GetNamespace()))
}
