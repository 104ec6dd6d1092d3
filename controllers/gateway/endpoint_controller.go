package gateway

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

// NewEndpointReconciler reports whether an Endpoint routes its slug: it does unless an older Endpoint holds it.
// Deleting the Endpoint that holds a slug hands it to the next oldest. It also counts the Endpoint's targets into
// status.targetCount, for kubectl get's Targets column.
func NewEndpointReconciler(c client.Client) *kit.ReadyReconciler[*gatewayv1.Endpoint] {
	return &kit.ReadyReconciler[*gatewayv1.Endpoint]{Client: c, Kind: "Endpoint",
		Status: func(e *gatewayv1.Endpoint) (*[]metav1.Condition, *int64) {
			return &e.Status.Conditions, &e.Status.ObservedGeneration
		},
		Check: endpointRoutesSlug, Peers: sameSlug,
		Count: func(e *gatewayv1.Endpoint) (*int32, int32) {
			return &e.Status.TargetCount, int32(len(e.Spec.Targets))
		}}
}

func endpointRoutesSlug(ctx context.Context, c client.Reader, e *gatewayv1.Endpoint) (kit.Check, error) {
	var same gatewayv1.EndpointList
	if err := c.List(ctx, &same, client.InNamespace(e.Namespace), client.MatchingFields{gatewayv1.FieldEndpointSlug: e.Spec.Slug}, kit.UnsafeNoCopy); err != nil {
		return kit.Check{}, fmt.Errorf("failed to list Endpoints by slug: %w", err)
	}
	if owner := translate.NewSlugs(append(same.Items, *e)).Owner(e.Spec.Slug); owner != e.Name {
		return kit.Check{Reason: gatewayv1.ReasonDuplicateSlug, Failed: true,
			Message: fmt.Sprintf("Slug %s is already routed by the older Endpoint %s; slugs are unique within the workspace.", e.Spec.Slug, owner)}, nil
	}
	return kit.Ready(fmt.Sprintf("Endpoint routes slug %s.", e.Spec.Slug)), nil
}

// sameSlug maps a change of an Endpoint to the others with its slug.
func sameSlug(ctx context.Context, c client.Reader, obj client.Object) []reconcile.Request {
	e, ok := obj.(*gatewayv1.Endpoint)
	if !ok {
		return nil
	}
	return kit.ListRequests(ctx, c, &gatewayv1.EndpointList{}, kit.Others(e),
		client.InNamespace(e.Namespace), client.MatchingFields{gatewayv1.FieldEndpointSlug: e.Spec.Slug})
}
