// Package chains serves the chain management routes of docs/rest-api.md "Chains": chains, their deployments and
// environments, and chain deletion. The routes a model has too (the list, one chain, its deployments, its
// environments) are gatewayd/rest/envroutes over the Kind below; this package keeps what is a chain's alone: the
// wire shape of a chain deployment with its chainlets, activation of every chainlet, and deletion. Every write is
// a change to the Chain custom resource, as kubectl would make it; the manager does the rest (its finalizers
// remove the chain deployments and their chainlet deployments). Who may read or change a chain is decided by
// gatewayd/authz, with the chain where a model stands.
package chains

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/envroutes"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct {
	*kit.Kit
	*envroutes.Routes[*gatewayv1.Chain, *gatewayv1.ChainDeployment]
}

// Register adds the routes of this package to mux. They fall under the default management rate limit, each
// route its own bucket (kit.ManagementRow).
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{Kit: k}
	a.Routes = envroutes.Register(mux, k, &envroutes.Kind[*gatewayv1.Chain, *gatewayv1.ChainDeployment]{
		Kind: "Chain", Plural: "chains", Param: "chain_id", Deployment: "chain deployment",
		NewOwner:          func() *gatewayv1.Chain { return &gatewayv1.Chain{} },
		NewDeployment:     func() *gatewayv1.ChainDeployment { return &gatewayv1.ChainDeployment{} },
		NewOwnerList:      func() client.ObjectList { return &gatewayv1.ChainList{} },
		NewDeploymentList: func() client.ObjectList { return &gatewayv1.ChainDeploymentList{} },
		OwnerField:        gatewayv1.FieldChainDeploymentChain,
		OwnerOf:           func(cd *gatewayv1.ChainDeployment) string { return cd.Spec.ChainID },
		DisplayName:       func(ch *gatewayv1.Chain) string { return ch.Spec.DisplayName },
		Served: func(s *snapshot.Snapshot, id string) ([]snapshot.EnvironmentRoute, string, bool) {
			i := slices.IndexFunc(s.Chains, func(sc snapshot.ServedChain) bool { return sc.ID == id })
			if i < 0 {
				return nil, "", false
			}
			return s.Chains[i].Environments, s.Chains[i].Development, true
		},
		DeploymentJSON:  func(ch *gatewayv1.Chain, cd *gatewayv1.ChainDeployment) any { return toDeploymentJSON(ch, cd) },
		EnvironmentJSON: toEnvironmentJSON,
		Unpromotable: func(cd *gatewayv1.ChainDeployment) string {
			if cd.Status.Status.Promotable() {
				return ""
			}
			return fmt.Sprintf("Only a chain deployment that is ACTIVE or SCALED_TO_ZERO can be promoted; %s is %s.",
				cd.Name, cmp.Or(cd.Status.Status, gatewayv1.StatusDeploying))
		},
		ScaleDown: a.scaleDown,
		Activate:  a.activateEnvironment,
	})
	k.Handle(mux, "DELETE /v1/chains/{chain_id}", kit.AccessModels, a.deleteChain)
}

// Wire shapes: a chain answers as a model does (envroutes); an environment names chain_id where a model's names
// model_id, and has no autoscaling; a deployment lists its chainlets.
type (
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
)

func toDeploymentJSON(c *gatewayv1.Chain, d *gatewayv1.ChainDeployment) deploymentJSON {
	envs := c.EnvironmentsOf(d.Name)
	out := deploymentJSON{ID: d.Name, CreatedAt: envroutes.Timestamp(d.CreationTimestamp.Time), Name: d.Name, ChainID: d.Spec.ChainID,
		IsProduction: slices.Contains(envs, gatewayv1.EnvironmentProduction), IsDevelopment: slices.Contains(envs, gatewayv1.EnvironmentDevelopment),
		Status: string(cmp.Or(d.Status.Status, gatewayv1.StatusDeploying)), Entrypoint: d.Spec.Entrypoint, Chainlets: []chainletJSON{},
		Environment: envroutes.Environment(envs)}
	observed := map[string]gatewayv1.ChainletStatus{}
	for _, s := range d.Status.Chainlets {
		observed[s.Name] = s
	}
	for _, cl := range d.Spec.Chainlets {
		s := observed[cl.Name]
		out.Chainlets = append(out.Chainlets, chainletJSON{Name: cl.Name, DeploymentID: d.ChainletDeploymentName(cl.Name),
			Status: string(cmp.Or(s.Status, gatewayv1.StatusDeploying)), ActiveReplicaCount: s.ActiveReplicaCount, IsEntrypoint: cl.Name == d.Spec.Entrypoint})
	}
	return out
}

// toEnvironmentJSON describes environment name of ch; current is the chain deployment it serves when ok.
func toEnvironmentJSON(ch *gatewayv1.Chain, name string, current *gatewayv1.ChainDeployment, ok bool) any {
	out := environmentJSON{Name: name, CreatedAt: envroutes.Timestamp(ch.CreationTimestamp.Time), ChainID: ch.Name}
	if ok {
		d := toDeploymentJSON(ch, current)
		out.CurrentDeployment = &d
	}
	return out
}

// deleteChain starts the Chain's deletion and answers once this gatewayd no longer serves it: the chain leaves
// the snapshot as soon as its deletion starts, so a call right after the answer is a 404. The Chain's finalizer
// then removes its deployments, whose finalizers remove the chainlet deployments. A second DELETE is a 404 at
// once, even while a finalizer still holds the Chain (kit.LoadObject treats one being deleted as gone), and of
// concurrent DELETEs exactly one answers deleted, the others 404 (kit.DeleteOnce).
func (a *api) deleteChain(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	ch, ok := a.Load(w, r, c, authz.ActionManageModels, "")
	if !ok {
		return
	}
	id := ch.Name
	started, err := kit.DeleteOnce(r.Context(), a.Opts.Client, ch)
	if err != nil {
		kit.WriteKubeError(w, r, "delete chain", err)
		return
	}
	if !started {
		kit.NotFound(w, "Chain", id)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "delete chain", func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.Chains, func(sc snapshot.ServedChain) bool { return sc.ID == ch.Name })
	})
	envroutes.WriteDeleted(w, ch.Name)
}
