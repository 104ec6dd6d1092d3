// Package authz decides every workspace-key permission question in one pure function, Decide, by the numbered
// rules of docs/rest-api.md "Key types and permission rules" (key types, environment scoping, management keys,
// visibility). It reads no cluster state and writes no answer: the caller resolves the key, its
// owner's current roles and the resource, and the HTTP layer turns a Decision into 403 or 404. Its golden table test
// renders the permission table of docs/rest-api.md.
package authz

import (
	"slices"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Principal is the calling workspace key, with its owner's roles as they are now (not when the key was minted).
type Principal struct {
	// KeyType is what the key may do.
	KeyType gatewayv1.WorkspaceKeyType
	// KeyPrefix is the key's public prefix.
	KeyPrefix string
	// KeyTeamID is the team a team key is bound to; "" binds it to the whole workspace.
	KeyTeamID string
	// KeyModels restricts the key to these model ids; empty means all.
	KeyModels []string
	// KeyEnvironments restricts the key to these environments; empty means all.
	KeyEnvironments []string
	// UserID is the owner of a PERSONAL key, or the user who created a team key (for attribution only: a team
	// key never inherits its creator's roles).
	UserID string
	// OrgRole is the current organization role of a PERSONAL key's owner.
	OrgRole gatewayv1.OrgRole
	// TeamRoles is the current role of a PERSONAL key's owner in each team they belong to, by team id.
	TeamRoles map[string]gatewayv1.TeamRole
	// Member is false once a PERSONAL key's owner has left the workspace; such a key may do nothing.
	Member bool
}

// Action is what the principal asks to do.
type Action int

const (
	// ActionInvoke calls a model: Resource.ModelID, TeamID (the model's team) and Environment.
	ActionInvoke Action = iota + 1
	// ActionManageModels creates, changes or deletes a model or its deployments: Resource.ModelID, TeamID,
	// Environment.
	ActionManageModels
	// ActionManageGateway manages groups, federated keys, endpoints and usage, which belong to no team.
	ActionManageGateway
	// ActionExportMetrics reads the metrics of Resource.TeamID ("" for the workspace's own series).
	ActionExportMetrics
	// ActionListTeams lists teams: a Resource with no TeamID asks for the route, one with a TeamID whether that
	// team is listed.
	ActionListTeams
	// ActionListModels lists models: a Resource with no ModelID asks for the route, one with a ModelID (and its
	// TeamID) whether that model is listed.
	ActionListModels
	// ActionKeyCreate creates a workspace key of Resource.KeyType for Resource.TeamID.
	ActionKeyCreate
	// ActionKeySee lists or reads the key Resource describes; a Resource with no KeyPrefix asks for the key routes
	// themselves (list, create, rename, revoke), whose items each caller then sees by the visibility rules.
	ActionKeySee
	// ActionKeyRevoke revokes the key Resource describes.
	ActionKeyRevoke
	// ActionKeyRename renames the key Resource describes.
	ActionKeyRename
	// ActionSandbox pushes or reads sandbox images of Resource.TeamID.
	ActionSandbox
)

var actionNames = [...]string{
	ActionInvoke:        "invoke",
	ActionManageModels:  "manage models",
	ActionManageGateway: "manage gateway",
	ActionExportMetrics: "export metrics",
	ActionListTeams:     "list teams",
	ActionListModels:    "list models",
	ActionKeyCreate:     "create key",
	ActionKeySee:        "see key",
	ActionKeyRevoke:     "revoke key",
	ActionKeyRename:     "rename key",
	ActionSandbox:       "sandbox",
}

// String names the action as the permission table does.
func (a Action) String() string {
	if a < ActionInvoke || int(a) >= len(actionNames) {
		return "unknown action"
	}
	return actionNames[a]
}

// Resource is what an Action applies to. Each action reads only the fields its comment names.
type Resource struct {
	// TeamID is the team the resource belongs to: the model's, the listed team, the sandbox's, or the new or
	// target key's. "" is the workspace itself (a model of no team, a workspace-wide key).
	TeamID string
	// ModelID is the model called, managed or listed.
	ModelID string
	// Environment is the environment called or managed.
	Environment string
	// KeyType is the type of the new or target key.
	KeyType gatewayv1.WorkspaceKeyType
	// KeyPrefix is the target key's prefix.
	KeyPrefix string
	// KeyOwner is the owner's user id of a PERSONAL target key.
	KeyOwner string
	// KeyCreatedBy is the user id of whoever created the target key; "" when a key-management key created it.
	KeyCreatedBy string
}

// Decision is the answer to one question.
type Decision struct {
	// Allowed is true when the principal may act.
	Allowed bool
	// Hidden is true when the principal must not learn that the resource exists: the HTTP layer answers 404, not
	// 403 (docs/rest-api.md "Key types and permission rules" 24).
	Hidden bool
	// Reason is a sentence naming the rule that decided, fit for a 403 body.
	Reason string
}

// Decide answers whether p may do a to r.
func Decide(p Principal, a Action, r Resource) Decision {
	if p.is(gatewayv1.KeyTypePersonal) && !p.Member {
		return deny(reasonDeprovisioned)
	}
	if !gatewayv1.KnownKeyType(p.KeyType) {
		return deny(reasonUnknown)
	}
	switch a {
	case ActionInvoke:
		return decideInvoke(p, r)
	case ActionManageModels:
		return decideManageModels(p, r)
	case ActionManageGateway:
		return decideGateway(p)
	case ActionExportMetrics:
		return decideMetrics(p, r)
	case ActionListTeams:
		return decideList(p, r, r.TeamID == "")
	case ActionListModels:
		return decideList(p, r, r.ModelID == "")
	case ActionSandbox:
		return decideSandbox(p, r)
	case ActionKeyCreate:
		return decideKeyCreate(p, r)
	case ActionKeySee, ActionKeyRevoke, ActionKeyRename:
		return decideKeyTarget(p, a, r)
	}
	return deny(reasonUnknown)
}

// Rules, as sentences. Every constant here is reached by a row of the golden table (authz_test.go checks).
const (
	reasonDeprovisioned = "This PERSONAL key's owner is no longer a member of the workspace, so the key may do nothing."
	reasonUnknown       = "Unknown key type or action."
	reasonMemberNoAdmin = "This PERSONAL key's owner is a MEMBER, and only organization admins may do this with a PERSONAL key."
	reasonManageAllOnly = "WORKSPACE_MANAGE_ALL keys deploy, call endpoints and manage resources, but do not manage workspace keys."
	reasonInvokeOnly    = "WORKSPACE_INVOKE keys call model endpoints only."
	reasonMetricsOnly   = "WORKSPACE_EXPORT_METRICS keys export metrics only."
	reasonKeysOnly      = "WORKSPACE_MANAGE_API_KEYS keys manage keys and list teams and models; they cannot invoke or manage models."

	reasonOrgAdmin      = "Organization admins act anywhere in the workspace."
	reasonMemberTeams   = "Members act within the teams they belong to, and call models that belong to no team."
	reasonTeamKey       = "A team key acts within its team, or across the workspace when it has none."
	reasonGateway       = "WORKSPACE_MANAGE_ALL keys manage the gateway: groups, federated keys, endpoints and usage."
	reasonMetrics       = "The key exports the workspace's series and those of the teams it acts for."
	reasonKeysList      = "Key-management keys list teams and models to find scoping ids."
	reasonTeamUnseen    = "The resource belongs to a team this key does not act for."
	reasonTeamForbidden = "This key does not act for that team."
	reasonTeamlessAdmin = "Only organization admins and workspace-wide keys manage what belongs to no team."
	reasonModelScope    = "This key is not scoped to the model."
	reasonEnvScope      = "This key is not scoped to the environment."
)

// decideInvoke: PERSONAL, WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys call the models they see, inside their scope.
func decideInvoke(p Principal, r Resource) Decision {
	if !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAll) && !p.is(gatewayv1.KeyTypeInvoke) {
		return deny(p.typeReason())
	}
	return p.actOnModel(r)
}

