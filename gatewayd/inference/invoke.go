package inference

import (
	"net/http"

	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/gatewayd/wake"
)

// Exported steps of the predict path, for the routes that name a deployment the same way but do not forward
// the call themselves (gatewayd/async queues it, then forwards through RouteDeployment).

// AuthorizeInvoke resolves the deployment that a route naming model modelID and an environment or a deployment
// id points at, and decides with authz.Decide whether caller may invoke it: a model the caller may not see is 404
// model_does_not_exist, a key that may not invoke it 403, an unknown or inactive deployment 404. Exactly one of
// environment and deploymentID is set. With an error, the model is still returned when the caller may see it (so
// a refusal can be labelled with it), and the deployment is nil. Every route that names a deployment asks here.
func AuthorizeInvoke(caller auth.Caller, ns *view.Namespace, modelID, environment, deploymentID string) (*snapshot.ServedModel, *snapshot.Deployment, *httperr.Error) {
	sel := modelSelector{environment: environment, deployment: deploymentID}
	m, d, rerr := resolveModel(ns, modelID, sel)
	if m != nil {
		if e := MayInvoke(caller, m.ID, m.TeamID, environment); e != nil {
			if e.Status == http.StatusNotFound {
				return nil, nil, e // hidden: the caller learns nothing of the model
			}
			return m, nil, e
		}
	} else if dec := authz.Decide(caller.Principal(), authz.ActionInvoke, authz.Resource{ModelID: modelID, Environment: environment}); !dec.Allowed && !dec.Hidden {
		// A key that may not invoke at all learns that before whether a model exists.
		return nil, nil, httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type})
	}
	if rerr != nil {
		return m, nil, rerr
	}
	return m, d, nil
}

// MayInvoke is authz.Decide's answer for caller invoking model modelID of team teamID through environment (""
// for a deployment route), in the envelope: nil, 404 when the model is hidden from the caller, or 403.
func MayInvoke(caller auth.Caller, modelID, teamID, environment string) *httperr.Error {
	dec := authz.Decide(caller.Principal(), authz.ActionInvoke, authz.Resource{TeamID: teamID, ModelID: modelID, Environment: environment})
	if dec.Hidden {
		return httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The model does not exist.", "model_id: "+modelID)
	}
	if !dec.Allowed {
		return httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type, "model_id": modelID})
	}
	return nil
}

// RouteDeployment is the address of a predict call to d (see routeDeployment): its URL, or a ready address of
// its Service chosen by addrs, with the release that ends the call's count on it; 503 model_not_ready when no
// address is ready.
func RouteDeployment(namespace string, d *snapshot.Deployment, addrs Addresses) (upstream.Target, func(), *httperr.Error) {
	return routeDeployment(namespace, d, addrs)
}

// WakeTarget is what gatewayd/wake needs to wake d of namespace and time its cold start.
func WakeTarget(namespace string, d *snapshot.Deployment) wake.Target {
	return wakeTarget(namespace, d)
}
