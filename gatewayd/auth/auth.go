// Package auth reads the credential of every gatewayd call and checks it against the loaded view. It is the one
// parser of the Authorization header: federated keys use the Api-Key scheme only (SPEC.md "Authentication"),
// workspace keys Bearer or the legacy Api-Key, and the scheme is case-insensitive. Refusals come back as
// *httperr.Error for the handler to write; which key type may do what is decided by Caller's methods, written
// against the api/v1alpha1 constants.
package auth

import (
	"net/http"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Scheme is the scheme of an Authorization header.
type Scheme int

// Schemes gatewayd tells apart.
const (
	SchemeNone Scheme = iota
	SchemeBearer
	SchemeAPIKey
	SchemeOther
)

// Credentials splits the Authorization header into its scheme and credential. A header with a scheme but no
// credential reads as SchemeNone.
func Credentials(r *http.Request) (Scheme, string) {
	scheme, cred, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	cred = strings.TrimSpace(cred)
	switch {
	case scheme == "" || cred == "":
		return SchemeNone, ""
	case strings.EqualFold(scheme, "Bearer"):
		return SchemeBearer, cred
	case strings.EqualFold(scheme, "Api-Key"):
		return SchemeAPIKey, cred
	default:
		return SchemeOther, cred
	}
}

const apiKeyHint = "send 'Authorization: Api-Key <key>'"

// Federated authenticates the federated key of r against v.
func Federated(r *http.Request, v *view.View) (*view.Key, *httperr.Error) {
	scheme, cred := Credentials(r)
	switch scheme {
	case SchemeNone:
		return nil, unauthorized("Missing API key: " + apiKeyHint + ".")
	case SchemeBearer:
		return nil, unauthorized("Federated API keys use the Api-Key scheme, not Bearer: " + apiKeyHint + ".")
	case SchemeOther:
		return nil, unauthorized("Unsupported authorization scheme: " + apiKeyHint + ".")
	}
	if k := v.LookupKey(cred); k != nil {
		return k, nil
	}
	return nil, unauthorized("Invalid API key.")
}

// Lookup finds the workspace key a presented plaintext belongs to, with its namespace and snapshot record.
type Lookup func(apiKey string) (namespace string, key snapshot.WorkspaceAPIKey, ok bool)

// ViewLookup looks workspace keys up in the view that current returns at the time of the call.
func ViewLookup(current func() *view.View) Lookup {
	return func(apiKey string) (string, snapshot.WorkspaceAPIKey, bool) {
		k := current().LookupWorkspaceKey(apiKey)
		if k == nil {
			return "", snapshot.WorkspaceAPIKey{}, false
		}
		return k.Namespace, *k.Record, true
	}
}

// Caller is an authenticated workspace key.
type Caller struct {
	Namespace string
	Key       snapshot.WorkspaceAPIKey
}

// Workspace authenticates the workspace key of r, in the Bearer or the Api-Key scheme.
func Workspace(r *http.Request, lookup Lookup) (Caller, *httperr.Error) {
	scheme, cred := Credentials(r)
	if scheme != SchemeBearer && scheme != SchemeAPIKey {
		return Caller{}, httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized,
			"Missing API key: send the header Authorization: Bearer <API_KEY> (or Api-Key <API_KEY>).", nil)
	}
	ns, key, ok := lookup(cred)
	if !ok {
		return Caller{}, httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized, "Unknown or revoked API key.", nil)
	}
	return Caller{Namespace: ns, Key: key}, nil
}

func (c Caller) is(t gatewayv1.WorkspaceKeyType) bool { return c.Key.Type == string(t) }

// IsOrgAdmin is true for a PERSONAL key whose owner is an organization admin.
func (c Caller) IsOrgAdmin() bool {
	return c.is(gatewayv1.KeyTypePersonal) && c.Key.Owner != nil && c.Key.Owner.Role == string(gatewayv1.OrgRoleAdmin)
}

// MayManageGateway: groups, federated keys, endpoints, usage and billing events. WORKSPACE_MANAGE_ALL keys and
// organization admins' PERSONAL keys.
func (c Caller) MayManageGateway() bool { return c.is(gatewayv1.KeyTypeManageAll) || c.IsOrgAdmin() }

// MayManageKeys: the workspace key routes. WORKSPACE_MANAGE_API_KEYS and PERSONAL keys; each handler narrows
// what a caller may see and do.
func (c Caller) MayManageKeys() bool {
	return c.is(gatewayv1.KeyTypeManageAPIKeys) || c.is(gatewayv1.KeyTypePersonal)
}

// MayInvoke: model calls. WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE and PERSONAL keys.
func (c Caller) MayInvoke() bool {
	return c.is(gatewayv1.KeyTypeManageAll) || c.is(gatewayv1.KeyTypeInvoke) || c.is(gatewayv1.KeyTypePersonal)
}

// MayExportMetrics: the workspace's own series. WORKSPACE_EXPORT_METRICS keys, and the keys that may manage the
// gateway.
func (c Caller) MayExportMetrics() bool {
	return c.is(gatewayv1.KeyTypeExportMetrics) || c.MayManageGateway()
}

// MayCallModel is true when the key's model scope, if any, holds modelID.
func (c Caller) MayCallModel(modelID string) bool {
	return len(c.Key.Models) == 0 || slices.Contains(c.Key.Models, modelID)
}

func unauthorized(msg string) *httperr.Error {
	return httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized, msg, nil)
}

// Principal is the caller as gatewayd/authz.Decide sees it. A PERSONAL key acts with its owner's role as the
// snapshot records it; until the Workspace lists its members, every owner of a served key counts as a member.
func (c Caller) Principal() authz.Principal {
	p := authz.Principal{
		KeyType: gatewayv1.WorkspaceKeyType(c.Key.Type), KeyPrefix: c.Key.Prefix, KeyTeamID: c.Key.TeamID,
		KeyModels: c.Key.Models, KeyEnvironments: c.Key.Environments, Member: true,
	}
	if o := c.Key.Owner; o != nil {
		p.UserID, p.OrgRole = o.UserID, gatewayv1.OrgRole(o.Role)
	}
	return p
}