// decideManageModels: PERSONAL and WORKSPACE_MANAGE_ALL keys manage the models they see, inside their scope; what
// belongs to no team is left to organization admins and workspace-wide keys.
func decideManageModels(p Principal, r Resource) Decision {
	if !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAll) {
		return deny(p.typeReason())
	}
	if p.isMember() && r.TeamID == "" {
		return deny(reasonTeamlessAdmin)
	}
	return p.actOnModel(r)
}

// decideGateway: gateway objects belong to no team, so a WORKSPACE_MANAGE_ALL key manages them whatever its team.
func decideGateway(p Principal) Decision {
	switch {
	case p.isOrgAdmin():
		return allow(reasonOrgAdmin)
	case p.is(gatewayv1.KeyTypeManageAll):
		return allow(reasonGateway)
	}
	return deny(p.typeReason())
}

// decideMetrics: WORKSPACE_EXPORT_METRICS keys, and the keys that manage the gateway, export the series of the teams
// they act for. The workspace's own series (TeamID "") carry no team label yet, so every such key reads them.
func decideMetrics(p Principal, r Resource) Decision {
	switch {
	case p.isOrgAdmin():
		return allow(reasonOrgAdmin)
	case !p.is(gatewayv1.KeyTypeExportMetrics) && !p.is(gatewayv1.KeyTypeManageAll):
		return deny(p.typeReason())
	case r.TeamID != "" && !p.keyCovers(r.TeamID):
		return deny(reasonTeamForbidden)
	}
	return allow(reasonMetrics)
}

