// Package chains serves the chain management routes of DESIGN.md "Chains": chains, their deployments and
// environments, and chain deletion. Every write is a change to the Chain custom resource, as kubectl would make
// it; the manager does the rest (its finalizers remove the chain deployments and their chainlet deployments).
// Who may read or change a chain is decided by gatewayd/authz, with the chain where a model stands.
package chains

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux. They fall under the default management rate limit of
// SPEC.md's table (kit.ManagementLimit).
func Register(mux *http.ServeMux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "GET /v1/chains", kit.AccessModels, a.listChains)
	k.Handle(mux, "GET /v1/chains/{chain_id}", kit.AccessModels, a.getChain)
	k.Handle(mux, "DELETE /v1/chains/{chain_id}", kit.AccessModels, a.deleteChain)
	k.Handle(mux, "GET /v1/chains/{chain_id}/deployments", kit.AccessModels, a.listDeployments)
	k.Handle(mux, "GET /v1/chains/{chain_id}/environments", kit.AccessModels, a.listEnvironments)
	k.Handle(mux, "GET /v1/chains/{chain_id}/environments/{env_name}", kit.AccessModels, a.getEnvironment)
	k.Handle(mux, "POST /v1/chains/{chain_id}/environments/{env_name}/activate", kit.AccessModels, a.activateEnvironment(true))
	k.Handle(mux, "POST /v1/chains/{chain_id}/environments/{env_name}/deactivate", kit.AccessModels, a.activateEnvironment(false))
	k.Handle(mux, "POST /v1/chains/{chain_id}/environments/{env_name}/promote", kit.AccessModels, a.promote)
}

// Wire shapes, as for models.
type (
	chainJSON struct {
		ID                      string  `json:"id"`
		CreatedAt               string  `json:"created_at"`
		Name                    string  `json:"name"`
		DeploymentsCount        int     `json:"deployments_count"`
		ProductionDeploymentID  *string `json:"production_deployment_id"`
		DevelopmentDeploymentID *string `json:"development_deployment_id"`
		TeamName                string  `json:"team_name"`
	}
	chainletJSON struct {
		Name               string `json:"name"`
		DeploymentID       string `json:"deployment_id"`
		Status             string `json:"status"`
		ActiveReplicaCount int32  `json:"active_replica_count"`
		IsEntrypoint       bool   `json:"is_entrypoint"`
	}
	deploymentJSON struct {
		ID            string         `json:"id"`
		CreatedAt     string         `json:"created_at"`
		Name          string         `json:"name"`
		ChainID       string         `json:"chain_id"`
		IsProduction  bool           `json:"is_production"`
		IsDevelopment bool           `json:"is_development"`
		Status        string         `json:"status"`
		Entrypoint    string         `json:"entrypoint"`
		Chainlets     []chainletJSON `json:"chainlets"`
		Environment   *string        `json:"environment"`
	}
	environmentJSON struct {
		Name              string          `json:"name"`
		CreatedAt         string          `json:"created_at"`
		ChainID           string          `json:"chain_id"`
		CurrentDeployment *deploymentJSON `json:"current_deployment"`
	}
	deletedJSON struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}
)

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func toChainJSON(c *gatewayv1.Chain, deployments int) chainJSON {
	out := chainJSON{ID: c.Name, CreatedAt: timestamp(c.CreationTimestamp.Time), Name: cmp.Or(c.Spec.DisplayName, c.Name),
		DeploymentsCount: deployments, TeamName: c.Spec.TeamID}
	if id, _ := c.Environment(gatewayv1.EnvironmentProduction); id != "" {
		out.ProductionDeploymentID = &id
	}
	if id := c.Spec.Development; id != "" {
		out.DevelopmentDeploymentID = &id
	}
	return out
}

func toDeploymentJSON(c *gatewayv1.Chain, d *gatewayv1.ChainDeployment) deploymentJSON {
	envs := c.EnvironmentsOf(d.Name)
	out := deploymentJSON{ID: d.Name, CreatedAt: timestamp(d.CreationTimestamp.Time), Name: d.Name, ChainID: d.Spec.ChainID,
		IsProduction: slices.Contains(envs, gatewayv1.EnvironmentProduction), IsDevelopment: slices.Contains(envs, gatewayv1.EnvironmentDevelopment),
		Status: string(cmp.Or(d.Status.Status, gatewayv1.StatusDeploying)), Entrypoint: d.Spec.Entrypoint, Chainlets: []chainletJSON{}}
	observed := map[string]gatewayv1.ChainletStatus{}
	for _, s := range d.Status.Chainlets {
		observed[s.Name] = s
	}
	for _, cl := range d.Spec.Chainlets {
		s := observed[cl.Name]
		out.Chainlets = append(out.Chainlets, chainletJSON{Name: cl.Name, DeploymentID: d.ChainletDeploymentName(cl.Name),
			Status: string(cmp.Or(s.Status, gatewayv1.StatusDeploying)), ActiveReplicaCount: s.ActiveReplicaCount, IsEntrypoint: cl.Name == d.Spec.Entrypoint})
	}
	for _, e := range envs {
		if e != gatewayv1.EnvironmentDevelopment {
			out.Environment = &e
			break
		}
	}
	return out
}

// loadChain reads the Chain of path parameter chain_id and asks authz whether c may read it (for a write:
// manage it); a chain c may not see is 404, and so is one being deleted.
func (a *api) loadChain(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action, env string) (*gatewayv1.Chain, bool) {
	ch := &gatewayv1.Chain{}
	if !a.LoadDecided(w, r, c, "chain_id", "Chain", ch, func() string { return ch.Spec.TeamID }, action, env) {
		return nil, false
	}
	return ch, true
}

