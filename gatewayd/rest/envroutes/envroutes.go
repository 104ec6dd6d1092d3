// Package envroutes serves the management routes that models and chains share (docs/rest-api.md "Models,
// deployments and environments", "Chains"): the list with deployment counts, one object, its deployments, and its
// environments (list, get, activate, deactivate, promote). A Kind says what differs between the two: the custom
// resources, the wire shape of a deployment and an environment, and what activating an environment and scaling
// a deployment down touch. gatewayd/rest/models and gatewayd/rest/chains each hold a Kind and serve only the
// routes that are theirs alone.
package envroutes

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// Owner is a kind whose environments point at deployments of its own: a Model, a Chain.
type Owner interface {
	client.Object
	gatewayv1.Environmental
}

// Kind describes one owner kind (O) and its deployments (D) to the shared routes.
type Kind[O Owner, D client.Object] struct {
	// Kind is the owner's kind as answers name it ("Model"); Plural its collection in paths and in the list's
	// answer ("models"); Param the path parameter of its id ("model_id").
	Kind, Plural, Param string
	// Deployment is what sentences call one of its deployments ("deployment", "chain deployment").
	Deployment string

	// NewOwner and NewDeployment return empty objects to read into, NewOwnerList and NewDeploymentList empty
	// lists of them.
	NewOwner          func() O
	NewDeployment     func() D
	NewOwnerList      func() client.ObjectList
	NewDeploymentList func() client.ObjectList
	// OwnerField is the field selector of a deployment's owner (gatewayv1.FieldDeploymentModel).
	OwnerField string
	// OwnerOf is the owner a deployment belongs to (its spec.modelID or spec.chainID).
	OwnerOf func(D) string
	// DisplayName is the owner's name as people see it (spec.displayName).
	DisplayName func(O) string
	// Served reads owner id's environments from the snapshot gatewayd serves; ok is false when it is not served.
	Served func(s *snapshot.Snapshot, id string) (environments []snapshot.EnvironmentRoute, development string, ok bool)

	// DeploymentJSON is the wire shape of deployment d of o.
	DeploymentJSON func(o O, d D) any
	// EnvironmentJSON is the wire shape of environment name of o; current is the deployment it serves when ok.
	EnvironmentJSON func(o O, name string, current D, ok bool) any
	// Unpromotable is the sentence that refuses to promote d, and empty when d may be promoted.
	Unpromotable func(d D) string
	// ScaleDown asks the manager to scale deployment name to zero (annotation scaled-down-at with at); a
	// deployment that is gone is not an error.
	ScaleDown func(ctx context.Context, cl client.Client, ns, name, at string) error
	// Activate answers the activation (or deactivation) of environment env of o, which points at served.
	Activate func(w http.ResponseWriter, r *http.Request, c auth.Caller, o O, env, served string, active bool)
}

// Routes serves the shared routes of one Kind; its loaders serve the routes of the kind's own package too.
type Routes[O Owner, D client.Object] struct {
	*kit.Kit
	kind *Kind[O, D]
}

// Register adds the shared routes of kind to mux and returns them.
func Register[O Owner, D client.Object](mux ingress.Mux, k *kit.Kit, kind *Kind[O, D]) *Routes[O, D] {
	rt := &Routes[O, D]{Kit: k, kind: kind}
	handle := func(method, path string, h kit.HandlerFunc) {
		k.Handle(mux, method+" /v1/"+kind.Plural+path, kit.AccessModels, h)
	}
	id := "/{" + kind.Param + "}"
	handle("GET", "", rt.list)
	handle("GET", id, rt.get)
	handle("GET", id+"/deployments", rt.listDeployments)
	handle("GET", id+"/environments", rt.listEnvironments)
	handle("GET", id+"/environments/{env_name}", rt.getEnvironment)
	handle("POST", id+"/environments/{env_name}/activate", rt.activateEnvironment(true))
	handle("POST", id+"/environments/{env_name}/deactivate", rt.activateEnvironment(false))
	handle("POST", id+"/environments/{env_name}/promote", rt.promote)
	return rt
}

