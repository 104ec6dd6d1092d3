package workspace

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// NewTeamReconciler writes a Team's Ready condition and observedGeneration. A team is always served (the snapshot
// carries it); Ready is False only when it claims spec.default while an older team is the default, which two
// racing creates can store although admission refuses a second default. Which team is the default depends on the
// others: deleting the default hands it to the next oldest.
func NewTeamReconciler(c client.Client) *kit.ReadyReconciler[*gatewayv1.Team] {
	return &kit.ReadyReconciler[*gatewayv1.Team]{Client: c, Kind: "Team",
		Status: func(t *gatewayv1.Team) (*[]metav1.Condition, *int64) {
			return &t.Status.Conditions, &t.Status.ObservedGeneration
		},
		Check: teamServed, Peers: otherDefaults, PeerPredicates: []predicate.Predicate{kit.SpecOrLifecycleChanged}}
}

func teamServed(ctx context.Context, c client.Reader, t *gatewayv1.Team) (kit.Check, error) {
	if t.Spec.Default {
		var all gatewayv1.TeamList
		if err := c.List(ctx, &all, client.InNamespace(t.Namespace)); err != nil {
			return kit.Check{}, fmt.Errorf("failed to list Teams of %s: %w", t.Namespace, err)
		}
		if def := translate.DefaultTeam(all.Items); def != nil && def.Name != t.Name {
			return kit.Check{Reason: gatewayv1.ReasonDuplicateDefault, Failed: true, Message: fmt.Sprintf(
				"Team %s is older and is the workspace's default; this team is served, but not as the default, until spec.default is cleared on one of them.", def.Name)}, nil
		}
	}
	return kit.Ready(fmt.Sprintf("Team is served with %d members.", len(t.Spec.Members))), nil
}

// otherDefaults enqueues the other default teams of obj's namespace when obj is or was a default.
func otherDefaults(ctx context.Context, c client.Reader, obj client.Object) []reconcile.Request {
	others := kit.Others(obj)
	return kit.ListRequests(ctx, c, &gatewayv1.TeamList{}, func(o client.Object) bool { return others(o) && o.(*gatewayv1.Team).Spec.Default },
		client.InNamespace(obj.GetNamespace()))
}
