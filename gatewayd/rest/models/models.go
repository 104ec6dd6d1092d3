// Package models serves the model management routes of DESIGN.md "Models, deployments and environments": models,
// their deployments and environments, activation, promotion, retry and logs. Every write is a change to the
// Model or ModelDeployment custom resource, as kubectl would make it; the manager does the rest. Who may read or
// change a model is decided by gatewayd/authz for each call.
package models

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux *http.ServeMux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "GET /v1/models", kit.AccessModels, a.listModels)
	k.Handle(mux, "GET /v1/models/{model_id}", kit.AccessModels, a.getModel)
	k.Handle(mux, "DELETE /v1/models/{model_id}", kit.AccessModels, a.deleteModel)
	k.Handle(mux, "GET /v1/models/{model_id}/deployments", kit.AccessModels, a.listDeployments)
	k.Handle(mux, "GET /v1/models/{model_id}/deployments/{deployment_id}", kit.AccessModels, a.getDeployment)
	k.Handle(mux, "DELETE /v1/models/{model_id}/deployments/{deployment_id}", kit.AccessModels, a.deleteDeployment)
	// {deployment_id} is also "production" or "development": the deployment that environment serves. The
	// rate limits of SPEC.md's table follow the route pattern (kit.ManagementLimit).
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/activate", kit.AccessModels, a.activateDeployment(true))
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/deactivate", kit.AccessModels, a.activateDeployment(false))
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/retry", kit.AccessModels, a.retryDeployment)
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/logs", kit.AccessModels, a.deploymentLogs)
	k.Handle(mux, "GET /v1/models/{model_id}/environments", kit.AccessModels, a.listEnvironments)
	k.Handle(mux, "GET /v1/models/{model_id}/environments/{env_name}", kit.AccessModels, a.getEnvironment)
	k.Handle(mux, "POST /v1/models/{model_id}/environments/{env_name}/activate", kit.AccessModels, a.activateEnvironment(true))
	k.Handle(mux, "POST /v1/models/{model_id}/environments/{env_name}/deactivate", kit.AccessModels, a.activateEnvironment(false))
	k.Handle(mux, "POST /v1/models/{model_id}/environments/{env_name}/promote", kit.AccessModels, a.promote)
}

// Wire shapes, by the names of the API this one mirrors.
type (
	modelJSON struct {
		ID                      string  `json:"id"`
		CreatedAt               string  `json:"created_at"`
		Name                    string  `json:"name"`
		DeploymentsCount        int     `json:"deployments_count"`
		ProductionDeploymentID  *string `json:"production_deployment_id"`
		DevelopmentDeploymentID *string `json:"development_deployment_id"`
		TeamName                string  `json:"team_name"`
	}
	autoscalingJSON struct {
		MinReplica        int32 `json:"min_replica"`
		MaxReplica        int32 `json:"max_replica"`
		AutoscalingWindow int32 `json:"autoscaling_window"`
		ScaleDownDelay    int32 `json:"scale_down_delay"`
		ConcurrencyTarget int32 `json:"concurrency_target"`
	}
	deploymentJSON struct {
		ID                  string          `json:"id"`
		CreatedAt           string          `json:"created_at"`
		Name                string          `json:"name"`
		ModelID             string          `json:"model_id"`
		IsProduction        bool            `json:"is_production"`
		IsDevelopment       bool            `json:"is_development"`
		Status              string          `json:"status"`
		ActiveReplicaCount  int32           `json:"active_replica_count"`
		AutoscalingSettings autoscalingJSON `json:"autoscaling_settings"`
		Environment         *string         `json:"environment"`
	}
	environmentJSON struct {
		Name                string          `json:"name"`
		CreatedAt           string          `json:"created_at"`
		ModelID             string          `json:"model_id"`
		CurrentDeployment   *deploymentJSON `json:"current_deployment"`
		AutoscalingSettings autoscalingJSON `json:"autoscaling_settings"`
	}
	activationJSON struct {
		Success bool `json:"success"`
		NoOp    bool `json:"no_op"`
	}
	deletedJSON struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}
)

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func toModelJSON(m *gatewayv1.Model, deployments int) modelJSON {
	out := modelJSON{ID: m.Name, CreatedAt: timestamp(m.CreationTimestamp.Time), Name: cmp.Or(m.Spec.DisplayName, m.Name),
		DeploymentsCount: deployments, TeamName: m.Spec.TeamID}
	if id, _ := m.Environment(gatewayv1.EnvironmentProduction); id != "" {
		out.ProductionDeploymentID = &id
	}
	if id := m.Spec.Development; id != "" {
		out.DevelopmentDeploymentID = &id
	}
	return out
}

// autoscalingOf is what a deployment's autoscaling amounts to, defaults filled in (DESIGN.md "Details pinned").
func autoscalingOf(a *gatewayv1.Autoscaling) autoscalingJSON {
	out := autoscalingJSON{MinReplica: 0, MaxReplica: 1, ConcurrencyTarget: 1, ScaleDownDelay: 900, AutoscalingWindow: 60}
	if a == nil {
		return out
	}
	set := func(dst *int32, src *int32) {
		if src != nil {
			*dst = *src
		}
	}
	set(&out.MinReplica, a.MinReplica)
	set(&out.MaxReplica, a.MaxReplica)
	set(&out.ConcurrencyTarget, a.ConcurrencyTarget)
	set(&out.ScaleDownDelay, a.ScaleDownDelaySeconds)
	return out
}

