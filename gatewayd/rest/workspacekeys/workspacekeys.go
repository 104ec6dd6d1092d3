// Package workspacekeys serves the workspace key routes: create (for the workspace or a team), list, rename and
// revoke. Who may do which to which key is gatewayd/authz.Decide's alone: a key the caller may not see is absent
// from the list and a 404 on the single-key routes, and a refusal is a 403 with the rule's sentence.
package workspacekeys

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "POST /v1/api_keys", kit.AccessKeys, a.createWorkspaceKey)
	k.Handle(mux, "POST /v1/teams/{team_id}/api_keys", kit.AccessKeys, a.createTeamKey)
	k.Handle(mux, "GET /v1/api_keys", kit.AccessKeys, a.listWorkspaceKeys)
	k.Handle(mux, "PATCH /v1/api_keys/{prefix}", kit.AccessKeys, a.renameWorkspaceKey)
	k.Handle(mux, "DELETE /v1/api_keys/{prefix}", kit.AccessKeys, a.deleteWorkspaceKey)
}

// keyNamePattern is the name rule of docs/rest-api.md "Workspace keys and teams": 1 to 128 lowercase letters,
// digits and hyphens, the CRD's length.
var keyNamePattern = regexp.MustCompile(`^[a-z0-9-]{1,128}$`)

const nameRule = "name must be 1 to 128 lowercase letters, digits and hyphens."

type createWorkspaceKeyRequest struct {
	Type         string   `json:"type"`
	Name         string   `json:"name"`
	TeamID       string   `json:"team_id"`
	ModelIDs     []string `json:"model_ids"`
	Environments []string `json:"environments"`
}

type renameWorkspaceKeyRequest struct {
	Name *string `json:"name"`
}

type ownerJSON struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
	Name   string `json:"name"`
}

// workspaceKeyJSON is a listed key. team_id is kept next to team_name for clients of the earlier list.
type workspaceKeyJSON struct {
	Prefix       string     `json:"prefix"`
	Name         string     `json:"name"`
	Type         string     `json:"type"`
	TeamID       string     `json:"team_id,omitempty"`
	TeamName     *string    `json:"team_name"`
	ModelIDs     []string   `json:"model_ids"`
	Environments []string   `json:"environments"`
	Owner        *ownerJSON `json:"owner,omitempty"`
	CreatedAt    string     `json:"created_at"`
	LastUsedAt   *string    `json:"last_used_at"`
	Can          keyCanJSON `json:"can"`
}

// keyCanJSON is what the caller may do to a listed key, as authz.Decide answers, so a client (the dashboard)
// offers only that. The rename and revoke routes still judge every call.
type keyCanJSON struct {
	Rename bool `json:"rename"`
	Revoke bool `json:"revoke"`
}

// createdBy is who the caller is, as a key it creates records it: the user of a PERSONAL key, else the key itself.
func createdBy(c auth.Caller) *gatewayv1.KeyCreator {
	if p := c.Principal(); p.KeyType == gatewayv1.KeyTypePersonal && p.UserID != "" {
		return &gatewayv1.KeyCreator{UserID: p.UserID}
	}
	return &gatewayv1.KeyCreator{APIKeyPrefix: c.Key.Prefix}
}

// resourceOf is a stored key as authz.Decide reads it.
func resourceOf(k *gatewayv1.WorkspaceAPIKey) authz.Resource {
	r := authz.Resource{KeyType: k.Spec.Type, TeamID: k.Spec.TeamID, KeyPrefix: wsKeyPrefix(k)}
	if k.Spec.Owner != nil {
		r.KeyOwner = k.Spec.Owner.UserID
	}
	if c := k.Creator(); c != nil {
		r.KeyCreatedBy = c.UserID
	}
	return r
}

func (a *api) createWorkspaceKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req createWorkspaceKeyRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	a.create(w, r, c, req)
}

// createTeamKey is POST /v1/api_keys for the team in the path; a team_id in the body must name the same team.
func (a *api) createTeamKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	team := r.PathValue("team_id")
	if !kit.ValidName(team) {
		kit.BadRequest(w, "team_id", fmt.Sprintf("%q is not a valid team id.", team))
		return
	}
	var req createWorkspaceKeyRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.TeamID != "" && req.TeamID != team {
		kit.BadRequest(w, "team_id", fmt.Sprintf("team_id %q in the body differs from the team %q of the path.", req.TeamID, team))
		return
	}
	req.TeamID = team
	if t := gatewayv1.WorkspaceKeyType(req.Type); gatewayv1.KnownKeyType(t) && !gatewayv1.IsTeamKey(t) {
		kit.BadRequest(w, "type", fmt.Sprintf("type %s is not a team key: PERSONAL and WORKSPACE_MANAGE_API_KEYS keys act across the workspace; create them with POST /v1/api_keys.", t))
		return
	}
	a.create(w, r, c, req)
}

