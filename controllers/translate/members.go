package translate

import (
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// InCharge returns the Workspace that configures the namespace: the oldest one not being deleted, or nil. There
// should be one per namespace; the oldest keeps its place when a second one is applied by mistake.
func InCharge(all []gatewayv1.Workspace) *gatewayv1.Workspace {
	var ws *gatewayv1.Workspace
	for i := range all {
		if all[i].DeletionTimestamp == nil && (ws == nil || Older(&all[i], ws)) {
			ws = &all[i]
		}
	}
	return ws
}

// Members is the membership of a workspace, as far as deprovisioning is concerned.
type Members struct {
	// managed is true when the Workspace lists its members (spec.members is set, even empty). Until then the
	// workspace has not adopted membership and nobody is deprovisioned.
	managed bool
	ids     map[string]struct{}
}

// NewMembers reads the membership of ws, the Workspace in charge (nil: none, so nothing is managed).
func NewMembers(ws *gatewayv1.Workspace) Members {
	if ws == nil || ws.Spec.Members == nil {
		return Members{}
	}
	m := Members{managed: true, ids: make(map[string]struct{}, len(ws.Spec.Members))}
	for _, u := range ws.Spec.Members {
		m.ids[u.UserID] = struct{}{}
	}
	return m
}

// Deprovisioned reports whether k is a PERSONAL key whose owner the workspace no longer lists. Such a key is
// left out of the snapshot at once and deleted by the manager. Team keys never are: a key a person created
// outlives their membership (docs/rest-api.md "Key types and permission rules").
func (m Members) Deprovisioned(k *gatewayv1.WorkspaceAPIKey) bool {
	if !m.managed || k.Spec.Type != gatewayv1.KeyTypePersonal {
		return false
	}
	if k.Spec.Owner == nil {
		return true // CEL requires an owner; a PERSONAL key without one belongs to nobody listed
	}
	_, ok := m.ids[k.Spec.Owner.UserID]
	return !ok
}

// KeysToRevoke returns the keys of keys that deprovisioning deletes: PERSONAL keys of users the Workspace in
// charge (ws) no longer lists, skipping those already being deleted, in input order.
func KeysToRevoke(ws *gatewayv1.Workspace, keys []gatewayv1.WorkspaceAPIKey) []*gatewayv1.WorkspaceAPIKey {
	m := NewMembers(ws)
	if !m.managed {
		return nil
	}
	var out []*gatewayv1.WorkspaceAPIKey
	for i := range keys {
		if k := &keys[i]; k.DeletionTimestamp == nil && m.Deprovisioned(k) {
			out = append(out, k)
		}
	}
	return out
}

// DefaultTeam returns the Team that is the workspace's default: the oldest one marked spec.default that is not
// being deleted, or nil. Admission refuses a second default, but two racing creates can both be stored; then the
// older one stays the default everywhere (snapshot and status), as with every other duplicate.
func DefaultTeam(teams []gatewayv1.Team) *gatewayv1.Team {
	var def *gatewayv1.Team
	for i := range teams {
		t := &teams[i]
		if t.Spec.Default && t.DeletionTimestamp == nil && (def == nil || Older(t, def)) {
			def = t
		}
	}
	return def
}
