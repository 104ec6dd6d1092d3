// Package models serves the model management routes of docs/rest-api.md "Models, deployments and environments":
// models, their deployments and environments, activation, promotion, retry and logs. The routes a chain has too (the
// list, one model, its deployments, its environments) are gatewayd/rest/envroutes over the Kind below; this
// package keeps what is a model's alone. Every write is a change to the Model or ModelDeployment custom
// resource, as kubectl would make it; the manager does the rest. Who may read or change a model is decided by
// gatewayd/authz for each call.
package models

import (
	"cmp"
	"context"
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
	*envroutes.Routes[*gatewayv1.Model, *gatewayv1.ModelDeployment]
}

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{Kit: k}
	a.Routes = envroutes.Register(mux, k, &envroutes.Kind[*gatewayv1.Model, *gatewayv1.ModelDeployment]{
		Kind: "Model", Plural: "models", Param: "model_id", Deployment: "deployment",
		NewOwner:          func() *gatewayv1.Model { return &gatewayv1.Model{} },
		NewDeployment:     func() *gatewayv1.ModelDeployment { return &gatewayv1.ModelDeployment{} },
		NewOwnerList:      func() client.ObjectList { return &gatewayv1.ModelList{} },
		NewDeploymentList: func() client.ObjectList { return &gatewayv1.ModelDeploymentList{} },
		OwnerField:        gatewayv1.FieldDeploymentModel,
		OwnerOf:           func(d *gatewayv1.ModelDeployment) string { return d.Spec.ModelID },
		DisplayName:       func(m *gatewayv1.Model) string { return m.Spec.DisplayName },
		Served: func(s *snapshot.Snapshot, id string) ([]snapshot.EnvironmentRoute, string, bool) {
			i := slices.IndexFunc(s.Models, func(sm snapshot.ServedModel) bool { return sm.ID == id })
			if i < 0 {
				return nil, "", false
			}
			return s.Models[i].Environments, s.Models[i].Development, true
		},
		DeploymentJSON:  func(m *gatewayv1.Model, d *gatewayv1.ModelDeployment) any { return toDeploymentJSON(m, d) },
		EnvironmentJSON: toEnvironmentJSON,
		Unpromotable: func(d *gatewayv1.ModelDeployment) string {
			if d.Status.Status.Promotable() && d.Spec.IsActive() {
				return ""
			}
			return fmt.Sprintf("Only an active deployment that is ACTIVE or SCALED_TO_ZERO can be promoted; %s is %s.", d.Name, d.Status.Status)
		},
		ScaleDown: func(ctx context.Context, cl client.Client, ns, name, at string) error {
			return envroutes.ScaleDownAt(ctx, cl, at, client.ObjectKey{Namespace: ns, Name: name})
		},
		Activate: a.activateEnvironment,
	})
	k.Handle(mux, "POST /v1/models", kit.AccessModels, a.createModel)
	k.Handle(mux, "PATCH /v1/models/{model_id}", kit.AccessModels, a.patchModel)
	k.Handle(mux, "DELETE /v1/models/{model_id}", kit.AccessModels, a.deleteModel)
	k.Handle(mux, "GET /v1/models/{model_id}/deployments/{deployment_id}", kit.AccessModels, a.getDeployment)
	k.Handle(mux, "DELETE /v1/models/{model_id}/deployments/{deployment_id}", kit.AccessModels, a.deleteDeployment)
	// {deployment_id} is also "production" or "development": the deployment that environment serves. The
	// management rate-limit table counts those two apart from a deployment id (kit.ManagementRow).
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/activate", kit.AccessModels, a.activateDeployment(true))
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/deactivate", kit.AccessModels, a.activateDeployment(false))
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/retry", kit.AccessModels, a.retryDeployment)
	k.Handle(mux, "POST /v1/models/{model_id}/deployments/{deployment_id}/logs", kit.AccessModels, a.deploymentLogs)
}

// Wire shapes, by the names of the API this one mirrors.
type (
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
)

// autoscalingOf is what a deployment's autoscaling amounts to, defaults filled in (docs/operations.md "Scale to
// zero: the autoscaler").
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
	return deploymentJSON{ID: d.Name, CreatedAt: envroutes.Timestamp(d.CreationTimestamp.Time), Name: d.Name, ModelID: d.Spec.ModelID,
		IsProduction: slices.Contains(envs, gatewayv1.EnvironmentProduction), IsDevelopment: slices.Contains(envs, gatewayv1.EnvironmentDevelopment),
		Status: string(cmp.Or(d.Status.Status, gatewayv1.StatusDeploying)), ActiveReplicaCount: d.Status.ActiveReplicaCount,
		AutoscalingSettings: autoscalingOf(d.Spec.Autoscaling), Environment: envroutes.Environment(envs)}
}

// toEnvironmentJSON describes environment name of m; current is the deployment it serves when ok. The
// environment's own autoscaling, when it has one, overrides the deployment's.
func toEnvironmentJSON(m *gatewayv1.Model, name string, current *gatewayv1.ModelDeployment, ok bool) any {
	out := environmentJSON{Name: name, CreatedAt: envroutes.Timestamp(m.CreationTimestamp.Time), ModelID: m.Name,
		AutoscalingSettings: autoscalingOf(nil)}
	if ok {
		d := toDeploymentJSON(m, current)
		out.CurrentDeployment = &d
		out.AutoscalingSettings = d.AutoscalingSettings
	}
	for _, e := range m.Spec.Environments {
		if e.Name == name && e.Autoscaling != nil {
			out.AutoscalingSettings = autoscalingOf(e.Autoscaling)
		}
	}
	return out
}

// activateEnvironment activates or deactivates the deployment the environment serves.
func (a *api) activateEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller, m *gatewayv1.Model, _, served string, active bool) {
	r.SetPathValue("deployment_id", served)
	if d, ok := a.loadDeployment(w, r, c, m); ok {
		a.setActive(w, r, d, active)
	}
}

// deleteModel deletes the Model and then its deployments, and answers once the list routes no longer show them;
// a second DELETE is a 404 at once, even while a finalizer still holds an object (kit.LoadObject treats one
// being deleted as gone).
func (a *api) deleteModel(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	m, ok := a.Load(w, r, c, authz.ActionManageModels, "")
	if !ok {
		return
	}
	if err := a.Opts.Client.Delete(r.Context(), m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		kit.WriteKubeError(w, r, "delete model", err)
		return
	}
	deps, err := a.Deployments(r, c, m.Name)
	if err == nil {
		for _, d := range deps {
			if derr := a.Opts.Client.Delete(r.Context(), d); client.IgnoreNotFound(derr) != nil {
				err = derr
			}
		}
	}
	if err != nil {
		kit.WriteKubeError(w, r, "delete the model's deployments", err)
		return
	}
	a.AwaitUnlisted(r.Context(), m)
	for _, d := range deps {
		a.AwaitUnlisted(r.Context(), d)
	}
	envroutes.WriteDeleted(w, m.Name)
}
