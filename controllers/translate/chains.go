package translate

import (
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// translateChains lists the chains that are not being deleted, each with its environments in spec order, and
// the chain deployments of those chains that are not being deleted, each with the ModelDeployment of its
// entrypoint. A chain being deleted leaves the snapshot at once, with its deployments, so its routes answer 404
// while finalizers still clean up. Both lists are nil when there are no chains, so a workspace without chains
// encodes as before.
func translateChains(chains []gatewayv1.Chain, deployments []gatewayv1.ChainDeployment) ([]snapshot.ServedChain, []snapshot.ChainDeployment) {
	var out []snapshot.ServedChain
	served := map[string]bool{}
	for i := range chains {
		c := &chains[i]
		if c.DeletionTimestamp != nil {
			continue
		}
		served[c.Name] = true
		sc := snapshot.ServedChain{ID: c.Name, TeamID: c.Spec.TeamID, Development: c.Spec.Development,
			Environments: make([]snapshot.EnvironmentRoute, len(c.Spec.Environments))}
		for j, e := range c.Spec.Environments {
			sc.Environments[j] = snapshot.EnvironmentRoute{Name: e.Name, Deployment: e.Deployment}
		}
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b snapshot.ServedChain) int { return strings.Compare(a.ID, b.ID) })
	var deps []snapshot.ChainDeployment
	for i := range deployments {
		cd := &deployments[i]
		if cd.DeletionTimestamp != nil || !served[cd.Spec.ChainID] {
			continue
		}
		deps = append(deps, snapshot.ChainDeployment{ID: cd.Name, ChainID: cd.Spec.ChainID,
			Entrypoint: cd.ChainletDeploymentName(cd.Spec.Entrypoint)})
	}
	slices.SortFunc(deps, func(a, b snapshot.ChainDeployment) int { return strings.Compare(a.ID, b.ID) })
	return out, deps
}
