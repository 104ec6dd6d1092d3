package inference

import (
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// The route step: a call names a model (an OpenAI slug, or a model id and environment) and the view decides which
// upstream serves it. Handlers ask here and nowhere else, so a new kind of target (a model deployment behind an
// environment) changes this file, not the handlers.

// slugRoute is where an OpenAI call for a slug goes, and the model name the upstream knows it by ("" keeps the
// caller's).
type slugRoute struct {
	target      upstream.Target
	targetModel string
}

// routeSlug resolves the OpenAI route suffix of slug in namespace ns to the Endpoint that serves it.
func routeSlug(ns *view.Namespace, slug, suffix string) (slugRoute, *httperr.Error) {
	var ep *view.Endpoint
	if ns != nil {
		ep = ns.Endpoints[slug]
	}
	if ep == nil {
		return slugRoute{}, httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "No Endpoint routes this model yet.", "model: "+slug)
	}
	return slugRoute{target: endpointTarget(ns.Name, ep, suffix), targetModel: ep.TargetModel}, nil
}

// routePredict resolves model modelID of namespace ns to its predict address. Until Model objects with
// environments exist, the model id is the slug of an Endpoint of the workspace, and the call goes to that
// Endpoint's target at baseURL + "/predict".
func routePredict(ns *view.Namespace, modelID string) (upstream.Target, *httperr.Error) {
	var ep *view.Endpoint
	if ns != nil {
		ep = ns.Endpoints[modelID]
	}
	if ep == nil {
		return upstream.Target{}, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The model does not exist.", "model_id: "+modelID)
	}
	return endpointTarget(ns.Name, ep, "/predict"), nil
}

func endpointTarget(namespace string, ep *view.Endpoint, path string) upstream.Target {
	return upstream.Target{URL: ep.BaseURL + path, Name: ep.Slug, Namespace: namespace, Secret: ep.Secret, Timeout: ep.Timeout}
}