// create validates req, asks authz.Decide, and writes the WorkspaceAPIKey with its prefix and hash only.
func (a *api) create(w http.ResponseWriter, r *http.Request, c auth.Caller, req createWorkspaceKeyRequest) {
	t := gatewayv1.WorkspaceKeyType(req.Type)
	if field, msg := validateCreate(t, req); field != "" {
		kit.BadRequest(w, field, msg)
		return
	}
	if req.TeamID != "" && !a.teamVisible(w, r, c, req.TeamID) {
		return
	}
	if dec := c.Decide(authz.ActionKeyCreate, authz.Resource{KeyType: t, TeamID: req.TeamID}); !dec.Allowed {
		kit.Forbidden(w, c, dec)
		return
	}
	plain, err := apikey.Mint(apikey.Workspace)
	if err != nil {
		httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "Failed to mint a key.", nil)
		return
	}
	prefix := apikey.Prefix(plain)
	k := &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{Name: ids.New(ids.WorkspaceKeyName), Namespace: c.Namespace},
		Spec: gatewayv1.WorkspaceAPIKeySpec{
			Type:         t,
			DisplayName:  req.Name,
			TeamID:       req.TeamID,
			CreatedBy:    createdBy(c),
			Models:       dedupe(req.ModelIDs),
			Environments: dedupe(req.Environments),
			KeySource:    gatewayv1.KeySource{Prefix: prefix, Hash: apikey.Hash(plain)},
		},
	}
	if t == gatewayv1.KeyTypePersonal {
		// Decide lets only a member's PERSONAL key create a PERSONAL key, and it is the caller's own; a PERSONAL
		// key without an owner acts as no member, so o is never nil here.
		o, p := c.Key.Owner, c.Principal()
		if o == nil {
			httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "The calling key has no owner.", nil)
			return
		}
		k.Spec.Owner = &gatewayv1.KeyOwner{UserID: o.UserID, Email: o.Email, Name: o.Name, Role: p.OrgRole}
	}
	if err := a.Opts.Client.Create(r.Context(), k); err != nil {
		kit.WriteKubeError(w, r, "create workspace api key", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "workspace key "+prefix, func(s *snapshot.Snapshot) bool {
		return slices.ContainsFunc(s.WorkspaceAPIKeys, func(sk snapshot.WorkspaceAPIKey) bool { return sk.Prefix == prefix })
	})
	a.AwaitListed(r.Context(), k)
	httperr.WriteJSON(w, http.StatusCreated, map[string]string{"api_key": plain})
}

// validateCreate checks the type, the name, the scope rules of docs/rest-api.md (the CRD's CEL rules, in the API's field
// names) and every id of the scope lists (gatewayv1.ValidateKeyScope, the CRD's rules on each item), returning the
// field at fault and the rule, or "".
func validateCreate(t gatewayv1.WorkspaceKeyType, req createWorkspaceKeyRequest) (string, string) {
	rule, ok := gatewayv1.KeyTypeRules[t]
	if !ok {
		return "type", "type must be one of PERSONAL, WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE, WORKSPACE_EXPORT_METRICS, WORKSPACE_MANAGE_API_KEYS."
	}
	switch {
	case !keyNamePattern.MatchString(req.Name):
		return "name", nameRule
	case req.TeamID != "" && !rule.Team:
		return "team_id", "team_id may not be set on PERSONAL or WORKSPACE_MANAGE_API_KEYS keys: they act across the workspace."
	case req.TeamID != "" && !kit.ValidName(req.TeamID):
		return "team_id", fmt.Sprintf("%q is not a valid team id.", req.TeamID)
	case len(req.Environments) > 0 && !rule.Environments:
		return "environments", "environments scope WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only."
	case len(req.ModelIDs) > 0 && len(req.Environments) == 0 && !rule.ModelsAlone:
		return "model_ids", "model_ids alone scope WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys only; a WORKSPACE_MANAGE_ALL key is scoped by environments, optionally with model_ids."
	}
	if errs := gatewayv1.ValidateKeyScope(req.ModelIDs, req.Environments, field.NewPath("model_ids"), field.NewPath("environments")); len(errs) > 0 {
		return errs[0].Field, fmt.Sprintf("%s: %s (got %q).", errs[0].Field, errs[0].Detail, errs[0].BadValue)
	}
	return "", ""
}

