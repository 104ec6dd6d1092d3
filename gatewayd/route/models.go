package route

import (
	"net/http"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// AuthorizeInvoke resolves the deployment that a route naming model modelID and sel points at, and decides with
// authz.Decide whether caller may invoke it: a model the caller may not see is 404 model_does_not_exist, a key
// that may not invoke it 403, an unknown or inactive deployment 404. With an error, the model is still returned
// when the caller may see it (so a refusal can be labelled with it), and the deployment is nil. Every route that
// names a deployment of a model asks here: predict, wake, async_predict and async_queue_status.
func AuthorizeInvoke(caller auth.Caller, ns *view.Namespace, modelID string, sel Selector) (*snapshot.ServedModel, *snapshot.Deployment, *httperr.Error) {
	m, d, rerr := resolveModel(ns, modelID, sel)
	var may *httperr.Error
	if m != nil {
		may = MayInvoke(caller, m.ID, m.TeamID, sel.Environment)
	}
	e := refusal(caller, m != nil, may, modelID, sel, rerr)
	switch {
	case e == nil:
		return m, d, nil
	case e == may && e.Status == http.StatusNotFound:
		return nil, nil, e // hidden: the caller learns nothing of the model
	}
	return m, nil, e
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

// refusal is the answer that refuses an invoke call, in the order of every route that names a deployment of a
// model or chain id: when the snapshot has the object (found), the decision on it (may); when it has none, a key
// that may not invoke at all learns that before whether the object exists; then the resolution's own error (rerr).
// nil when none refuses.
func refusal(caller auth.Caller, found bool, may *httperr.Error, id string, sel Selector, rerr *httperr.Error) *httperr.Error {
	if found {
		if may != nil {
			return may
		}
	} else if dec := authz.Decide(caller.Principal(), authz.ActionInvoke, authz.Resource{ModelID: id, Environment: sel.Environment}); !dec.Allowed && !dec.Hidden {
		return httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type})
	}
	return rerr
}

// resolveModel finds the model a call names, and the deployment its selector points at; 404
// model_does_not_exist for an unknown model, environment or deployment, one that is not promoted, or one that is
// not active (a deactivated deployment answers 404).
func resolveModel(ns *view.Namespace, modelID string, sel Selector) (*snapshot.ServedModel, *snapshot.Deployment, *httperr.Error) {
	var m *snapshot.ServedModel
	if ns != nil {
		m = ns.Models[modelID]
	}
	if m == nil {
		return nil, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The model does not exist.", "model_id: "+modelID)
	}
	id := sel.Deployment
	if sel.Environment != "" {
		id = environmentDeployment(sel.Environment, m.Development, m.Environments)
	}
	d := ns.Deployments[id]
	if id == "" || d == nil || d.ModelID != m.ID {
		return m, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "No deployment of the model serves this route.", sel.what())
	}
	if !d.Active {
		return m, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The deployment is not active: activate it to call it.", "deployment_id: "+d.ID)
	}
	return m, d, nil
}

// environmentDeployment is the deployment that environment points at, of a model or chain whose development
// deployment is development and whose other environments are envs; "" when none.
func environmentDeployment(environment, development string, envs []snapshot.EnvironmentRoute) string {
	if environment == gatewayv1.EnvironmentDevelopment {
		return development
	}
	id := ""
	for _, e := range envs {
		if e.Name == environment {
			id = e.Deployment
		}
	}
	return id
}
