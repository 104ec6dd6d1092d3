package route

import (
	"net/http"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// A chain route (run_remote, async_run_remote) calls the entrypoint chainlet of the chain deployment that the
// route names, exactly as a predict call calls a model deployment: the chain stands where a model does.

// Chain is chain chainID of ns's snapshot; nil when there is none. A chain being deleted is not in the snapshot.
func Chain(ns *view.Namespace, chainID string) *snapshot.ServedChain {
	if ns == nil || ns.Snapshot == nil {
		return nil
	}
	s := ns.Snapshot
	i, ok := slices.BinarySearchFunc(s.Chains, chainID, func(c snapshot.ServedChain, id string) int { return strings.Compare(c.ID, id) })
	if !ok {
		return nil
	}
	return &s.Chains[i]
}

// chainNotFound is the 404 of an unknown chain, or one the caller may not see.
func chainNotFound(chainID string) *httperr.Error {
	return httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The chain does not exist.", "chain_id: "+chainID)
}

// resolveChain finds the chain a call names, and the deployment of the entrypoint of the chain deployment sel
// points at: 404 model_does_not_exist for an unknown chain, environment or chain deployment, one not promoted, or
// an entrypoint that is not active. A chain being deleted is not in the snapshot, so its routes answer 404 at
// once.
func resolveChain(ns *view.Namespace, chainID string, sel Selector) (*snapshot.ServedChain, *snapshot.Deployment, *httperr.Error) {
	c := Chain(ns, chainID)
	if c == nil {
		return nil, nil, chainNotFound(chainID)
	}
	s := ns.Snapshot
	id := sel.Deployment
	if sel.Environment != "" {
		id = environmentDeployment(sel.Environment, c.Development, c.Environments)
	}
	j, ok := slices.BinarySearchFunc(s.ChainDeployments, id, func(d snapshot.ChainDeployment, id string) int { return strings.Compare(d.ID, id) })
	if id == "" || !ok || s.ChainDeployments[j].ChainID != c.ID {
		return c, nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "No deployment of the chain serves this route.", sel.what())
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
func AuthorizeChainInvoke(caller auth.Caller, ns *view.Namespace, chainID string, sel Selector) (*snapshot.ServedChain, *snapshot.Deployment, *httperr.Error) {
	c, d, rerr := resolveChain(ns, chainID, sel)
	var may *httperr.Error
	if c != nil {
		may = MayInvokeChain(caller, c.ID, c.TeamID, sel.Environment)
	}
	if e := refusal(caller, c != nil, may, chainID, sel, rerr); e != nil {
		return nil, nil, e
	}
	return c, d, nil
}
