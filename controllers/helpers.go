package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// routingChanged passes what kit.SpecOrLifecycleChanged passes, and ModelDeployment status writes that change what
// the snapshot says of it (its status or resolved port), but not those that only move a replica count or a
// condition's message.
var routingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if kit.SpecOrLifecycleChanged.Update(e) {
			return true
		}
		o, ok1 := e.ObjectOld.(*gatewayv1.ModelDeployment)
		n, ok2 := e.ObjectNew.(*gatewayv1.ModelDeployment)
		return !ok1 || !ok2 || o.Status.Status != n.Status.Status || o.Status.PortName != n.Status.PortName
	},
}
