package workspacekeys

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux *http.ServeMux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "POST /v1/api_keys", kit.AccessKeys, a.createWorkspaceKey)
	k.Handle(mux, "GET /v1/api_keys", kit.AccessKeys, a.listWorkspaceKeys)
	k.Handle(mux, "DELETE /v1/api_keys/{prefix}", kit.AccessKeys, a.deleteWorkspaceKey)
}

// AnnotationCreatedBy records who created a workspace key through the API: "user:<id>" for a personal key's
// owner, "key:<prefix>" for a key-management key. It decides what MEMBER callers may list and revoke.
const AnnotationCreatedBy = "gateway.modelgate.io/created-by"

var keyNamePattern = regexp.MustCompile(`^[a-z0-9-]{1,128}$`)

type createWorkspaceKeyRequest struct {
	Type         string   `json:"type"`
	Name         string   `json:"name"`
	TeamID       string   `json:"team_id"`
	ModelIDs     []string `json:"model_ids"`
	Environments []string `json:"environments"`
}

type ownerJSON struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
	Name   string `json:"name"`
}

type workspaceKeyJSON struct {
	Prefix       string     `json:"prefix"`
	Name         string     `json:"name"`
	Type         string     `json:"type"`
	TeamID       string     `json:"team_id,omitempty"`
	ModelIDs     []string   `json:"model_ids,omitempty"`
	Environments []string   `json:"environments,omitempty"`
	Owner        *ownerJSON `json:"owner,omitempty"`
	CreatedAt    string     `json:"created_at"`
}

// createdBy is the AnnotationCreatedBy value of a caller.
func createdBy(c auth.Caller) string {
	if c.Key.Type == "PERSONAL" && c.Key.Owner != nil {
		return "user:" + c.Key.Owner.UserID
	}
	return "key:" + c.Key.Prefix
}

// mayCreate applies SPEC.md "Authentication": organization admins create any type (a PERSONAL key is theirs);
// key-management keys create team keys of any permission level but no personal or management keys; other
// members create only their own personal keys (team-admin roles are not modelled yet).
func mayCreate(c auth.Caller, t gatewayv1.WorkspaceKeyType) bool {
	switch {
	case c.IsOrgAdmin():
		return true
	case c.Key.Type == string(gatewayv1.KeyTypeManageAPIKeys):
		return t != gatewayv1.KeyTypePersonal && t != gatewayv1.KeyTypeManageAPIKeys
	case c.Key.Type == string(gatewayv1.KeyTypePersonal):
		return t == gatewayv1.KeyTypePersonal
	}
	return false
}

// sees applies the visibility rules: admins see every key; key-management keys see team and personal keys;
// other members see their own personal keys and the keys they created. The same rule decides who may revoke.
func sees(c auth.Caller, k *gatewayv1.WorkspaceAPIKey) bool {
	switch {
	case c.IsOrgAdmin():
		return true
	case c.Key.Type == string(gatewayv1.KeyTypeManageAPIKeys):
		return k.Spec.Type != gatewayv1.KeyTypeManageAPIKeys
	case c.Key.Type == string(gatewayv1.KeyTypePersonal) && c.Key.Owner != nil:
		own := k.Spec.Type == gatewayv1.KeyTypePersonal && k.Spec.Owner != nil && k.Spec.Owner.UserID == c.Key.Owner.UserID
		return own || k.Annotations[AnnotationCreatedBy] == createdBy(c)
	}
	return false
}