func toDeploymentJSON(m *gatewayv1.Model, d *gatewayv1.ModelDeployment) deploymentJSON {
	envs := m.EnvironmentsOf(d.Name)
	out := deploymentJSON{ID: d.Name, CreatedAt: timestamp(d.CreationTimestamp.Time), Name: d.Name, ModelID: d.Spec.ModelID,
		IsProduction: slices.Contains(envs, gatewayv1.EnvironmentProduction), IsDevelopment: slices.Contains(envs, gatewayv1.EnvironmentDevelopment),
		Status: string(cmp.Or(d.Status.Status, gatewayv1.StatusDeploying)), ActiveReplicaCount: d.Status.ActiveReplicaCount,
		AutoscalingSettings: autoscalingOf(d.Spec.Autoscaling)}
	for _, e := range envs {
		if e != gatewayv1.EnvironmentDevelopment {
			out.Environment = &e
			break
		}
	}
	return out
}

// loadModel reads the Model of path parameter model_id and asks authz whether c may read it (for a write:
// manage it); a model c may not see is 404.
func (a *api) loadModel(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action, env string) (*gatewayv1.Model, bool) {
	m := &gatewayv1.Model{}
	if !a.LoadDecided(w, r, c, "model_id", "Model", m, func() string { return m.Spec.TeamID }, action, env) {
		return nil, false
	}
	return m, true
}

// deploymentsOf lists the deployments of model m that are not being deleted, by name.
func (a *api) deploymentsOf(r *http.Request, c auth.Caller, model string) ([]gatewayv1.ModelDeployment, error) {
	var list gatewayv1.ModelDeploymentList
	if err := a.ListReader().List(r.Context(), &list, client.InNamespace(c.Namespace),
		client.MatchingFields{gatewayv1.FieldDeploymentModel: model}); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(list.Items, func(d gatewayv1.ModelDeployment) bool { return d.DeletionTimestamp != nil })
	slices.SortFunc(out, func(x, y gatewayv1.ModelDeployment) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// loadModelWithDeployments is loadModel for a read, with the model's deployments.
func (a *api) loadModelWithDeployments(w http.ResponseWriter, r *http.Request, c auth.Caller, env string) (*gatewayv1.Model, []gatewayv1.ModelDeployment, bool) {
	m, ok := a.loadModel(w, r, c, authz.ActionListModels, env)
	if !ok {
		return nil, nil, false
	}
	deps, err := a.deploymentsOf(r, c, m.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list deployments", err)
		return nil, nil, false
	}
	return m, deps, true
}

func (a *api) listModels(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var models gatewayv1.ModelList
	if err := a.ListReader().List(r.Context(), &models, client.InNamespace(c.Namespace)); err != nil {
		kit.WriteKubeError(w, r, "list models", err)
		return
	}
	var deps gatewayv1.ModelDeploymentList
	if err := a.ListReader().List(r.Context(), &deps, client.InNamespace(c.Namespace)); err != nil {
		kit.WriteKubeError(w, r, "list deployments", err)
		return
	}
	count := map[string]int{}
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil {
			count[d.Spec.ModelID]++
		}
	}
	out := []modelJSON{}
	p := c.Principal()
	for i := range models.Items {
		m := &models.Items[i]
		if m.DeletionTimestamp != nil || !authz.Decide(p, authz.ActionListModels, authz.Resource{TeamID: m.Spec.TeamID, ModelID: m.Name}).Allowed {
			continue
		}
		out = append(out, toModelJSON(m, count[m.Name]))
	}
	slices.SortFunc(out, func(x, y modelJSON) int { return strings.Compare(x.ID, y.ID) })
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"models": out})
}

func (a *api) getModel(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	if m, deps, ok := a.loadModelWithDeployments(w, r, c, ""); ok {
		httperr.WriteJSON(w, http.StatusOK, toModelJSON(m, len(deps)))
	}
}

// deleteModel deletes the Model and then its deployments; a second DELETE is a 404 at once, even while a
// finalizer still holds an object (kit.LoadObject treats one being deleted as gone).
func (a *api) deleteModel(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	m, ok := a.loadModel(w, r, c, authz.ActionManageModels, "")
	if !ok {
		return
	}
	if err := a.Opts.Client.Delete(r.Context(), m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		kit.WriteKubeError(w, r, "delete model", err)
		return
	}
	deps, err := a.deploymentsOf(r, c, m.Name)
	if err == nil {
		for i := range deps {
			if derr := a.Opts.Client.Delete(r.Context(), &deps[i]); client.IgnoreNotFound(derr) != nil {
				err = derr
			}
		}
	}
	if err != nil {
		kit.WriteKubeError(w, r, "delete the model's deployments", err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, deletedJSON{ID: m.Name, Deleted: true})
}
