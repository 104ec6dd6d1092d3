package models

import (
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// environmentPointerJSON is one environment of a model and the deployment it points at ("" until one is
// promoted).
type environmentPointerJSON struct {
	Name       string `json:"name"`
	Deployment string `json:"deployment"`
}

// createModelRequest is the body of POST /v1/models. Environments default to production alone.
type createModelRequest struct {
	ID           string                   `json:"id"`
	DisplayName  string                   `json:"display_name"`
	TeamID       string                   `json:"team_id"`
	Environments []environmentPointerJSON `json:"environments"`
	Development  string                   `json:"development"`
}

// patchModelRequest is the body of PATCH /v1/models/{model_id}: each field given replaces what the Model has. An
// environment given points at its deployment (a new name adds the environment); the environments not given stay.
type patchModelRequest struct {
	DisplayName  *string                   `json:"display_name"`
	Environments *[]environmentPointerJSON `json:"environments"`
	Development  *string                   `json:"development"`
}

// createModel is POST /v1/models: a Model with its environments, display name and team, as kubectl would create
// it, so the CRD's CEL rules and the Model webhook refuse what they refuse anywhere (kit.WriteKubeError names the
// field in the API's words). The caller must be allowed to manage models of the team, in every environment given.
func (a *api) createModel(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req createModelRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.ID == "" {
		kit.BadRequest(w, "id", "id is required.")
		return
	}
	if !kit.ValidName(req.ID) {
		kit.BadRequest(w, "id", "id must be a Kubernetes object name: at most 253 lowercase letters, digits, '-' and '.', beginning and ending with a letter or digit.")
		return
	}
	if req.Environments == nil {
		req.Environments = []environmentPointerJSON{{Name: gatewayv1.EnvironmentProduction}}
	}
	m := &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: req.ID},
		Spec: gatewayv1.ModelSpec{DisplayName: req.DisplayName, TeamID: req.TeamID, Development: req.Development,
			Environments: make([]gatewayv1.ModelEnvironment, 0, len(req.Environments))},
	}
	for _, e := range req.Environments {
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: e.Name, Deployment: e.Deployment})
	}
	if !mayManage(w, c, m, environmentNames(m)) {
		return
	}
	if err := a.Opts.Client.Create(r.Context(), m); err != nil {
		kit.WriteKubeError(w, r, "create model", err)
		return
	}
	// The model is served by this replica, so by every replica once this answer is sent (a replica that does not
	// serve it yet holds a call to it: docs/limits.md "Read-your-writes on every replica"), and the list right after
	// it shows it.
	a.awaitServed(r, c.Namespace, m)
	a.AwaitListed(r.Context(), m)
	a.WriteOwner(w, http.StatusCreated, m, 0)
}

// patchModel is PATCH /v1/models/{model_id}: the display name, environment pointers and development pointer, in
// one update of the Model under optimistic concurrency. Pointing an environment elsewhere is the change promote
// makes, without promote's checks of the deployment's state or its scale-down of the one replaced: the Model
// webhook still refuses a pointer at a deployment of another model or at none.
func (a *api) patchModel(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req patchModelRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.DisplayName == nil && req.Environments == nil && req.Development == nil {
		kit.BadRequest(w, "display_name", "Give display_name, environments and/or development: at least one is required.")
		return
	}
	m, ok := a.Load(w, r, c, authz.ActionManageModels, "")
	if !ok {
		return
	}
	changed := []string{}
	if req.Environments != nil {
		for _, e := range *req.Environments {
			changed = append(changed, e.Name)
		}
	}
	if req.Development != nil {
		changed = append(changed, gatewayv1.EnvironmentDevelopment)
	}
	if !mayManage(w, c, m, changed) {
		return
	}
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(m), m); err != nil {
			return err
		}
		if req.DisplayName != nil {
			m.Spec.DisplayName = *req.DisplayName
		}
		if req.Development != nil {
			m.Spec.Development = *req.Development
		}
		if req.Environments != nil {
			for _, e := range *req.Environments {
				if _, ok := m.Environment(e.Name); ok && e.Name != gatewayv1.EnvironmentDevelopment {
					m.PointEnvironment(e.Name, e.Deployment)
					continue
				}
				m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: e.Name, Deployment: e.Deployment})
			}
		}
		return a.Opts.Client.Update(r.Context(), m)
	})
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Model", m.Name)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "update model", err)
		return
	}
	a.awaitServed(r, c.Namespace, m)
	a.AwaitListed(r.Context(), m)
	deps, err := a.Deployments(r, c, m.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list deployments", err)
		return
	}
	a.WriteOwner(w, http.StatusOK, m, len(deps))
}

// environmentNames are the environments of m a write touches, development included when it is set.
func environmentNames(m *gatewayv1.Model) []string {
	ps := m.EnvironmentPointers()
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// mayManage asks authz.Decide whether c may manage model m in each of envs, answering the first refusal (403).
func mayManage(w http.ResponseWriter, c auth.Caller, m *gatewayv1.Model, envs []string) bool {
	for _, env := range envs {
		dec := authz.Decide(c.Principal(), authz.ActionManageModels, authz.Resource{TeamID: m.Spec.TeamID, ModelID: m.Name, Environment: env})
		if !dec.Allowed {
			kit.Forbidden(w, c, dec)
			return false
		}
	}
	return true
}

// awaitServed waits, up to the read-your-writes timeout, until the snapshot this replica serves has model m with
// the environment and development pointers written.
func (a *api) awaitServed(r *http.Request, ns string, m *gatewayv1.Model) {
	a.AwaitSnapshot(r.Context(), ns, "model "+m.Name, func(s *snapshot.Snapshot) bool {
		i, ok := slices.BinarySearchFunc(s.Models, m.Name, func(sm snapshot.ServedModel, id string) int { return strings.Compare(sm.ID, id) })
		if !ok || s.Models[i].Development != m.Spec.Development || len(s.Models[i].Environments) != len(m.Spec.Environments) {
			return false
		}
		for j, e := range m.Spec.Environments {
			if s.Models[i].Environments[j] != (snapshot.EnvironmentRoute{Name: e.Name, Deployment: e.Deployment}) {
				return false
			}
		}
		return true
	})
}