// Wire shapes both kinds answer with.
type (
	ownerJSON struct {
		ID                      string  `json:"id"`
		CreatedAt               string  `json:"created_at"`
		Name                    string  `json:"name"`
		DeploymentsCount        int     `json:"deployments_count"`
		ProductionDeploymentID  *string `json:"production_deployment_id"`
		DevelopmentDeploymentID *string `json:"development_deployment_id"`
		// TeamID is the owning team's id, under the name the writes take it by; TeamName holds the same id,
		// for the clients that read it before TeamID.
		TeamID   string `json:"team_id"`
		TeamName string `json:"team_name"`
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

// Timestamp is the wire form of a time.
func Timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// WriteActivation answers an activation route: {success: true, no_op: !changed}.
func WriteActivation(w http.ResponseWriter, changed bool) {
	httperr.WriteJSON(w, http.StatusOK, activationJSON{Success: true, NoOp: !changed})
}

// WriteDeleted answers a deletion: {id, deleted: true}.
func WriteDeleted(w http.ResponseWriter, id string) {
	httperr.WriteJSON(w, http.StatusOK, deletedJSON{ID: id, Deleted: true})
}

// Environment is the "environment" field of a deployment's answer, given the environments that point at the
// deployment (sorted): the first that is not "development", nil when there is none.
func Environment(envs []string) *string {
	for _, e := range envs {
		if e != gatewayv1.EnvironmentDevelopment {
			return &e
		}
	}
	return nil
}

// WriteOwner answers o, which has the given number of deployments, in the shape GET answers it, with status.
func (rt *Routes[O, D]) WriteOwner(w http.ResponseWriter, status int, o O, deployments int) {
	httperr.WriteJSON(w, status, rt.ownerJSON(o, deployments))
}

func (rt *Routes[O, D]) ownerJSON(o O, deployments int) ownerJSON {
	out := ownerJSON{ID: o.GetName(), CreatedAt: Timestamp(o.GetCreationTimestamp().Time), Name: cmp.Or(rt.kind.DisplayName(o), o.GetName()),
		DeploymentsCount: deployments, TeamID: o.OwnerTeam(), TeamName: o.OwnerTeam()}
	if id, _ := o.Environment(gatewayv1.EnvironmentProduction); id != "" {
		out.ProductionDeploymentID = &id
	}
	if id, _ := o.Environment(gatewayv1.EnvironmentDevelopment); id != "" {
		out.DevelopmentDeploymentID = &id
	}
	return out
}

// Load reads the owner of the path parameter and asks authz whether c may do action to it through environment
// env (for a read, ActionListModels; for a write, ActionManageModels); one c may not see is 404, and so is one
// being deleted.
func (rt *Routes[O, D]) Load(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action, env string) (O, bool) {
	o := rt.kind.NewOwner()
	return o, rt.LoadDecided(w, r, c, rt.kind.Param, rt.kind.Kind, o, o.OwnerTeam, action, env)
}

// Deployments lists the deployments of owner that are not being deleted, by name.
func (rt *Routes[O, D]) Deployments(r *http.Request, c auth.Caller, owner string) ([]D, error) {
	return listLive[D](r.Context(), rt.ListReader(), rt.kind.NewDeploymentList(), client.InNamespace(c.Namespace),
		client.MatchingFields{rt.kind.OwnerField: owner})
}

// listLive lists into list, drops the objects being deleted and sorts the rest by name.
func listLive[T client.Object](ctx context.Context, rd client.Reader, list client.ObjectList, opts ...client.ListOption) ([]T, error) {
	if err := rd.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t := o.(T); t.GetDeletionTimestamp() == nil {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y T) int { return strings.Compare(x.GetName(), y.GetName()) })
	return out, nil
}

// loadWithDeployments is Load for a read, with the owner's deployments.
func (rt *Routes[O, D]) loadWithDeployments(w http.ResponseWriter, r *http.Request, c auth.Caller) (O, []D, bool) {
	o, ok := rt.Load(w, r, c, authz.ActionListModels, "")
	if !ok {
		return o, nil, false
	}
	deps, err := rt.Deployments(r, c, o.GetName())
	if err != nil {
		kit.WriteKubeError(w, r, "list "+rt.kind.Deployment+"s", err)
		return o, nil, false
	}
	return o, deps, true
}

func (rt *Routes[O, D]) list(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	owners, err := listLive[O](r.Context(), rt.ListReader(), rt.kind.NewOwnerList(), client.InNamespace(c.Namespace))
	if err != nil {
		kit.WriteKubeError(w, r, "list "+rt.kind.Plural, err)
		return
	}
	deps, err := listLive[D](r.Context(), rt.ListReader(), rt.kind.NewDeploymentList(), client.InNamespace(c.Namespace))
	if err != nil {
		kit.WriteKubeError(w, r, "list "+rt.kind.Deployment+"s", err)
		return
	}
	count := map[string]int{}
	for _, d := range deps {
		count[rt.kind.OwnerOf(d)]++
	}
	out := []ownerJSON{}
	p := c.Principal()
	for _, o := range owners {
		if !authz.Decide(p, authz.ActionListModels, authz.Resource{TeamID: o.OwnerTeam(), ModelID: o.GetName()}).Allowed {
			continue
		}
		out = append(out, rt.ownerJSON(o, count[o.GetName()]))
	}
	slices.SortFunc(out, func(x, y ownerJSON) int { return strings.Compare(x.ID, y.ID) })
	httperr.WriteJSON(w, http.StatusOK, map[string]any{rt.kind.Plural: out})
}

func (rt *Routes[O, D]) get(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	if o, deps, ok := rt.loadWithDeployments(w, r, c); ok {
		rt.WriteOwner(w, http.StatusOK, o, len(deps))
	}
}

func (rt *Routes[O, D]) listDeployments(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	o, deps, ok := rt.loadWithDeployments(w, r, c)
	if !ok {
		return
	}
	out := make([]any, len(deps))
	for i, d := range deps {
		out[i] = rt.kind.DeploymentJSON(o, d)
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"deployments": out})
}

