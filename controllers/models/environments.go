package models

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// What the Model and Chain reconcilers share: both report what each environment pointer serves.

// enqueueOwner maps a deployment to the reconcile request of the object that owns it by ownerID (its Model or
// Chain, by spec).
func enqueueOwner[D client.Object](ownerID func(D) string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: ownerID(obj.(D))}}}
	})
}

// liveStatuses is the status of each deployment in items that is not being deleted, by name.
func liveStatuses[T any, PT interface {
	*T
	client.Object
}](items []T, status func(PT) gatewayv1.DeploymentStatus) map[string]gatewayv1.DeploymentStatus {
	out := make(map[string]gatewayv1.DeploymentStatus, len(items))
	for i := range items {
		if d := PT(&items[i]); d.GetDeletionTimestamp().IsZero() {
			out[d.GetName()] = status(d)
		}
	}
	return out
}

// environmentsServed is what each environment of o serves, given the status of each of o's deployments that
// exist, and the Ready check of o: every pointer names a deployment that exists, and production names one.
// noun is what the messages call a deployment ("deployment", "chain deployment").
func environmentsServed(o gatewayv1.Environmental, deployments map[string]gatewayv1.DeploymentStatus, noun string) ([]gatewayv1.EnvironmentStatus, kit.Check) {
	var out []gatewayv1.EnvironmentStatus
	var missing []string
	for _, p := range o.EnvironmentPointers() {
		out = append(out, gatewayv1.EnvironmentStatus{Name: p.Name, Deployment: p.Deployment, Status: deployments[p.Deployment]})
		if _, ok := deployments[p.Deployment]; p.Deployment != "" && !ok {
			missing = append(missing, fmt.Sprintf("%s → %s", p.Name, p.Deployment))
		}
	}
	prod, _ := o.Environment(gatewayv1.EnvironmentProduction)
	switch {
	case len(missing) > 0:
		return out, kit.Check{Reason: "DeploymentNotFound", Failed: true,
			Message: "Environments point at " + noun + "s that do not exist: " + strings.Join(missing, ", ") + "."}
	case prod == "":
		return out, kit.Check{Reason: "NoProductionDeployment", Failed: true, Message: "No " + noun + " is promoted to production yet."}
	}
	return out, kit.Ready(fmt.Sprintf("production serves %s %s.", noun, prod))
}
