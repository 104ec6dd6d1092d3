package gateway

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

// EndpointReconciler reports whether an Endpoint routes its slug: it does unless an older Endpoint holds it.
type EndpointReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *EndpointReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Endpoint{}).
		// Deleting the Endpoint that holds a slug hands it to the next oldest.
		Watches(&gatewayv1.Endpoint{}, handler.EnqueueRequestsFromMapFunc(r.sameSlug)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile writes the Endpoint's Ready condition.
func (r *EndpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Endpoint]{Kind: "Endpoint", Status: func(e *gatewayv1.Endpoint) any { return e.Status }}.
		Run(ctx, r.Client, req, r.reconcileStatus)
}

func (r *EndpointReconciler) reconcileStatus(ctx context.Context, e *gatewayv1.Endpoint) (ctrl.Result, error) {
	var same gatewayv1.EndpointList
	if err := r.List(ctx, &same, client.InNamespace(e.Namespace), client.MatchingFields{gatewayv1.FieldEndpointSlug: e.Spec.Slug}, kit.UnsafeNoCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list Endpoints by slug: %w", err)
	}
	c := kit.Ready(fmt.Sprintf("Endpoint routes slug %s.", e.Spec.Slug))
	if owner := translate.NewSlugs(append(same.Items, *e)).Owner(e.Spec.Slug); owner != e.Name {
		c = kit.Check{Reason: gatewayv1.ReasonDuplicateSlug, Failed: true,
			Message: fmt.Sprintf("Slug %s is already routed by the older Endpoint %s; slugs are unique within the workspace.", e.Spec.Slug, owner)}
	}
	e.Status.ObservedGeneration = e.Generation
	kit.SetReady(&e.Status.Conditions, c, e.Generation)
	return ctrl.Result{}, nil
}

func (r *EndpointReconciler) sameSlug(ctx context.Context, obj client.Object) []reconcile.Request {
	e, ok := obj.(*gatewayv1.Endpoint)
	if !ok {
		return nil
	}
	return kit.ListRequests(ctx, r, &gatewayv1.EndpointList{}, kit.Others(e),
		client.InNamespace(e.Namespace), client.MatchingFields{gatewayv1.FieldEndpointSlug: e.Spec.Slug})
}
