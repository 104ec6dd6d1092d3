package models

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/envroutes"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// resolveDeployment names the deployment that path parameter deployment_id means: "production" and
// "development" are the deployments those environments serve. It answers 404 when there is none.
func resolveDeployment(w http.ResponseWriter, r *http.Request, m *gatewayv1.Model) (string, bool) {
	id := r.PathValue("deployment_id")
	if id == gatewayv1.EnvironmentProduction || id == gatewayv1.EnvironmentDevelopment {
		served, _ := m.Environment(id)
		if served == "" {
			httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound,
				fmt.Sprintf("Model %q has no %s deployment.", m.Name, id), map[string]string{"id": id})
			return "", false
		}
		return served, true
	}
	return id, true
}

// loadDeployment reads the deployment named by deployment_id of model m, straight from the API server, so a
// write that follows carries its current resourceVersion.
func (a *api) loadDeployment(w http.ResponseWriter, r *http.Request, c auth.Caller, m *gatewayv1.Model) (*gatewayv1.ModelDeployment, bool) {
	id, ok := resolveDeployment(w, r, m)
	if !ok {
		return nil, false
	}
	if !kit.ValidName(id) {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("%q is not a valid deployment id.", id))
		return nil, false
	}
	d := &gatewayv1.ModelDeployment{}
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: id}, d)
	if apierrors.IsNotFound(err) || (err == nil && (d.DeletionTimestamp != nil || d.Spec.ModelID != m.Name)) {
		kit.NotFound(w, "Deployment", id)
		return nil, false
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get deployment", err)
		return nil, false
	}
	return d, true
}

// loadModelDeployment is loadModel for action, then loadDeployment.
func (a *api) loadModelDeployment(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action) (*gatewayv1.Model, *gatewayv1.ModelDeployment, bool) {
	m, ok := a.Load(w, r, c, action, "")
	if !ok {
		return nil, nil, false
	}
	d, ok := a.loadDeployment(w, r, c, m)
	return m, d, ok
}

func (a *api) getDeployment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	if m, d, ok := a.loadModelDeployment(w, r, c, authz.ActionListModels); ok {
		httperr.WriteJSON(w, http.StatusOK, toDeploymentJSON(m, d))
	}
}

// deleteDeployment deletes a deployment, and answers once the list routes no longer show it; the admission
// webhook refuses one that an environment still serves.
func (a *api) deleteDeployment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	_, d, ok := a.loadModelDeployment(w, r, c, authz.ActionManageModels)
	if !ok {
		return
	}
	if err := a.Opts.Client.Delete(r.Context(), d, client.Preconditions{UID: &d.UID}); client.IgnoreNotFound(err) != nil {
		kit.WriteKubeError(w, r, "delete deployment", err)
		return
	}
	a.AwaitUnlisted(r.Context(), d)
	envroutes.WriteDeleted(w, d.Name)
}

func (a *api) activateDeployment(active bool) kit.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) {
		if _, d, ok := a.loadModelDeployment(w, r, c, authz.ActionManageModels); ok {
			a.setActive(w, r, d, active)
		}
	}
}

// setActive sets spec.active of d. The write carries the resourceVersion d was read at, so of concurrent callers
// exactly one changes it and answers no_op false; the others, finding on their fresh read that it is already in
// the asked state, answer no_op true. Scaled to zero counts as active: activation is not a wake. A change answers
// once the list routes show it.
func (a *api) setActive(w http.ResponseWriter, r *http.Request, d *gatewayv1.ModelDeployment, active bool) {
	changed, err := kit.SetActive(r.Context(), a.Opts.Client, d, active)
	if err != nil {
		kit.WriteKubeError(w, r, "update deployment", err)
		return
	}
	if changed {
		// Served as written by this replica, so by every replica once answered (docs/limits.md "Read-your-writes on
		// every replica").
		a.AwaitSnapshot(r.Context(), d.Namespace, "activate deployment "+d.Name, func(s *snapshot.Snapshot) bool {
			i, ok := slices.BinarySearchFunc(s.Deployments, d.Name, func(sd snapshot.Deployment, id string) int { return strings.Compare(sd.ID, id) })
			return ok && s.Deployments[i].Active == active
		})
		a.AwaitListed(r.Context(), d)
	}
	envroutes.WriteActivation(w, changed)
}

// retryDeployment redeploys a failed deployment by bumping spec.retryNonce.
func (a *api) retryDeployment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	m, d, ok := a.loadModelDeployment(w, r, c, authz.ActionManageModels)
	if !ok {
		return
	}
	type retryJSON struct {
		Retried    bool           `json:"retried"`
		Reason     string         `json:"reason"`
		Deployment deploymentJSON `json:"deployment"`
	}
	if !d.Status.Status.Retryable() {
		httperr.WriteJSON(w, http.StatusOK, retryJSON{Retried: false, Deployment: toDeploymentJSON(m, d),
			Reason: fmt.Sprintf("Only a deployment in DEPLOY_FAILED, BUILD_FAILED or FAILED can be retried; this one is %s.", cmp.Or(d.Status.Status, gatewayv1.StatusDeploying))})
		return
	}
	d.Spec.RetryNonce++
	if err := a.Opts.Client.Update(r.Context(), d); err != nil {
		if apierrors.IsConflict(err) {
			err = kit.ErrBusy
		}
		kit.WriteKubeError(w, r, "retry deployment", err)
		return
	}
	a.AwaitListed(r.Context(), d)
	httperr.WriteJSON(w, http.StatusOK, retryJSON{Retried: true, Reason: "The deployment is being deployed again.", Deployment: toDeploymentJSON(m, d)})
}
