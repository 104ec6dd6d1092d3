package async

import (
	"net/http"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// asyncRunRemote serves async_run_remote, run_remote on the async queue: a chain's request is queued for its
// entrypoint's deployment under the modelID of the chain's chainlet deployments, so the dispatcher runs it as any
// other request; only the status object and the webhook name the chain instead.
func (s *Service) asyncRunRemote(w http.ResponseWriter, r *http.Request) {
	caller, aerr := auth.Workspace(r, s.lookup)
	if aerr != nil {
		httperr.WriteModelCallError(w, aerr)
		return
	}
	sel := route.Of(r)
	var c *snapshot.ServedChain
	var d *snapshot.Deployment
	e := route.Resolve(r.Context(), s.opts.View(), s.opts.View, caller.Namespace, s.opts.CatchUp, func(v *view.View) (e *httperr.Error) {
		c, d, e = route.AuthorizeChainInvoke(caller, v.Namespace(caller.Namespace), r.PathValue("chain_id"), sel)
		return e
	})
	if e != nil {
		httperr.WriteModelCallError(w, e)
		return
	}
	s.accept(w, r, caller, gatewayv1.ChainletModelID(c.ID), d, sel.Environment)
}

// chainRequest finds a chain's request as request finds a model's: 404 unless it was queued for chain_id in the
// caller's workspace and the caller may see the chain. A chain that is gone keeps its requests readable by the
// keys that may invoke every chain, until retention ends.
func (s *Service) chainRequest(w http.ResponseWriter, r *http.Request) (*queue.Request, bool) {
	chainID := r.PathValue("chain_id")
	return s.requestOf(w, r, gatewayv1.ChainletModelID(chainID), "No async request of this chain has this id.",
		func(caller auth.Caller, q *queue.Request) *httperr.Error {
			teamID := ""
			if c := route.Chain(s.opts.View().Namespace(caller.Namespace), chainID); c != nil {
				teamID = c.TeamID
			}
			return route.MayInvokeChain(caller, chainID, teamID, q.Environment)
		})
}

// chainDeploymentOf is the chain deployment whose entrypoint ran q, by the snapshot in force; the entrypoint's
// deployment id once the chain deployment is gone.
func (s *Service) chainDeploymentOf(q *queue.Request) string {
	if ns := s.opts.View().Namespace(q.Namespace); ns != nil && ns.Snapshot != nil {
		for _, cd := range ns.Snapshot.ChainDeployments {
			if cd.Entrypoint == q.DeploymentID {
				return cd.ID
			}
		}
	}
	return q.DeploymentID
}

func (s *Service) chainRequestStatus(w http.ResponseWriter, r *http.Request) {
	q, ok := s.chainRequest(w, r)
	if !ok {
		return
	}
	// chain_id in place of model_id, and the chain deployment as deployment_id.
	st := statusOf(q)
	st.ModelID, st.ChainID, st.DeploymentID = "", r.PathValue("chain_id"), s.chainDeploymentOf(q)
	httperr.WriteJSON(w, http.StatusOK, st)
}

func (s *Service) chainRequestCancel(w http.ResponseWriter, r *http.Request) {
	q, ok := s.chainRequest(w, r)
	if !ok {
		return
	}
	s.cancel(w, r, q)
}