// environmentJSON describes environment name of o; deps are o's deployments.
func (rt *Routes[O, D]) environmentJSON(o O, name string, deps []D) any {
	served, _ := o.Environment(name)
	i := slices.IndexFunc(deps, func(d D) bool { return d.GetName() == served })
	if served == "" || i < 0 {
		var none D
		return rt.kind.EnvironmentJSON(o, name, none, false)
	}
	return rt.kind.EnvironmentJSON(o, name, deps[i], true)
}

// loadEnvironment reads the owner, which must have environment env_name; c must be allowed action on it.
func (rt *Routes[O, D]) loadEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action) (O, string, bool) {
	env := r.PathValue("env_name")
	o, ok := rt.Load(w, r, c, action, env)
	if !ok {
		return o, "", false
	}
	if _, ok := o.Environment(env); !ok {
		httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("%s %q has no environment %q.", rt.kind.Kind, o.GetName(), env),
			map[string]string{"id": env})
		return o, "", false
	}
	return o, env, true
}

func (rt *Routes[O, D]) listEnvironments(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	o, deps, ok := rt.loadWithDeployments(w, r, c)
	if !ok {
		return
	}
	out := []any{}
	for _, p := range o.EnvironmentPointers() {
		out = append(out, rt.environmentJSON(o, p.Name, deps))
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"environments": out})
}

func (rt *Routes[O, D]) getEnvironment(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	o, env, ok := rt.loadEnvironment(w, r, c, authz.ActionListModels)
	if !ok {
		return
	}
	deps, err := rt.Deployments(r, c, o.GetName())
	if err != nil {
		kit.WriteKubeError(w, r, "list "+rt.kind.Deployment+"s", err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, rt.environmentJSON(o, env, deps))
}

// activateEnvironment activates or deactivates what the environment serves (Kind.Activate).
func (rt *Routes[O, D]) activateEnvironment(active bool) kit.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) {
		o, env, ok := rt.loadEnvironment(w, r, c, authz.ActionManageModels)
		if !ok {
			return
		}
		served, _ := o.Environment(env)
		if served == "" {
			rt.NotPromoted(w, env)
			return
		}
		rt.kind.Activate(w, r, c, o, env, served, active)
	}
}

// NotPromoted answers 404: environment env serves no deployment yet.
func (rt *Routes[O, D]) NotPromoted(w http.ResponseWriter, env string) {
	httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound,
		fmt.Sprintf("No %s is promoted to environment %q yet.", rt.kind.Deployment, env), map[string]string{"id": env})
}

type promoteRequest struct {
	DeploymentID                string `json:"deployment_id"`
	ScaleDownPreviousDeployment *bool  `json:"scale_down_previous_deployment"`
}

