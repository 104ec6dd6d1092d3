package v1alpha1

import (
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The rules of the ids a workspace key's scope lists carry. The CRD states them in CEL on each item of
// spec.models and spec.environments (same patterns, same messages), and the REST API checks them with
// ValidateKeyScope, so kubectl and REST refuse the same ids with the same words.
const (
	// ModelRefPattern is what an item of spec.models matches: a model name or an Endpoint slug.
	ModelRefPattern = `^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	// ModelRefRule is the refusal of an item that does not.
	ModelRefRule = "must be a model name or an Endpoint slug (a letter or digit, then letters, digits, '.', '_', ':', '/' or '-')"
	// ModelRefMaxLength is the longest item of spec.models.
	ModelRefMaxLength = 128
	// EnvironmentNamePattern is what an item of spec.environments matches, the rule of a Model's environment names.
	EnvironmentNamePattern = `^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// EnvironmentNameRule is the refusal of an item that does not.
	EnvironmentNameRule = "must be an environment name (lowercase RFC 1123 label)"
	// EnvironmentNameMaxLength is the longest environment name.
	EnvironmentNameMaxLength = 63
)

var (
	modelRefRE        = regexp.MustCompile(ModelRefPattern)
	environmentNameRE = regexp.MustCompile(EnvironmentNamePattern)
)

// ValidateKeyScope checks every id of a key's scope lists: models under modelsPath, environments under envPath.
// A refusal's field is the item's (models[0]), its detail the rule.
func ValidateKeyScope(models, environments []string, modelsPath, envPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(ids []string, path *field.Path, re *regexp.Regexp, maxLen int, rule string) {
		for i, id := range ids {
			switch {
			case len(id) > maxLen:
				errs = append(errs, field.TooLong(path.Index(i), id, maxLen))
			case !re.MatchString(id):
				errs = append(errs, field.Invalid(path.Index(i), id, rule))
			}
		}
	}
	check(models, modelsPath, modelRefRE, ModelRefMaxLength, ModelRefRule)
	check(environments, envPath, environmentNameRE, EnvironmentNameMaxLength, EnvironmentNameRule)
	return errs
}

// AnnotationCreatedBy is the former record of a workspace key's creator, written by the REST API before
// spec.createdBy existed: "user:<id>" for the owner of the PERSONAL key that created it, "key:<prefix>" for a
// key-management (or other non-personal) key. The manager copies it into spec.createdBy once; until then the
// translation reads it, so no key loses its creator.
const AnnotationCreatedBy = "gateway.modelgate.io/created-by"

// Prefixes of the AnnotationCreatedBy value.
const (
	createdByUser = "user:"
	createdByKey  = "key:"
)

// FieldWorkspaceKeyDisplayName selects WorkspaceAPIKeys by spec.displayName, declared by the kind's
// +kubebuilder:selectablefield marker; the name-uniqueness check of admission reads through it.
const FieldWorkspaceKeyDisplayName = "spec.displayName"

// CreatorFromAnnotation parses an AnnotationCreatedBy value. ok is false for a value of neither form, or with an
// empty id or prefix.
func CreatorFromAnnotation(v string) (c *KeyCreator, ok bool) {
	switch {
	case strings.HasPrefix(v, createdByUser) && len(v) > len(createdByUser):
		return &KeyCreator{UserID: v[len(createdByUser):]}, true
	case strings.HasPrefix(v, createdByKey) && len(v) > len(createdByKey):
		return &KeyCreator{APIKeyPrefix: v[len(createdByKey):]}, true
	}
	return nil, false
}

// Creator is who created the key: spec.createdBy, or, for a key stored before that field existed, the
// AnnotationCreatedBy it carries. nil when neither says.
func (k *WorkspaceAPIKey) Creator() *KeyCreator {
	if k.Spec.CreatedBy != nil {
		return k.Spec.CreatedBy
	}
	c, _ := CreatorFromAnnotation(k.Annotations[AnnotationCreatedBy])
	return c
}

// KeyTypeRule is what a workspace key of one type may carry in its spec. The CRD states the same rules in CEL
// on WorkspaceAPIKeySpec (a test in test/celvalidation checks every row against the API server), and the REST
// API, the name scopes and the dashboard read them from KeyTypeRules.
// +kubebuilder:object:generate=false
type KeyTypeRule struct {
	// Team: the key belongs to a team, spec.teamID (empty: the whole workspace's team keys). Without it teamID
	// may not be set: the key acts across the workspace.
	Team bool
	// Owner: the key needs spec.owner, the user it belongs to.
	Owner bool
	// ModelsAlone: spec.models may scope the key without spec.environments.
	ModelsAlone bool
	// Environments: spec.environments may scope the key, and with them spec.models.
	Environments bool
}

// KeyTypes are the workspace key types, in the order the API lists them.
var KeyTypes = []WorkspaceKeyType{KeyTypePersonal, KeyTypeManageAll, KeyTypeInvoke, KeyTypeExportMetrics, KeyTypeManageAPIKeys}

// KeyTypeRules is the rule of each workspace key type; a type it does not hold is no key type.
var KeyTypeRules = map[WorkspaceKeyType]KeyTypeRule{
	KeyTypePersonal:      {Owner: true},
	KeyTypeManageAll:     {Team: true, Environments: true},
	KeyTypeInvoke:        {Team: true, ModelsAlone: true, Environments: true},
	KeyTypeExportMetrics: {Team: true, ModelsAlone: true},
	KeyTypeManageAPIKeys: {},
}

// KnownKeyType reports whether t is a workspace key type.
func KnownKeyType(t WorkspaceKeyType) bool {
	_, ok := KeyTypeRules[t]
	return ok
}

// IsTeamKey reports whether keys of type t belong to a team (or, with an empty teamID, to the whole workspace as
// a team key): WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS.
func IsTeamKey(t WorkspaceKeyType) bool { return KeyTypeRules[t].Team }

// NameScope is the scope within which the key's spec.displayName must be unique (docs/rest-api.md
// "Workspace keys and teams"): its team for a team key ("team:<teamID>", the empty team being the workspace's
// team keys), its owner for a PERSONAL key ("user:<userID>"), the workspace for a WORKSPACE_MANAGE_API_KEYS key
// ("workspace"). Two keys with the same displayName conflict exactly when their scopes are equal.
func (k *WorkspaceAPIKey) NameScope() string {
	switch {
	case k.Spec.Type == KeyTypePersonal:
		owner := ""
		if k.Spec.Owner != nil {
			owner = k.Spec.Owner.UserID
		}
		return "user:" + owner
	case IsTeamKey(k.Spec.Type):
		return "team:" + k.Spec.TeamID
	}
	return "workspace"
}

// NameClaim is the value a key's name claims (ClaimKindKeyName): its NameScope and displayName, or "" for a key
// without a name.
func (k *WorkspaceAPIKey) NameClaim() string {
	if k.Spec.DisplayName == "" {
		return ""
	}
	return k.NameScope() + "/" + k.Spec.DisplayName
}

// TeamRevoked reports whether k is a team key bound to a Team (AnnotationTeamUID) that is gone: teamUID is the UID
// of the Team named spec.teamID that exists and is not being deleted, "" when there is none. Such a key is revoked
// for good: it is not served, and a new Team of the same name does not bring it back (docs/security.md "Team keys
// are bound to their Team"). A key admitted before its Team existed is not bound, so never revoked by it.
func (k *WorkspaceAPIKey) TeamRevoked(teamUID string) bool {
	uid, bound := k.Annotations[AnnotationTeamUID]
	return bound && k.Spec.TeamID != "" && uid != teamUID
}

// DescribeNameScope says NameScope in words, for a refusal: "among the keys of team ml".
func (k *WorkspaceAPIKey) DescribeNameScope() string {
	switch {
	case k.Spec.Type == KeyTypePersonal:
		owner := ""
		if k.Spec.Owner != nil {
			owner = k.Spec.Owner.UserID
		}
		return "among the PERSONAL keys of user " + owner
	case IsTeamKey(k.Spec.Type) && k.Spec.TeamID == "":
		return "among the workspace-wide team keys (no teamID)"
	case IsTeamKey(k.Spec.Type):
		return "among the keys of team " + k.Spec.TeamID
	}
	return "among the WORKSPACE_MANAGE_API_KEYS keys of the workspace"
}

// Reasons of the Events and conditions of teams and membership.
const (
	// ReasonKeyRevoked is the Event, on the Workspace, of a PERSONAL key deleted because its owner is no longer a
	// member.
	ReasonKeyRevoked = "KeyRevoked"
	// ReasonCreatedByMigrated is the Event, on a WorkspaceAPIKey, of spec.createdBy filled from AnnotationCreatedBy.
	ReasonCreatedByMigrated = "CreatedByMigrated"
	// ReasonCreatedByNotMigrated is the Warning Event of a key whose spec.createdBy could not be filled: the
	// annotation is unreadable, or the key's stored spec breaks a rule added since (the key keeps working).
	ReasonCreatedByNotMigrated = "CreatedByNotMigrated"
	// ReasonDuplicateDefault is the reason of a Team's Ready=False when an older Team is the workspace's default.
	ReasonDuplicateDefault = "DuplicateDefault"
)