func (a *api) createWorkspaceKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req createWorkspaceKeyRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	t := gatewayv1.WorkspaceKeyType(req.Type)
	switch t {
	case gatewayv1.KeyTypePersonal, gatewayv1.KeyTypeManageAll, gatewayv1.KeyTypeInvoke,
		gatewayv1.KeyTypeExportMetrics, gatewayv1.KeyTypeManageAPIKeys:
	default:
		kit.BadRequest(w, "type", "type must be one of PERSONAL, WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE, WORKSPACE_EXPORT_METRICS, WORKSPACE_MANAGE_API_KEYS.")
		return
	}
	if !keyNamePattern.MatchString(req.Name) {
		kit.BadRequest(w, "name", "name must be 1 to 128 lowercase letters, numbers and hyphens.")
		return
	}
	if (len(req.ModelIDs) > 0 || len(req.Environments) > 0) && t != gatewayv1.KeyTypeManageAll && t != gatewayv1.KeyTypeInvoke {
		kit.BadRequest(w, "model_ids", "model_ids and environments scope WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only.")
		return
	}
	if !mayCreate(c, t) {
		httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden,
			fmt.Sprintf("A %s key may not create %s keys.", c.Key.Type, t), map[string]string{"type": req.Type})
		return
	}
	plain, err := apikey.Mint(apikey.Workspace)
	if err != nil {
		httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "Failed to mint a key.", nil)
		return
	}
	prefix := apikey.Prefix(plain)
	k := &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{
			Name: kit.NewID("wk-"), Namespace: c.Namespace,
			Annotations: map[string]string{AnnotationCreatedBy: createdBy(c)},
		},
		Spec: gatewayv1.WorkspaceAPIKeySpec{
			Type:         t,
			DisplayName:  req.Name,
			TeamID:       req.TeamID,
			Models:       dedupe(req.ModelIDs),
			Environments: dedupe(req.Environments),
			KeySource:    gatewayv1.KeySource{Prefix: prefix, Hash: apikey.Hash(plain)},
		},
	}
	if t == gatewayv1.KeyTypePersonal {
		// Only a personal key's owner (or an admin, for themselves) creates personal keys, so the owner is the caller.
		if c.Key.Owner == nil {
			httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden, "Only a PERSONAL key can create a PERSONAL key.", nil)
			return
		}
		o := c.Key.Owner
		k.Spec.Owner = &gatewayv1.KeyOwner{UserID: o.UserID, Email: o.Email, Name: o.Name, Role: gatewayv1.OrgRole(o.Role)}
	}
	if err := a.Opts.Client.Create(r.Context(), k); err != nil {
		kit.WriteKubeError(w, r, "create workspace api key", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "workspace key "+prefix, func(s *snapshot.Snapshot) bool {
		return slices.ContainsFunc(s.WorkspaceAPIKeys, func(sk snapshot.WorkspaceAPIKey) bool { return sk.Prefix == prefix })
	})
	httperr.WriteJSON(w, http.StatusCreated, map[string]string{"api_key": plain})
}

func (a *api) listWorkspaceKeys(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	keys, err := a.workspaceKeys(r, c)
	if err != nil {
		kit.WriteKubeError(w, r, "list workspace api keys", err)
		return
	}
	out := make([]workspaceKeyJSON, 0, len(keys))
	for _, k := range keys {
		kj := workspaceKeyJSON{
			Prefix: wsKeyPrefix(k), Name: k.Spec.DisplayName, Type: string(k.Spec.Type), TeamID: k.Spec.TeamID,
			ModelIDs: k.Spec.Models, Environments: k.Spec.Environments,
			CreatedAt: k.CreationTimestamp.UTC().Format(time.RFC3339),
		}
		if o := k.Spec.Owner; o != nil {
			kj.Owner = &ownerJSON{UserID: o.UserID, Email: o.Email, Name: o.Name}
		}
		out = append(out, kj)
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"keys": out})
}

// deleteWorkspaceKey revokes a key the caller can see; a key it cannot see is reported as not found.
func (a *api) deleteWorkspaceKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	prefix := r.PathValue("prefix")
	if !kit.ValidPrefix(prefix) {
		kit.BadRequest(w, "prefix", fmt.Sprintf("%q is not a key prefix: a prefix is 16 printable characters.", prefix))
		return
	}
	keys, err := a.workspaceKeys(r, c)
	if err != nil {
		kit.WriteKubeError(w, r, "list workspace api keys", err)
		return
	}
	i := slices.IndexFunc(keys, func(k *gatewayv1.WorkspaceAPIKey) bool { return wsKeyPrefix(k) == prefix })
	if i < 0 {
		kit.NotFound(w, "API key", prefix)
		return
	}
	k := keys[i]
	if err := a.Opts.Client.Delete(r.Context(), k, client.Preconditions{UID: &k.UID}); err != nil && !apierrors.IsNotFound(err) {
		kit.WriteKubeError(w, r, "delete workspace api key", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "revoke workspace key "+prefix, func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.WorkspaceAPIKeys, func(sk snapshot.WorkspaceAPIKey) bool { return sk.Prefix == prefix })
	})
	httperr.WriteJSON(w, http.StatusOK, map[string]string{"prefix": prefix})
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
		if k.DeletionTimestamp == nil && wsKeyPrefix(k) != "" && sees(c, k) {
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