// promote points an environment at another deployment of the owner in one patch of the owner, waits until this
// gatewayd routes by it, and then scales the previous deployment to zero (unless asked not to, or it still
// serves another environment). Calls never fail on the way: the previous deployment serves until the pointer
// moved.
func (rt *Routes[O, D]) promote(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req promoteRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	noun := strings.ToLower(rt.kind.Kind)
	if req.DeploymentID == "" || !kit.ValidName(req.DeploymentID) {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("deployment_id is required: the id of a deployment of this %s.", noun))
		return
	}
	o, env, ok := rt.loadEnvironment(w, r, c, authz.ActionManageModels)
	if !ok {
		return
	}
	target := rt.kind.NewDeployment()
	err := rt.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: req.DeploymentID}, target)
	if apierrors.IsNotFound(err) || (err == nil && (rt.kind.OwnerOf(target) != o.GetName() || target.GetDeletionTimestamp() != nil)) {
		kit.BadRequest(w, "deployment_id", fmt.Sprintf("%s %q has no deployment %q.", rt.kind.Kind, o.GetName(), req.DeploymentID))
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get "+rt.kind.Deployment, err)
		return
	}
	if refusal := rt.kind.Unpromotable(target); refusal != "" {
		kit.BadRequest(w, "deployment_id", refusal)
		return
	}
	previous, err := rt.pointEnvironment(r, o, env, target.GetName())
	if err != nil {
		kit.WriteKubeError(w, r, "promote", err)
		return
	}
	rt.AwaitSnapshot(r.Context(), c.Namespace, "promote "+noun, func(s *snapshot.Snapshot) bool {
		return servedIn(rt.kind.Served, s, o.GetName(), env) == target.GetName()
	})
	if previous != "" && previous != target.GetName() && (req.ScaleDownPreviousDeployment == nil || *req.ScaleDownPreviousDeployment) &&
		len(o.EnvironmentsOf(previous)) == 0 {
		at := rt.Opts.Clock().UTC().Format(time.RFC3339Nano)
		if err := rt.kind.ScaleDown(r.Context(), rt.Opts.Client, c.Namespace, previous, at); err != nil {
			kit.WriteKubeError(w, r, "scale down the previous deployment", err)
			return
		}
	}
	deps, err := rt.Deployments(r, c, o.GetName())
	if err != nil {
		kit.WriteKubeError(w, r, "list "+rt.kind.Deployment+"s", err)
		return
	}
	if !slices.ContainsFunc(deps, func(d D) bool { return d.GetName() == target.GetName() }) {
		deps = append(deps, target)
	}
	httperr.WriteJSON(w, http.StatusOK, rt.environmentJSON(o, env, deps))
}

// pointEnvironment sets environment env of o to deployment, retrying on conflicts with a fresh object, and
// returns the deployment it pointed at before. o is left as written.
func (rt *Routes[O, D]) pointEnvironment(r *http.Request, o O, env, deployment string) (string, error) {
	var previous string
	err := kit.UpdateOnConflict(func() error {
		if err := rt.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		previous, _ = o.Environment(env)
		o.PointEnvironment(env, deployment)
		return rt.Opts.Client.Update(r.Context(), o)
	})
	return previous, err
}

// servedIn is the deployment that environment env of owner id points at in snapshot s, empty when none.
func servedIn(served func(*snapshot.Snapshot, string) ([]snapshot.EnvironmentRoute, string, bool), s *snapshot.Snapshot, id, env string) string {
	envs, development, ok := served(s, id)
	switch {
	case !ok:
		return ""
	case env == gatewayv1.EnvironmentDevelopment:
		return development
	}
	for _, e := range envs {
		if e.Name == env {
			return e.Deployment
		}
	}
	return ""
}

// ScaleDownAt asks the manager to scale each of deployments to zero: the annotation scaled-down-at with at,
// written on a fresh read, again on a conflict. A deployment that is gone is not an error.
func ScaleDownAt(ctx context.Context, cl client.Client, at string, deployments ...client.ObjectKey) error {
	for _, key := range deployments {
		if err := kit.UpdateOnConflict(func() error {
			md := &gatewayv1.ModelDeployment{}
			if err := cl.Get(ctx, key, md); err != nil {
				return client.IgnoreNotFound(err)
			}
			if md.Annotations == nil {
				md.Annotations = map[string]string{}
			}
			md.Annotations[gatewayv1.AnnotationScaledDownAt] = at
			return cl.Update(ctx, md)
		}); err != nil {
			return err
		}
	}
	return nil
}