// deploymentsOf lists the deployments of chain that are not being deleted, by name.
func (a *api) deploymentsOf(r *http.Request, c auth.Caller, chain string) ([]gatewayv1.ChainDeployment, error) {
	var list gatewayv1.ChainDeploymentList
	if err := a.ListReader().List(r.Context(), &list, client.InNamespace(c.Namespace),
		client.MatchingFields{gatewayv1.FieldChainDeploymentChain: chain}); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(list.Items, func(d gatewayv1.ChainDeployment) bool { return d.DeletionTimestamp != nil })
	slices.SortFunc(out, func(x, y gatewayv1.ChainDeployment) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// loadChainWithDeployments is loadChain for a read, with the chain's deployments.
func (a *api) loadChainWithDeployments(w http.ResponseWriter, r *http.Request, c auth.Caller, env string) (*gatewayv1.Chain, []gatewayv1.ChainDeployment, bool) {
	ch, ok := a.loadChain(w, r, c, authz.ActionListModels, env)
	if !ok {
		return nil, nil, false
	}
	deps, err := a.deploymentsOf(r, c, ch.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list chain deployments", err)
		return nil, nil, false
	}
	return ch, deps, true
}

func (a *api) listChains(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var chains gatewayv1.ChainList
	if err := a.ListReader().List(r.Context(), &chains, client.InNamespace(c.Namespace)); err != nil {
		kit.WriteKubeError(w, r, "list chains", err)
		return
	}
	var deps gatewayv1.ChainDeploymentList
	if err := a.ListReader().List(r.Context(), &deps, client.InNamespace(c.Namespace)); err != nil {
		kit.WriteKubeError(w, r, "list chain deployments", err)
		return
	}
	count := map[string]int{}
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil {
			count[d.Spec.ChainID]++
		}
	}
	out := []chainJSON{}
	p := c.Principal()
	for i := range chains.Items {
		ch := &chains.Items[i]
		if ch.DeletionTimestamp != nil || !authz.Decide(p, authz.ActionListModels, authz.Resource{TeamID: ch.Spec.TeamID, ModelID: ch.Name}).Allowed {
			continue
		}
		out = append(out, toChainJSON(ch, count[ch.Name]))
	}
	slices.SortFunc(out, func(x, y chainJSON) int { return strings.Compare(x.ID, y.ID) })
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"chains": out})
}

func (a *api) getChain(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	if ch, deps, ok := a.loadChainWithDeployments(w, r, c, ""); ok {
		httperr.WriteJSON(w, http.StatusOK, toChainJSON(ch, len(deps)))
	}
}

func (a *api) listDeployments(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	ch, deps, ok := a.loadChainWithDeployments(w, r, c, "")
	if !ok {
		return
	}
	out := make([]deploymentJSON, 0, len(deps))
	for i := range deps {
		out = append(out, toDeploymentJSON(ch, &deps[i]))
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"deployments": out})
}

// deleteChain starts the Chain's deletion and answers once this gatewayd no longer serves it: the chain leaves
// the snapshot as soon as its deletion starts, so a call right after the answer is a 404. The Chain's finalizer
// then removes its deployments, whose finalizers remove the chainlet deployments. A second DELETE is a 404 at
// once, even while a finalizer still holds the Chain (kit.LoadObject treats one being deleted as gone).
func (a *api) deleteChain(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	ch, ok := a.loadChain(w, r, c, authz.ActionManageModels, "")
	if !ok {
		return
	}
	if err := a.Opts.Client.Delete(r.Context(), ch, client.Preconditions{UID: &ch.UID}); client.IgnoreNotFound(err) != nil {
		kit.WriteKubeError(w, r, "delete chain", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "delete chain", func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.Chains, func(sc snapshot.ServedChain) bool { return sc.ID == ch.Name })
	})
	httperr.WriteJSON(w, http.StatusOK, deletedJSON{ID: ch.Name, Deleted: true})
}

// environmentNames are the environments of ch in spec order, "development" last when ch has one.
func environmentNames(ch *gatewayv1.Chain) []string {
	out := make([]string, 0, len(ch.Spec.Environments)+1)
	for _, e := range ch.Spec.Environments {
		out = append(out, e.Name)
	}
	if ch.Spec.Development != "" {
		out = append(out, gatewayv1.EnvironmentDevelopment)
	}
	return out
}

func toEnvironmentJSON(ch *gatewayv1.Chain, name string, deps []gatewayv1.ChainDeployment) environmentJSON {
	out := environmentJSON{Name: name, CreatedAt: timestamp(ch.CreationTimestamp.Time), ChainID: ch.Name}
	served, _ := ch.Environment(name)
	if i := slices.IndexFunc(deps, func(d gatewayv1.ChainDeployment) bool { return d.Name == served }); served != "" && i >= 0 {
		d := toDeploymentJSON(ch, &deps[i])
		out.CurrentDeployment = &d
	}
	return out
}

func (a *api) listEnvironments(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	ch, deps, ok := a.loadChainWithDeployments(w, r, c, "")
	if !ok {
		return
	}
	out := []environmentJSON{}
	for _, name := range environmentNames(ch) {
		out = append(out, toEnvironmentJSON(ch, name, deps))
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"environments": out})
}

func (a *api) getEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	env := r.PathValue("env_name")
	ch, deps, ok := a.loadChainWithDeployments(w, r, c, env)
	if !ok {
		return
	}
	if _, ok := ch.Environment(env); !ok {
		httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("Chain %q has no environment %q.", ch.Name, env),
			map[string]string{"id": env})
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toEnvironmentJSON(ch, env, deps))
}
