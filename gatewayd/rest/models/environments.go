package models

import (
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

// environmentNames are the environments of m in spec order, "development" last when m has one.
func environmentNames(m *gatewayv1.Model) []string {
	out := make([]string, 0, len(m.Spec.Environments)+1)
	for _, e := range m.Spec.Environments {
		out = append(out, e.Name)
	}
	if m.Spec.Development != "" {
		out = append(out, gatewayv1.EnvironmentDevelopment)
	}
	return out
}

// toEnvironmentJSON describes environment name of m; deps are m's deployments.
func toEnvironmentJSON(m *gatewayv1.Model, name string, deps []gatewayv1.ModelDeployment) environmentJSON {
	out := environmentJSON{Name: name, CreatedAt: timestamp(m.CreationTimestamp.Time), ModelID: m.Name}
	served, _ := m.Environment(name)
	if i := slices.IndexFunc(deps, func(d gatewayv1.ModelDeployment) bool { return d.Name == served }); served != "" && i >= 0 {
		d := toDeploymentJSON(m, &deps[i])
		out.CurrentDeployment = &d
		out.AutoscalingSettings = d.AutoscalingSettings
	} else {
		out.AutoscalingSettings = autoscalingOf(nil)
	}
	for _, e := range m.Spec.Environments {
		if e.Name == name && e.Autoscaling != nil {
			out.AutoscalingSettings = autoscalingOf(e.Autoscaling)
		}
	}
	return out
}

// loadEnvironment reads the model and checks that it has environment env_name; c must be allowed action on it.
func (a *api) loadEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action) (*gatewayv1.Model, string, bool) {
	env := r.PathValue("env_name")
	m, ok := a.loadModel(w, r, c, action, env)
	if !ok {
		return nil, "", false
	}
	if _, ok := m.Environment(env); !ok {
		httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("Model %q has no environment %q.", m.Name, env),
			map[string]string{"id": env})
		return nil, "", false
	}
	return m, env, true
}

func (a *api) listEnvironments(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	m, deps, ok := a.loadModelWithDeployments(w, r, c, "")
	if !ok {
		return
	}
	out := []environmentJSON{}
	for _, name := range environmentNames(m) {
		out = append(out, toEnvironmentJSON(m, name, deps))
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"environments": out})
}

func (a *api) getEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	m, env, ok := a.loadEnvironment(w, r, c, authz.ActionListModels)
	if !ok {
		return
	}
	deps, err := a.deploymentsOf(r, c, m.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list deployments", err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toEnvironmentJSON(m, env, deps))
}

// activateEnvironment activates or deactivates the deployment the environment serves.
func (a *api) activateEnvironment(active bool) kit.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) {
		m, env, ok := a.loadEnvironment(w, r, c, authz.ActionManageModels)
		if !ok {
			return
		}
		served, _ := m.Environment(env)
		if served == "" {
			httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("No deployment is promoted to environment %q yet.", env),
				map[string]string{"id": env})
			return
		}
		r.SetPathValue("deployment_id", served)
		if d, ok := a.loadDeployment(w, r, c, m); ok {
			a.setActive(w, r, d, active)
		}
	}
}

type promoteRequest struct {
	DeploymentID                string `json:"deployment_id"`
	ScaleDownPreviousDeployment *bool  `json:"scale_down_previous_deployment"`
}

// promote points an environment at another deployment of the model in one patch of the Model, waits until this
// gatewayd routes by it, and then scales the previous deployment to zero (unless asked not to, or it still serves
// another environment). Calls never fail on the way: the previous deployment serves until the pointer moved.
func (a *api) promote(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req promoteRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.DeploymentID == "" || !kit.ValidName(req.DeploymentID) {
		kit.BadRequest(w, "deployment_id", "deployment_id is required: the id of a deployment of this model.")
		return
	}
	m, env, ok := a.loadEnvironment(w, r, c, authz.ActionManageModels)
	if !ok {
		return
	}
	target := &gatewayv1.ModelDeployment{}
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: req.DeploymentID}, target)
	if apierrors.IsNotFound(err) || (err == nil && (target.Spec.ModelID != m.Name || target.DeletionTimestamp != nil)) {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("Model %q has no deployment %q.", m.Name, req.DeploymentID))
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get deployment", err)
		return
	}
	if !target.Status.Status.Promotable() || !target.Spec.IsActive() {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("Only an active deployment that is ACTIVE or SCALED_TO_ZERO can be promoted; %s is %s.",
			target.Name, target.Status.Status))
		return
	}
	previous, err := a.pointEnvironment(r, m, env, target.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "promote", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "promote", func(s *snapshot.Snapshot) bool {
		i := slices.IndexFunc(s.Models, func(sm snapshot.ServedModel) bool { return sm.ID == m.Name })
		return i >= 0 && servedIn(&s.Models[i], env) == target.Name
	})
	if previous != "" && previous != target.Name && (req.ScaleDownPreviousDeployment == nil || *req.ScaleDownPreviousDeployment) &&
		len(m.EnvironmentsOf(previous)) == 0 {
		if err := a.scaleDown(r, c, previous); err != nil {
			kit.WriteKubeError(w, r, "scale down the previous deployment", err)
			return
		}
	}
	deps, err := a.deploymentsOf(r, c, m.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list deployments", err)
		return
	}
	if !slices.ContainsFunc(deps, func(d gatewayv1.ModelDeployment) bool { return d.Name == target.Name }) {
		deps = append(deps, *target)
	}
	httperr.WriteJSON(w, http.StatusOK, toEnvironmentJSON(m, env, deps))
}

// pointEnvironment sets environment env of m to deployment, retrying on conflicts with a fresh Model, and returns
// the deployment it pointed at before. m is left as written.
func (a *api) pointEnvironment(r *http.Request, m *gatewayv1.Model, env, deployment string) (string, error) {
	var previous string
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(m), m); err != nil {
			return err
		}
		previous, _ = m.Environment(env)
		if env == gatewayv1.EnvironmentDevelopment {
			m.Spec.Development = deployment
		}
		for i := range m.Spec.Environments {
			if m.Spec.Environments[i].Name == env {
				m.Spec.Environments[i].Deployment = deployment
			}
		}
		return a.Opts.Client.Update(r.Context(), m)
	})
	return previous, err
}

// scaleDown asks the manager to scale deployment to zero.
func (a *api) scaleDown(r *http.Request, c auth.Caller, deployment string) error {
	return kit.UpdateOnConflict(func() error {
		d := &gatewayv1.ModelDeployment{}
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: deployment}, d); err != nil {
			return client.IgnoreNotFound(err)
		}
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[gatewayv1.AnnotationScaledDownAt] = a.Opts.Clock().UTC().Format(time.RFC3339Nano)
		return a.Opts.Client.Update(r.Context(), d)
	})
}

// servedIn is the deployment environment env of a snapshot model points at.
func servedIn(m *snapshot.ServedModel, env string) string {
	if env == gatewayv1.EnvironmentDevelopment {
		return m.Development
	}
	for _, e := range m.Environments {
		if e.Name == env {
			return e.Deployment
		}
	}
	return ""
}
