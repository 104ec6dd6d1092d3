package inference

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Chain routes (DESIGN.md "Chains"): run_remote calls the entrypoint chainlet of the chain deployment that the
// route names, exactly as a predict call calls a model deployment.
const (
	RouteProductionRunRemote  = "POST /chains/{chain_id}/production/run_remote"
	RouteDevelopmentRunRemote = "POST /chains/{chain_id}/development/run_remote"
	RouteEnvironmentRunRemote = "POST /chains/{chain_id}/environments/{env_name}/run_remote"
	RouteDeploymentRunRemote  = "POST /chains/{chain_id}/deployment/{deployment_id}/run_remote"
)

// RegisterChains adds the run_remote routes to mux.
func (h *Handler) RegisterChains(mux ingress.Mux) {
	for _, route := range []string{RouteProductionRunRemote, RouteDevelopmentRunRemote, RouteEnvironmentRunRemote, RouteDeploymentRunRemote} {
		mux.HandleFunc(route, h.runRemote)
	}
}

// ChainSelector reads which chain deployment a chain route names, by the route's last segment (run_remote,
// async_run_remote): an environment ("production", "development" or the {env_name} one) or a {deployment_id}.
func ChainSelector(r *http.Request) (environment, deploymentID string) {
	switch p := r.Pattern; {
	case strings.Contains(p, "/production/"):
		return gatewayv1.EnvironmentProduction, ""
	case strings.Contains(p, "/development/"):
		return gatewayv1.EnvironmentDevelopment, ""
	case strings.Contains(p, "/environments/{env_name}/"):
		return r.PathValue("env_name"), ""
	}
	return "", r.PathValue("deployment_id")
}

// chainNotFound is the 404 of an unknown chain, or one the caller may not see.
func chainNotFound(chainID string) *httperr.Error {
	return httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The chain does not exist.", "chain_id: "+chainID)
}

// ResolveChain finds the chain a call names, and the deployment of the entrypoint of the chain deployment its
// environment or deployment id points at: 404 model_does_not_exist for an unknown chain, environment or chain
// deployment, one not promoted, or an entrypoint that is not active. A chain being deleted is not in the
// snapshot, so its routes answer 404 at once.
func ResolveChain(ns *view.Namespace, chainID, environment, deploymentID string) (*snapshot.ServedChain, *snapshot.Deployment, *httperr.Error) {
	if ns == nil || ns.Snapshot == nil {
		return nil, nil, chainNotFound(chainID)
	}
	s := ns.Snapshot
	i, ok := slices.BinarySearchFunc(s.Chains, chainID, func(c snapshot.ServedChain, id string) int { return strings.Compare(c.ID, id) })
	if !ok {
		return nil, nil, chainNotFound(chainID)
	}
	c := &s.Chains[i]
	id, what := deploymentID, "deployment_id: "+deploymentID
	if environment != "" {
		what = "environment: " + environment
		if environment == gatewayv1.EnvironmentDevelopment {
			id = c.Development
		} else {
			for _, e := range c.Environments {
				if e.Name == environment {
					id = e.Deployment
				}
			}
		}
	}
	j, ok := slices.BinarySearchFunc(s.ChainDeployments, id, func(d snapshot.ChainDeployment, id string) int { return strings.Compare(d.ID, id) })
	if id == "" || !ok || s.ChainDeployments[j].ChainID != c.ID {
		return c, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "No deployment of the chain serves this route.", what)
	}
	d := ns.Deployments[s.ChainDeployments[j].Entrypoint]
	if d == nil {
		// The manager has not created the entrypoint's deployment yet.
		e := httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "The chain deployment is not ready yet; retry shortly.", "deployment_id: "+id)
		e.RetryAfter = 1
		return c, nil, e
	}
	if !d.Active {
		return c, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The chain deployment is not active: activate it to call it.", "deployment_id: "+id)
	}
	return c, d, nil
}

// MayInvokeChain is authz.Decide's answer for caller invoking chain chainID of team teamID through environment
// ("" for a deployment route): the chain stands where a model does, so a key scoped to models invokes the
// chains it names. nil, 404 when the chain is hidden from the caller, or 403.
func MayInvokeChain(caller auth.Caller, chainID, teamID, environment string) *httperr.Error {
	dec := authz.Decide(caller.Principal(), authz.ActionInvoke, authz.Resource{TeamID: teamID, ModelID: chainID, Environment: environment})
	if dec.Hidden {
		return chainNotFound(chainID)
	}
	if !dec.Allowed {
		return httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type, "chain_id": chainID})
	}
	return nil
}

// AuthorizeChainInvoke is AuthorizeInvoke for a chain route: the entrypoint deployment of the chain deployment
// that the route names, once authz.Decide lets caller invoke the chain.
func AuthorizeChainInvoke(caller auth.Caller, ns *view.Namespace, chainID, environment, deploymentID string) (*snapshot.ServedChain, *snapshot.Deployment, *httperr.Error) {
	c, d, rerr := ResolveChain(ns, chainID, environment, deploymentID)
	if c != nil {
		if e := MayInvokeChain(caller, c.ID, c.TeamID, environment); e != nil {
			return nil, nil, e
		}
	} else if dec := authz.Decide(caller.Principal(), authz.ActionInvoke, authz.Resource{ModelID: chainID, Environment: environment}); !dec.Allowed && !dec.Hidden {
		// A key that may not invoke at all learns that before whether a chain exists.
		return nil, nil, httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type})
	}
	if rerr != nil {
		return nil, nil, rerr
	}
	return c, d, nil
}

// runRemote serves the run_remote routes: the body streams to the entrypoint's predict path unchanged, and so
// does the answer, with the callers, limits on body size and errors of a predict call.
func (h *Handler) runRemote(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	reqID := stampRequestID(sw, r)
	defer func() {
		h.opts.Metrics.requestDuration.WithLabelValues(r.Pattern, strconv.Itoa(sw.code())).Observe(time.Since(start).Seconds())
	}()
	caller, aerr := auth.Workspace(r, h.lookup)
	if aerr != nil {
		httperr.WriteModelCallError(sw, aerr)
		return
	}
	env, dep := ChainSelector(r)
	_, d, rerr := AuthorizeChainInvoke(caller, h.opts.View().Namespace(caller.Namespace), r.PathValue("chain_id"), env, dep)
	if rerr != nil {
		httperr.WriteModelCallError(sw, rerr)
		return
	}
	h.forwardPredict(sw, r, reqID, caller, d, environmentRoute{}, start)
}