// teamVisible answers 404 and returns false when the team does not exist or the caller may not see it.
func (a *api) teamVisible(w http.ResponseWriter, r *http.Request, c auth.Caller, id string) bool {
	var t gatewayv1.Team
	err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: id}, &t)
	switch {
	case apierrors.IsNotFound(err), err == nil && t.DeletionTimestamp != nil,
		err == nil && c.Decide(authz.ActionListTeams, authz.Resource{TeamID: id}).Hidden:
		kit.NotFound(w, "Team", id)
		return false
	case err != nil:
		kit.WriteKubeError(w, r, "get team", err)
		return false
	}
	return true
}

func (a *api) listWorkspaceKeys(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	keys, err := a.workspaceKeys(r, c)
	if err != nil {
		kit.WriteKubeError(w, r, "list workspace api keys", err)
		return
	}
	var teams []gatewayv1.Team
	if slices.ContainsFunc(keys, func(k *gatewayv1.WorkspaceAPIKey) bool { return k.Spec.TeamID != "" }) {
		if teams, err = kit.Teams(r.Context(), a.ListReader(), c.Namespace); err != nil {
			kit.WriteKubeError(w, r, "list teams", err)
			return
		}
	}
	used := a.lastUsed(r, c)
	out := make([]workspaceKeyJSON, 0, len(keys))
	for _, k := range keys {
		// A key whose Team was deleted is revoked, whether or not a Team of that name exists now: not listed.
		uid := ""
		if i := teamIndex(teams, k.Spec.TeamID); i >= 0 {
			uid = string(teams[i].UID)
		}
		if k.TeamRevoked(uid) {
			continue
		}
		out = append(out, keyJSON(c, k, teams, used))
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"keys": out})
}

// teamIndex is the index of the Team named id in teams (those not being deleted), -1 when there is none.
func teamIndex(teams []gatewayv1.Team, id string) int {
	return slices.IndexFunc(teams, func(t gatewayv1.Team) bool { return t.Name == id })
}

// lastUsed reads the keys' last uses. The list answers without them (null) when the store fails: a last-use time
// is not worth a failed list.
func (a *api) lastUsed(r *http.Request, c auth.Caller) map[string]time.Time {
	if a.Opts.KeyUse == nil {
		return nil
	}
	used, err := a.Opts.KeyUse.LastUsed(r.Context(), c.Namespace)
	if err != nil {
		logr.FromContextOrDiscard(r.Context()).Error(err, "Failed to read the last uses of workspace keys; listing them without")
		return nil
	}
	return used
}

// keyJSON is k as c lists it, with what c may do to it.
func keyJSON(c auth.Caller, k *gatewayv1.WorkspaceAPIKey, teams []gatewayv1.Team, used map[string]time.Time) workspaceKeyJSON {
	prefix := wsKeyPrefix(k)
	res := resourceOf(k)
	kj := workspaceKeyJSON{
		Prefix: prefix, Name: k.Spec.DisplayName, Type: string(k.Spec.Type), TeamID: k.Spec.TeamID,
		ModelIDs: orEmpty(k.Spec.Models), Environments: orEmpty(k.Spec.Environments),
		CreatedAt: k.CreationTimestamp.UTC().Format(time.RFC3339),
		Can: keyCanJSON{
			Rename: c.Decide(authz.ActionKeyRename, res).Allowed,
			Revoke: c.Decide(authz.ActionKeyRevoke, res).Allowed,
		},
	}
	if k.Spec.TeamID != "" {
		name := k.Spec.TeamID
		if i := teamIndex(teams, k.Spec.TeamID); i >= 0 {
			name = teams[i].Spec.DisplayName
		}
		kj.TeamName = &name
	}
	if o := k.Spec.Owner; o != nil {
		kj.Owner = &ownerJSON{UserID: o.UserID, Email: o.Email, Name: o.Name}
	}
	if t, ok := used[prefix]; ok {
		s := t.UTC().Format(time.RFC3339)
		kj.LastUsedAt = &s
	}
	return kj
}

// renameWorkspaceKey changes a key's name, as authz.Decide allows: an organization admin may not rename another
// member's PERSONAL key, a key-management key renames nothing.
func (a *api) renameWorkspaceKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req renameWorkspaceKeyRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.Name == nil {
		kit.BadRequest(w, "name", "name is required: "+nameRule)
		return
	}
	if !keyNamePattern.MatchString(*req.Name) {
		kit.BadRequest(w, "name", nameRule)
		return
	}
	k, ok := a.targetKey(w, r, c, authz.ActionKeyRename)
	if !ok {
		return
	}
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(k), k); err != nil {
			return err
		}
		k.Spec.DisplayName = *req.Name
		return a.Opts.Client.Update(r.Context(), k)
	})
	if err != nil {
		kit.WriteKubeError(w, r, "rename workspace api key", err)
		return
	}
	// A name is not in the snapshot, so nothing else waits: the list right after this answer shows the new name.
	a.AwaitListed(r.Context(), k)
	var teams []gatewayv1.Team
	if k.Spec.TeamID != "" {
		if teams, err = kit.Teams(r.Context(), a.ListReader(), c.Namespace); err != nil {
			kit.WriteKubeError(w, r, "list teams", err)
			return
		}
	}
	httperr.WriteJSON(w, http.StatusOK, keyJSON(c, k, teams, a.lastUsed(r, c)))
}

