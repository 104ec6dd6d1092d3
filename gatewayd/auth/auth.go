// Package auth reads the credential of every gatewayd call and checks it against the loaded view. It is the one
// parser of the Authorization header: federated keys use the Api-Key scheme only, workspace keys Bearer or the
// legacy Api-Key (docs/rest-api.md "Authentication and who may call what"), and the scheme is
// case-insensitive. Refusals come back as *httperr.Error for the handler to write. An authenticated workspace key
// is a Caller, whose Principal (the key with its owner's current roles) is what gatewayd/authz.Decide judges; this
// package decides nothing itself.
package auth

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
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

// Lookup finds the caller a presented workspace key plaintext belongs to; ok is false for an unknown or revoked key.
type Lookup func(apiKey string) (c Caller, ok bool)

// ViewLookup looks workspace keys up in the view that current returns at the time of the call.
func ViewLookup(current func() *view.View) Lookup {
	return func(apiKey string) (Caller, bool) {
		v := current()
		k := v.LookupWorkspaceKey(apiKey)
		if k == nil {
			return Caller{}, false
		}
		var s *snapshot.Snapshot
		if ns := v.Namespace(k.Namespace); ns != nil {
			s = ns.Snapshot
		}
		return NewCaller(k.Namespace, *k.Record, s), true
	}
}

// CatchUp is what a lookup does on a miss (reload.Loader.CatchUp): it waits, bounded, until the view serves every
// snapshot published before the call, of namespace ns ("" for every served one), and answers true when the view in
// force is no longer seen, the view the miss was judged in, so a second look may find what the first did not.
type CatchUp func(ctx context.Context, seen *view.View, ns string) bool

// Holding returns l that, when current's view does not know a key, waits for catchUp and looks once more: a key
// minted through another replica works on this one as soon as its mint is answered (docs/limits.md
// "Read-your-writes on every replica"). A known key costs nothing more. A Lookup carries no request context, so the
// hold ends only at its own bound, or at once when nothing newer is published.
func (l Lookup) Holding(current func() *view.View, catchUp CatchUp) Lookup {
	if catchUp == nil {
		return l
	}
	return func(apiKey string) (Caller, bool) {
		if c, ok := l(apiKey); ok || len(apiKey) < view.PrefixLen {
			return c, ok
		}
		// The view is read after the miss, so the hit path reads nothing more; a view swapped in between is
		// looked in all the same, since a miss always looks once more.
		catchUp(context.Background(), current(), "")
		return l(apiKey)
	}
}

// Recording returns l that also records each successful authentication with rec (at most once a minute per key),
// for last_used_at. gatewayd wires one such Lookup for every route that takes workspace keys.
func (l Lookup) Recording(rec *keyuse.Recorder) Lookup {
	return func(apiKey string) (Caller, bool) {
		c, ok := l(apiKey)
		if ok {
			rec.Used(c.Namespace, c.Key.Prefix)
		}
		return c, ok
	}
}

// Caller is an authenticated workspace key, with the principal it acts as.
type Caller struct {
	Namespace string
	Key       snapshot.WorkspaceAPIKey
	principal authz.Principal
}

// NewCaller is the caller of key, found in namespace ns whose snapshot in force is s (nil when none is loaded). The
// principal is computed here, once per call, from s: a PERSONAL key acts with its owner's roles as they are now.
func NewCaller(ns string, key snapshot.WorkspaceAPIKey, s *snapshot.Snapshot) Caller {
	return Caller{Namespace: ns, Key: key, principal: principalOf(key, s)}
}

// Workspace authenticates the workspace key of r, in the Bearer or the Api-Key scheme.
func Workspace(r *http.Request, lookup Lookup) (Caller, *httperr.Error) {
	scheme, cred := Credentials(r)
	if scheme != SchemeBearer && scheme != SchemeAPIKey {
		return Caller{}, httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized,
			"Missing API key: send the header Authorization: Bearer <API_KEY> (or Api-Key <API_KEY>).", nil)
	}
	c, ok := lookup(cred)
	if !ok {
		return Caller{}, httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized, "Unknown or revoked API key.", nil)
	}
	return c, nil
}

// Principal is the caller as gatewayd/authz.Decide sees it.
func (c Caller) Principal() authz.Principal { return c.principal }

// Decide asks gatewayd/authz whether the caller may do a to res.
func (c Caller) Decide(a authz.Action, res authz.Resource) authz.Decision {
	return authz.Decide(c.principal, a, res)
}

// principalOf computes the principal of key from snapshot s. A PERSONAL key of a workspace that lists its members
// (MembershipManaged) acts only while its owner is listed, with the organization role listed there; otherwise
// (legacy) it acts with the role recorded in its own owner record. Team roles come from the Teams' member lists in
// both cases. Members and team members are sorted by user id in the snapshot, so each lookup is a binary search.
func principalOf(key snapshot.WorkspaceAPIKey, s *snapshot.Snapshot) authz.Principal {
	p := authz.Principal{
		KeyType: gatewayv1.WorkspaceKeyType(key.Type), KeyPrefix: key.Prefix, KeyTeamID: key.TeamID,
		KeyModels: key.Models, KeyEnvironments: key.Environments, Member: true,
	}
	if key.Type != string(gatewayv1.KeyTypePersonal) {
		return p
	}
	if key.Owner == nil {
		p.Member = false
		return p
	}
	p.UserID, p.OrgRole = key.Owner.UserID, gatewayv1.OrgRole(key.Owner.Role)
	if s == nil {
		return p
	}
	if s.Workspace.MembershipManaged {
		m, ok := findMember(s.Workspace.Members, p.UserID)
		p.Member, p.OrgRole = ok, gatewayv1.OrgRole(m.Role)
		if !ok {
			return p
		}
	}
	for _, t := range s.Teams {
		if m, ok := findMember(t.Members, p.UserID); ok {
			if p.TeamRoles == nil {
				p.TeamRoles = map[string]gatewayv1.TeamRole{}
			}
			p.TeamRoles[t.ID] = gatewayv1.TeamRole(m.Role)
		}
	}
	return p
}

// findMember finds userID in members, which are sorted by user id.
func findMember(members []snapshot.Member, userID string) (snapshot.Member, bool) {
	i, ok := slices.BinarySearchFunc(members, userID, func(m snapshot.Member, id string) int { return strings.Compare(m.UserID, id) })
	if !ok {
		return snapshot.Member{}, false
	}
	return members[i], true
}

func unauthorized(msg string) *httperr.Error {
	return httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized, msg, nil)
}
