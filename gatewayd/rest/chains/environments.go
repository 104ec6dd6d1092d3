package chains

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// The environment writes, as for models: activate and deactivate answer {success, no_op}; promote answers the
// Environment.

type activationJSON struct {
	Success bool `json:"success"`
	NoOp    bool `json:"no_op"`
}

// loadEnvironment reads the chain, which must have environment env_name, for a write.
func (a *api) loadEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller) (*gatewayv1.Chain, string, bool) {
	env := r.PathValue("env_name")
	ch, ok := a.loadChain(w, r, c, authz.ActionManageModels, env)
	if !ok {
		return nil, "", false
	}
	if _, ok := ch.Environment(env); !ok {
		httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("Chain %q has no environment %q.", ch.Name, env),
			map[string]string{"id": env})
		return nil, "", false
	}
	return ch, env, true
}

// chainlets reads the chainlet deployments of chain deployment cd, the entrypoint's first.
func (a *api) chainlets(r *http.Request, c auth.Caller, cd *gatewayv1.ChainDeployment) ([]*gatewayv1.ModelDeployment, error) {
	names := []string{cd.ChainletDeploymentName(cd.Spec.Entrypoint)}
	for _, cl := range cd.Spec.Chainlets {
		if cl.Name != cd.Spec.Entrypoint {
			names = append(names, cd.ChainletDeploymentName(cl.Name))
		}
	}
	out := make([]*gatewayv1.ModelDeployment, 0, len(names))
	for _, n := range names {
		md := &gatewayv1.ModelDeployment{}
		err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: n}, md)
		if apierrors.IsNotFound(err) {
			continue // the manager has not created it yet; it starts active
		}
		if err != nil {
			return nil, err
		}
		out = append(out, md)
	}
	return out, nil
}

// activateEnvironment activates or deactivates every chainlet of the chain deployment the environment serves.
// The entrypoint goes first: it decides whether run_remote answers, and no_op is true when it already was in the
// asked state.
func (a *api) activateEnvironment(active bool) kit.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) {
		ch, env, ok := a.loadEnvironment(w, r, c)
		if !ok {
			return
		}
		served, _ := ch.Environment(env)
		cd := &gatewayv1.ChainDeployment{}
		err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: served}, cd)
		if served == "" || apierrors.IsNotFound(err) || (err == nil && cd.DeletionTimestamp != nil) {
			httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("No chain deployment is promoted to environment %q yet.", env),
				map[string]string{"id": env})
			return
		}
		if err != nil {
			kit.WriteKubeError(w, r, "get chain deployment", err)
			return
		}
		mds, err := a.chainlets(r, c, cd)
		if err != nil {
			kit.WriteKubeError(w, r, "get chainlet deployments", err)
			return
		}
		// no_op is the entrypoint's: of concurrent callers exactly one changes it. The others still bring every
		// other chainlet to the asked state, which also heals a call that stopped half way.
		noOp := true
		for i, md := range mds {
			changed, err := kit.SetActive(r.Context(), a.Opts.Client, md, active)
			if err != nil {
				kit.WriteKubeError(w, r, "update chainlet deployment", err)
				return
			}
			if i == 0 && md.Name == cd.ChainletDeploymentName(cd.Spec.Entrypoint) {
				noOp = !changed
			}
		}
		httperr.WriteJSON(w, http.StatusOK, activationJSON{Success: true, NoOp: noOp})
	}
}

type promoteRequest struct {
	DeploymentID                string `json:"deployment_id"`
	ScaleDownPreviousDeployment *bool  `json:"scale_down_previous_deployment"`
}

// promote points an environment at another deployment of the chain in one patch of the Chain, waits until this
// gatewayd routes by it, and then scales the previous deployment's chainlets to zero (unless asked not to, or it
// still serves another environment).
func (a *api) promote(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req promoteRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.DeploymentID == "" || !kit.ValidName(req.DeploymentID) {
		kit.BadRequest(w, "deployment_id", "deployment_id is required: the id of a deployment of this chain.")
		return
	}
	ch, env, ok := a.loadEnvironment(w, r, c)
	if !ok {
		return
	}
	target := &gatewayv1.ChainDeployment{}
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: req.DeploymentID}, target)
	if apierrors.IsNotFound(err) || (err == nil && (target.Spec.ChainID != ch.Name || target.DeletionTimestamp != nil)) {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("Chain %q has no deployment %q.", ch.Name, req.DeploymentID))
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get chain deployment", err)
		return
	}
	if !target.Status.Status.Promotable() {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("Only a chain deployment that is ACTIVE or SCALED_TO_ZERO can be promoted; %s is %s.",
			target.Name, cmp.Or(target.Status.Status, gatewayv1.StatusDeploying)))
		return
	}
	var previous string
	if err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(ch), ch); err != nil {
			return err
		}
		previous, _ = ch.Environment(env)
		if env == gatewayv1.EnvironmentDevelopment {
			ch.Spec.Development = target.Name
		}
		for i := range ch.Spec.Environments {
			if ch.Spec.Environments[i].Name == env {
				ch.Spec.Environments[i].Deployment = target.Name
			}
		}
		return a.Opts.Client.Update(r.Context(), ch)
	}); err != nil {
		kit.WriteKubeError(w, r, "promote", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "promote chain", func(s *snapshot.Snapshot) bool {
		i := slices.IndexFunc(s.Chains, func(sc snapshot.ServedChain) bool { return sc.ID == ch.Name })
		return i >= 0 && servedIn(&s.Chains[i], env) == target.Name
	})
	if previous != "" && previous != target.Name && (req.ScaleDownPreviousDeployment == nil || *req.ScaleDownPreviousDeployment) &&
		len(ch.EnvironmentsOf(previous)) == 0 {
		if err := a.scaleDown(r, c, previous); err != nil {
			kit.WriteKubeError(w, r, "scale down the previous deployment", err)
			return
		}
	}
	deps, err := a.deploymentsOf(r, c, ch.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list chain deployments", err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toEnvironmentJSON(ch, env, deps))
}

// scaleDown asks the manager to scale every chainlet of chain deployment name to zero.
func (a *api) scaleDown(r *http.Request, c auth.Caller, name string) error {
	cd := &gatewayv1.ChainDeployment{}
	if err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name}, cd); err != nil {
		return client.IgnoreNotFound(err)
	}
	mds, err := a.chainlets(r, c, cd)
	if err != nil {
		return err
	}
	at := a.Opts.Clock().UTC().Format(time.RFC3339Nano)
	for _, md := range mds {
		if err := kit.UpdateOnConflict(func() error {
			if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(md), md); err != nil {
				return client.IgnoreNotFound(err)
			}
			if md.Annotations == nil {
				md.Annotations = map[string]string{}
			}
			md.Annotations[gatewayv1.AnnotationScaledDownAt] = at
			return a.Opts.Client.Update(r.Context(), md)
		}); err != nil {
			return err
		}
	}
	return nil
}

// servedIn is the chain deployment environment env of a snapshot chain points at.
func servedIn(c *snapshot.ServedChain, env string) string {
	if env == gatewayv1.EnvironmentDevelopment {
		return c.Development
	}
	for _, e := range c.Environments {
		if e.Name == env {
			return e.Deployment
		}
	}
	return ""
}