// deleteWorkspaceKey revokes a key the caller may revoke; a key it cannot see is reported as not found.
func (a *api) deleteWorkspaceKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	k, ok := a.targetKey(w, r, c, authz.ActionKeyRevoke)
	if !ok {
		return
	}
	prefix := wsKeyPrefix(k)
	if err := a.Opts.Client.Delete(r.Context(), k, client.Preconditions{UID: &k.UID}); err != nil && !apierrors.IsNotFound(err) {
		kit.WriteKubeError(w, r, "delete workspace api key", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "revoke workspace key "+prefix, func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.WorkspaceAPIKeys, func(sk snapshot.WorkspaceAPIKey) bool { return sk.Prefix == prefix })
	})
	a.AwaitUnlisted(r.Context(), k)
	httperr.WriteJSON(w, http.StatusOK, map[string]string{"prefix": prefix})
}

// targetKey loads the key of path parameter prefix and asks authz.Decide about action on it: 400 for a malformed
// prefix, 404 for a key that does not exist or that the caller may not see, 403 for one it sees but may not change.
func (a *api) targetKey(w http.ResponseWriter, r *http.Request, c auth.Caller, action authz.Action) (*gatewayv1.WorkspaceAPIKey, bool) {
	prefix := r.PathValue("prefix")
	if !kit.ValidPrefix(prefix) {
		kit.BadRequest(w, "prefix", fmt.Sprintf("%q is not a key prefix: a prefix is 16 printable characters.", prefix))
		return nil, false
	}
	k, err := a.findKey(r, c.Namespace, prefix)
	if err != nil {
		kit.WriteKubeError(w, r, "find workspace api key", err)
		return nil, false
	}
	if k == nil {
		kit.NotFound(w, "API key", prefix)
		return nil, false
	}
	dec := c.Decide(action, resourceOf(k))
	switch {
	case dec.Hidden:
		kit.NotFound(w, "API key", prefix)
		return nil, false
	case !dec.Allowed:
		kit.Forbidden(w, c, dec)
		return nil, false
	}
	return k, true
}

// findKey returns the live workspace key of the namespace with the prefix, or nil. It reads the API server through
// the prefix field selectors (spec for REST-minted keys, status for keys from Secrets), so a key created a moment
// ago is found.
func (a *api) findKey(r *http.Request, ns, prefix string) (*gatewayv1.WorkspaceAPIKey, error) {
	for _, f := range []string{gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix} {
		var list gatewayv1.WorkspaceAPIKeyList
		if err := a.Opts.Client.List(r.Context(), &list, client.InNamespace(ns), client.MatchingFields{f: prefix}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			if k := &list.Items[i]; k.DeletionTimestamp == nil && wsKeyPrefix(k) == prefix {
				return k, nil
			}
		}
	}
	return nil, nil
}

// workspaceKeys lists the live workspace keys of the caller's namespace that it may see, sorted by prefix.
func (a *api) workspaceKeys(r *http.Request, c auth.Caller) ([]*gatewayv1.WorkspaceAPIKey, error) {
	var list gatewayv1.WorkspaceAPIKeyList
	if err := a.ListReader().List(r.Context(), &list, client.InNamespace(c.Namespace)); err != nil {
		return nil, err
	}
	var out []*gatewayv1.WorkspaceAPIKey
	for i := range list.Items {
		k := &list.Items[i]
		if k.DeletionTimestamp == nil && wsKeyPrefix(k) != "" && c.Decide(authz.ActionKeySee, resourceOf(k)).Allowed {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b *gatewayv1.WorkspaceAPIKey) int { return strings.Compare(wsKeyPrefix(a), wsKeyPrefix(b)) })
	return out, nil
}

func wsKeyPrefix(k *gatewayv1.WorkspaceAPIKey) string {
	if k.Spec.Prefix != "" {
		return k.Spec.Prefix
	}
	return k.Status.Prefix
}

func dedupe(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func orEmpty(in []string) []string {
	if in == nil {
		return []string{}
	}
	return in
}