// decideList: PERSONAL, WORKSPACE_MANAGE_ALL and WORKSPACE_MANAGE_API_KEYS keys call the list routes; an item of a
// team the caller does not see is left out. Listing ignores a key's model and environment scope: that narrows what
// a key calls, not what it finds.
func decideList(p Principal, r Resource, route bool) Decision {
	if !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAll) && !p.is(gatewayv1.KeyTypeManageAPIKeys) {
		return deny(p.typeReason())
	}
	if !route && !p.seesTeam(r.TeamID) {
		return hide(reasonTeamUnseen)
	}
	return allow(p.grantReason())
}

// decideSandbox: PERSONAL and WORKSPACE_MANAGE_ALL keys push images for the teams they act for. The team is a
// selector, not an object, so a team the caller cannot act for is 403 (docs/rest-api.md "Sandbox images").
func decideSandbox(p Principal, r Resource) Decision {
	if !p.is(gatewayv1.KeyTypePersonal) && !p.is(gatewayv1.KeyTypeManageAll) {
		return deny(p.typeReason())
	}
	if !p.seesTeam(r.TeamID) || (p.isMember() && r.TeamID == "") {
		return deny(reasonTeamForbidden)
	}
	return allow(p.grantReason())
}

// actOnModel applies the effective scope: the model's team must be one the caller sees (else 404), then the key's
// own model and environment lists (else 403).
func (p Principal) actOnModel(r Resource) Decision {
	switch {
	case !p.seesTeam(r.TeamID):
		return hide(reasonTeamUnseen)
	case !inScope(p.KeyModels, r.ModelID):
		return deny(reasonModelScope)
	case !inScope(p.KeyEnvironments, r.Environment):
		return deny(reasonEnvScope)
	}
	return allow(p.grantReason())
}

// seesTeam is true when the caller sees what belongs to team ("" = the workspace). An organization admin and a
// key-management key see every team; a member sees their teams and the workspace; a team key sees its team, or
// everything when it has none.
func (p Principal) seesTeam(team string) bool {
	switch {
	case p.isOrgAdmin(), p.is(gatewayv1.KeyTypeManageAPIKeys):
		return true
	case p.isMember():
		return team == "" || p.inTeam(team)
	}
	return p.keyCovers(team)
}

// keyCovers is true when a team key acts for team: its own, or any when it is bound to the whole workspace.
func (p Principal) keyCovers(team string) bool { return p.KeyTeamID == "" || p.KeyTeamID == team }

func (p Principal) inTeam(team string) bool {
	_, ok := p.TeamRoles[team]
	return ok
}

func (p Principal) isTeamAdmin(team string) bool {
	return team != "" && p.TeamRoles[team] == gatewayv1.TeamRoleAdmin
}

func (p Principal) is(t gatewayv1.WorkspaceKeyType) bool { return p.KeyType == t }

func (p Principal) isOrgAdmin() bool {
	return p.is(gatewayv1.KeyTypePersonal) && p.OrgRole == gatewayv1.OrgRoleAdmin
}

// isMember is true for a PERSONAL key whose owner is not an organization admin.
func (p Principal) isMember() bool { return p.is(gatewayv1.KeyTypePersonal) && !p.isOrgAdmin() }

// grantReason names the rule under which a key type that may do an action does it.
func (p Principal) grantReason() string {
	switch {
	case p.isOrgAdmin():
		return reasonOrgAdmin
	case p.isMember():
		return reasonMemberTeams
	case p.is(gatewayv1.KeyTypeManageAPIKeys):
		return reasonKeysList
	}
	return reasonTeamKey
}

// typeReason says what the caller's key type is limited to, for a refusal by type.
func (p Principal) typeReason() string {
	switch p.KeyType {
	case gatewayv1.KeyTypePersonal:
		return reasonMemberNoAdmin
	case gatewayv1.KeyTypeManageAll:
		return reasonManageAllOnly
	case gatewayv1.KeyTypeInvoke:
		return reasonInvokeOnly
	case gatewayv1.KeyTypeExportMetrics:
		return reasonMetricsOnly
	}
	return reasonKeysOnly
}

// inScope is true when scope is empty (all) or holds v.
func inScope(scope []string, v string) bool { return len(scope) == 0 || slices.Contains(scope, v) }

func allow(reason string) Decision { return Decision{Allowed: true, Reason: reason} }
func deny(reason string) Decision  { return Decision{Reason: reason} }
func hide(reason string) Decision  { return Decision{Hidden: true, Reason: reason} }
