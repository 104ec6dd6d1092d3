package route

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/gatewayd/wake"
)

// Slug resolves slug in namespace ns to the Endpoint that serves it, whose targets gatewayd/failover tries; 503
// model_not_ready when no Endpoint routes it.
func Slug(ns *view.Namespace, slug string) (*view.Endpoint, *httperr.Error) {
	var ep *view.Endpoint
	if ns != nil {
		ep = ns.Endpoints[slug]
	}
	if ep == nil {
		return nil, httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "No Endpoint routes this model yet.", "model: "+slug)
	}
	return ep, nil
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

// Deployment is the address of a predict call to d: its URL, or a ready address of its Service chosen by addrs.
// release ends the call's count on that address. 503 model_not_ready when no address is ready (the predict route
// then holds a call to a Service instead; the async dispatcher leaves the request queued).
func Deployment(namespace string, d *snapshot.Deployment, addrs Addresses) (t upstream.Target, release func(), err *httperr.Error) {
	t = upstream.Target{Name: d.ModelID, Namespace: namespace}
	switch d.Kind {
	case snapshot.DeploymentURL:
		if !d.Ready {
			return t, nil, notReady(d)
		}
		t.URL = strings.TrimRight(d.URL, "/") + d.PredictPath
		return t, func() {}, nil
	case snapshot.DeploymentService:
		if addrs == nil {
			return t, nil, notReady(d)
		}
		addr, release, ok := addrs.Pick(namespace, d.Service, d.PortName)
		if !ok {
			return t, nil, notReady(d)
		}
		t.URL = "http://" + addr + d.PredictPath
		return t, release, nil
	}
	return t, nil, notReady(d)
}

// notReady is the 503 of a call to d while no address of it is ready. It is built only when a call is refused:
// a routed call allocates no error.
func notReady(d *snapshot.Deployment) *httperr.Error {
	e := httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "The model is not ready yet; retry shortly.", "deployment_id: "+d.ID)
	e.RetryAfter = 1
	return e
}

// WakeTarget is what gatewayd/wake needs to wake deployment d of namespace and time its cold start.
func WakeTarget(namespace string, d *snapshot.Deployment) wake.Target {
	return wake.Target{Namespace: namespace, Deployment: d.ID, Model: d.ModelID, Service: d.Service, PortName: d.PortName,
		StartupTimeout: time.Duration(d.StartupTimeoutSeconds) * time.Second}
}
