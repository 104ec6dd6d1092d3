package chains

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/rest/envroutes"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// What an environment of a chain touches: every chainlet deployment of the chain deployment it serves.

// chainlets reads the chainlet deployments of chain deployment cd, the entrypoint's first.
func (a *api) chainlets(ctx context.Context, ns string, cd *gatewayv1.ChainDeployment) ([]*gatewayv1.ModelDeployment, error) {
	names := []string{cd.ChainletDeploymentName(cd.Spec.Entrypoint)}
	for _, cl := range cd.Spec.Chainlets {
		if cl.Name != cd.Spec.Entrypoint {
			names = append(names, cd.ChainletDeploymentName(cl.Name))
		}
	}
	out := make([]*gatewayv1.ModelDeployment, 0, len(names))
	for _, n := range names {
		md := &gatewayv1.ModelDeployment{}
		err := a.Opts.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, md)
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
func (a *api) activateEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller, _ *gatewayv1.Chain, env, served string, active bool) {
	cd := &gatewayv1.ChainDeployment{}
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: served}, cd)
	if apierrors.IsNotFound(err) || (err == nil && cd.DeletionTimestamp != nil) {
		a.NotPromoted(w, env)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get chain deployment", err)
		return
	}
	mds, err := a.chainlets(r.Context(), c.Namespace, cd)
	if err != nil {
		kit.WriteKubeError(w, r, "get chainlet deployments", err)
		return
	}
	// no_op is the entrypoint's: of concurrent callers exactly one changes it. The others still bring every
	// other chainlet to the asked state, which also heals a call that stopped half way.
	changedEntrypoint := false
	for i, md := range mds {
		changed, err := kit.SetActive(r.Context(), a.Opts.Client, md, active)
		if err != nil {
			kit.WriteKubeError(w, r, "update chainlet deployment", err)
			return
		}
		if i == 0 && md.Name == cd.ChainletDeploymentName(cd.Spec.Entrypoint) {
			changedEntrypoint = changed
		}
	}
	envroutes.WriteActivation(w, changedEntrypoint)
}

// scaleDown asks the manager to scale every chainlet of chain deployment name to zero.
func (a *api) scaleDown(ctx context.Context, cl client.Client, ns, name, at string) error {
	cd := &gatewayv1.ChainDeployment{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cd); err != nil {
		return client.IgnoreNotFound(err)
	}
	mds, err := a.chainlets(ctx, ns, cd)
	if err != nil {
		return err
	}
	keys := make([]client.ObjectKey, len(mds))
	for i, md := range mds {
		keys[i] = client.ObjectKeyFromObject(md)
	}
	return envroutes.ScaleDownAt(ctx, cl, at, keys...)
}
