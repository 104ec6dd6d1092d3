package inference

import (
	"context"
	"net/http"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

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

func endpointTarget(namespace string, ep *view.Endpoint, path string) upstream.Target {
	return upstream.Target{URL: ep.BaseURL + path, Name: ep.Slug, Namespace: namespace, Secret: ep.Secret, Timeout: ep.Timeout}
}

// Addresses picks a ready address of a Service's EndpointSlices (gatewayd/discovery).
type Addresses interface {
	// Pick returns "host:port" of a ready address of namespace/service on the port named portName, and a release
	// to call once when the call ends; ok is false when none is ready.
	Pick(namespace, service, portName string) (addr string, release func(), ok bool)
	// WaitReady blocks, without polling, until namespace/service has a ready address on the port named
	// portName, or ctx is done.
	WaitReady(ctx context.Context, namespace, service, portName string) error
	// Synced is closed once the watch has listed every address, so that no address means none.
	Synced() <-chan struct{}
}

// modelSelector is which deployment of a model a call names: an environment ("production", "development" or a
// named one) or a deployment id.
type modelSelector struct {
	environment string
	deployment  string
}

// what names the selector in an error's detail.
func (s modelSelector) what() string {
	if s.deployment != "" {
		return "deployment_id: " + s.deployment
	}
	return "environment: " + s.environment
}

// resolveModel finds the model a call names, and the deployment its selector points at; 404
// model_does_not_exist for an unknown model, environment or deployment, one that is not promoted, or one that is
// not active (a deactivated deployment answers 404).
func resolveModel(ns *view.Namespace, modelID string, sel modelSelector) (*snapshot.ServedModel, *snapshot.Deployment, *httperr.Error) {
	var m *snapshot.ServedModel
	if ns != nil {
		m = ns.Models[modelID]
	}
	if m == nil {
		return nil, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The model does not exist.", "model_id: "+modelID)
	}
	id := sel.deployment
	if sel.environment == gatewayv1.EnvironmentDevelopment {
		id = m.Development
	} else if sel.environment != "" {
		for _, e := range m.Environments {
			if e.Name == sel.environment {
				id = e.Deployment
			}
		}
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

// routeDeployment is the address of a predict call to d: its URL, or a ready address of its Service chosen by
// addrs. release ends the call's count on that address. 503 model_not_ready when no address is ready (the
// predict route then holds a call to a Service instead: hold.go).
func routeDeployment(namespace string, d *snapshot.Deployment, addrs Addresses) (upstream.Target, func(), *httperr.Error) {
	notReady := httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "The model is not ready yet; retry shortly.", "deployment_id: "+d.ID)
	notReady.RetryAfter = 1
	t := upstream.Target{Name: d.ModelID, Namespace: namespace}
	switch d.Kind {
	case snapshot.DeploymentURL:
		if !d.Ready {
			return t, nil, notReady
		}
		t.URL = strings.TrimRight(d.URL, "/") + d.PredictPath
		return t, func() {}, nil
	case snapshot.DeploymentService:
		if addrs == nil {
			return t, nil, notReady
		}
		addr, release, ok := addrs.Pick(namespace, d.Service, d.PortName)
		if !ok {
			return t, nil, notReady
		}
		t.URL = "http://" + addr + d.PredictPath
		return t, release, nil
	}
	return t, nil, notReady
}
