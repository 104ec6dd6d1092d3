package models

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

// aliasedFields are the members a model's writes take under two names: the name a model's answer gives it
// (name, development_deployment_id), so that what a client read it can write back, and the name the writes took
// first (display_name, development), kept.
type aliasedFields struct {
	Name                    *string `json:"name"`
	DisplayName             *string `json:"display_name"`
	DevelopmentDeploymentID *string `json:"development_deployment_id"`
	Development             *string `json:"development"`
}

// alias is one member of aliasedFields: its answer's name, the older name, and where the Model keeps it.
type alias struct {
	name, older, path string
	value, olderValue *string
}

func (f *aliasedFields) aliases() []alias {
	return []alias{
		{"name", "display_name", "spec.displayName", f.Name, f.DisplayName},
		{"development_deployment_id", "development", "spec.development", f.DevelopmentDeploymentID, f.Development},
	}
}

// resolve answers 400 naming the older name when both names of a member are given with different values, and
// otherwise returns the value of each member (nil when neither name is given) and, for a refusal of the API
// server, the path of the Model renamed to the name the client sent (sentAs).
func (f *aliasedFields) resolve(w http.ResponseWriter) (displayName, development *string, sent map[string]string, ok bool) {
	sent = map[string]string{}
	var values []*string
	for _, a := range f.aliases() {
		v := a.value
		switch {
		case a.value != nil && a.olderValue != nil && *a.value != *a.olderValue:
			kit.BadRequest(w, a.older, fmt.Sprintf("%s and %s are one field under two names and differ; give one of them.", a.name, a.older))
			return nil, nil, nil, false
		case a.value != nil:
			sent[a.path] = a.name
		default:
			v = a.olderValue
			sent[a.path] = a.older
		}
		values = append(values, v)
	}
	return values[0], values[1], sent, true
}

// createModelRequest is the body of POST /v1/models. Environments default to production alone.
type createModelRequest struct {
	ID           string                   `json:"id"`
	TeamID       string                   `json:"team_id"`
	Environments []environmentPointerJSON `json:"environments"`
	aliasedFields
}

// patchModelRequest is the body of PATCH /v1/models/{model_id}: each field given replaces what the Model has. An
// environment given points at its deployment (a new name adds the environment); the environments not given stay.
type patchModelRequest struct {
	Environments *[]environmentPointerJSON `json:"environments"`
	aliasedFields
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
	displayName, development, sent, ok := req.resolve(w)
	if !ok {
		return
	}
	if req.Environments == nil {
		req.Environments = []environmentPointerJSON{{Name: gatewayv1.EnvironmentProduction}}
	}
	m := &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: req.ID},
		Spec: gatewayv1.ModelSpec{DisplayName: ptr.Deref(displayName, ""), TeamID: req.TeamID, Development: ptr.Deref(development, ""),
			Environments: make([]gatewayv1.ModelEnvironment, 0, len(req.Environments))},
	}
	for _, e := range req.Environments {
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: e.Name, Deployment: e.Deployment})
	}
	if !mayManage(w, c, m, environmentNames(m)) || !a.teamExists(w, r, c, req.TeamID) {
		return
	}
	if err := a.Opts.Client.Create(r.Context(), m); err != nil {
		kit.WriteKubeError(w, r, "create model", sentAs(err, sent))
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
	displayName, development, sent, ok := req.resolve(w)
	if !ok {
		return
	}
	if displayName == nil && req.Environments == nil && development == nil {
		kit.BadRequest(w, "name", "Give name, environments and/or development_deployment_id: at least one is required.")
		return
	}
	if req.Environments != nil {
		for i, e := range *req.Environments {
			if e.Deployment == "" {
				f := fmt.Sprintf("environments[%d].deployment", i)
				kit.BadRequest(w, f, fmt.Sprintf("%s is required: a PATCH points environment %q at a deployment, and never at none (delete the model to take it offline).", f, e.Name))
				return
			}
		}
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
	if development != nil {
		changed = append(changed, gatewayv1.EnvironmentDevelopment)
	}
	if !mayManage(w, c, m, changed) {
		return
	}
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(m), m); err != nil {
			return err
		}
		if displayName != nil {
			m.Spec.DisplayName = *displayName
		}
		if development != nil {
			m.Spec.Development = *development
		}
		if req.Environments != nil {
			for i, e := range *req.Environments {
				j := slices.IndexFunc(m.Spec.Environments, func(me gatewayv1.ModelEnvironment) bool { return me.Name == e.Name })
				if j >= 0 && e.Name != gatewayv1.EnvironmentDevelopment {
					m.Spec.Environments[j].Deployment = e.Deployment
				} else {
					j = len(m.Spec.Environments)
					m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: e.Name, Deployment: e.Deployment})
				}
				// The Model's index of the environment is not the body's: a refusal names the body's.
				sent[fmt.Sprintf("spec.environments[%d].", j)] = fmt.Sprintf("environments[%d].", i)
			}
		}
		return a.Opts.Client.Update(r.Context(), m)
	})
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Model", m.Name)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "update model", sentAs(err, sent))
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

// teamExists answers 400 naming team_id unless team is empty (the whole workspace) or a live Team of the
// workspace: a model of no team would be hidden from every team's keys.
func (a *api) teamExists(w http.ResponseWriter, r *http.Request, c auth.Caller, team string) bool {
	if team == "" {
		return true
	}
	refuse := func() bool {
		kit.BadRequest(w, "team_id", fmt.Sprintf("team_id %q names no team of this workspace (GET /v1/teams lists them).", team))
		return false
	}
	if !kit.ValidName(team) {
		return refuse()
	}
	var t gatewayv1.Team
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: team}, &t)
	switch {
	case apierrors.IsNotFound(err), err == nil && t.DeletionTimestamp != nil:
		return refuse()
	case err != nil:
		kit.WriteKubeError(w, r, "get team", err)
		return false
	}
	return true
}

// sentAs renames, in a refusal of the API server, each path of the Model to the name the client sent it under
// (aliasedFields.resolve), so that a refusal names the member of the body at fault.
func sentAs(err error, sent map[string]string) error {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return err
	}
	var pairs []string
	for path, name := range sent {
		pairs = append(pairs, path, name)
	}
	rename := strings.NewReplacer(pairs...).Replace
	status := st.Status()
	status.Message = rename(status.Message)
	if d := status.Details; d != nil {
		details := *d
		details.Causes = slices.Clone(d.Causes)
		for i := range details.Causes {
			details.Causes[i].Field = rename(details.Causes[i].Field)
			details.Causes[i].Message = rename(details.Causes[i].Message)
		}
		status.Details = &details
	}
	return &apierrors.StatusError{ErrStatus: status}
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
