package authz

import gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

// Rules of the workspace-key routes (docs/rest-api.md "Key types and permission rules" 9 to 22).
const (
	reasonKeysCreate      = "Key-management keys create team keys of any permission level, for any team."
	reasonOwnPersonal     = "Members create their own PERSONAL keys."
	reasonTeamAdminCreate = "Team admins create team keys scoped to their team."
	reasonNotTeamAdmin    = "Only admins of the key's team (or organization admins) create team keys."
	reasonKeysNoPersonal  = "Key-management keys cannot create PERSONAL keys."
	reasonMgmtAdminOnly   = "Only organization admins create, rename or revoke WORKSPACE_MANAGE_API_KEYS keys."
	reasonUnknownNewType  = "Unknown type for the new key."

	reasonAdminSees     = "Organization admins see and revoke every key of the workspace, and rename all but other members' PERSONAL keys."
	reasonKeysSee       = "Key-management keys see and revoke team and PERSONAL keys across the organization."
	reasonKeySelf       = "A key-management key sees its own record."
	reasonOwnKey        = "Members see, rename and revoke their own PERSONAL keys."
	reasonTeamAdminSees = "Team admins see, rename and revoke every key scoped to their teams."
	reasonCreatorSees   = "Members see, rename and revoke the keys they created."
	reasonKeysRoute     = "PERSONAL and key-management keys call the key routes, and find there only the keys the visibility rules show them."
	reasonKeyUnseen     = "The key is not one this caller may see."
	reasonKeysNoRename  = "Key-management keys list, create and revoke keys; they do not rename them."
	reasonNoRenameOther = "Organization admins may not rename other members' PERSONAL keys."
)

// decideKeyCreate: organization admins create any type; members their own PERSONAL keys and, as team admins, keys
// of their teams; key-management keys team keys of any type and team (docs/rest-api.md "Key types and
// permission rules" 10, 13, 15 and 16).
func decideKeyCreate(p Principal, r Resource) Decision {
	switch {
	case !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAPIKeys):
		return deny(p.typeReason())
	case !gatewayv1.KnownKeyType(r.KeyType):
		return deny(reasonUnknownNewType)
	case p.isOrgAdmin():
		return allow(reasonOrgAdmin)
	case r.KeyType == gatewayv1.KeyTypeManageAPIKeys:
		return deny(reasonMgmtAdminOnly)
	case r.KeyType == gatewayv1.KeyTypePersonal && p.isMember():
		return allow(reasonOwnPersonal)
	case r.KeyType == gatewayv1.KeyTypePersonal:
		return deny(reasonKeysNoPersonal)
	case p.is(gatewayv1.KeyTypeManageAPIKeys):
		return allow(reasonKeysCreate)
	case p.isTeamAdmin(r.TeamID):
		return allow(reasonTeamAdminCreate)
	}
	return deny(reasonNotTeamAdmin)
}

// decideKeyTarget: a caller revokes and renames only keys it sees, and a key it does not see is 404 (docs/rest-api.md
// "Key types and permission rules" 17 to 24). Management keys are the organization admins' alone to rename or
// revoke (15); organization admins may not rename other members' PERSONAL keys (18), and key-management keys rename
// nothing (9 to 13 give them no rename).
func decideKeyTarget(p Principal, a Action, r Resource) Decision {
	if !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAPIKeys) {
		return deny(p.typeReason())
	}
	if a == ActionKeySee && r.KeyPrefix == "" {
		return allow(reasonKeysRoute)
	}
	seen := p.seesKey(r)
	switch {
	case seen == "":
		return hide(reasonKeyUnseen)
	case a == ActionKeySee:
		return allow(seen)
	case r.KeyType == gatewayv1.KeyTypeManageAPIKeys && !p.isOrgAdmin():
		return deny(reasonMgmtAdminOnly)
	case a == ActionKeyRevoke:
		return allow(seen)
	case p.is(gatewayv1.KeyTypeManageAPIKeys):
		return deny(reasonKeysNoRename)
	case p.isOrgAdmin() && r.KeyType == gatewayv1.KeyTypePersonal && r.KeyOwner != p.UserID:
		return deny(reasonNoRenameOther)
	}
	return allow(seen)
}

// seesKey names the visibility rule under which the caller sees the key r describes, or "" when it does not.
func (p Principal) seesKey(r Resource) string {
	switch {
	case p.isOrgAdmin():
		return reasonAdminSees
	case p.is(gatewayv1.KeyTypeManageAPIKeys):
		return p.managerSeesKey(r)
	case r.KeyType == gatewayv1.KeyTypePersonal && p.isUser(r.KeyOwner):
		return reasonOwnKey
	case p.isTeamAdmin(r.TeamID):
		return reasonTeamAdminSees
	case p.isUser(r.KeyCreatedBy):
		return reasonCreatorSees
	}
	return ""
}

// managerSeesKey: a key-management key sees team and PERSONAL keys, and of the management keys only itself.
func (p Principal) managerSeesKey(r Resource) string {
	switch {
	case r.KeyType != gatewayv1.KeyTypeManageAPIKeys:
		return reasonKeysSee
	case r.KeyPrefix != "" && r.KeyPrefix == p.KeyPrefix:
		return reasonKeySelf
	}
	return ""
}

// isUser is true when id names the PERSONAL key's owner.
func (p Principal) isUser(id string) bool { return id != "" && id == p.UserID }
