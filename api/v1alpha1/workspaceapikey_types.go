package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// WorkspaceKeyType is what a workspace API key may do.
// +kubebuilder:validation:Enum=PERSONAL;WORKSPACE_MANAGE_ALL;WORKSPACE_INVOKE;WORKSPACE_EXPORT_METRICS;WORKSPACE_MANAGE_API_KEYS
type WorkspaceKeyType string

const (
	// KeyTypePersonal is bound to a user and inherits the user's permissions.
	KeyTypePersonal WorkspaceKeyType = "PERSONAL"
	// KeyTypeManageAll deploys, calls endpoints and manages resources.
	KeyTypeManageAll WorkspaceKeyType = "WORKSPACE_MANAGE_ALL"
	// KeyTypeInvoke calls model endpoints only.
	KeyTypeInvoke WorkspaceKeyType = "WORKSPACE_INVOKE"
	// KeyTypeExportMetrics exports metrics only.
	KeyTypeExportMetrics WorkspaceKeyType = "WORKSPACE_EXPORT_METRICS"
	// KeyTypeManageAPIKeys manages team and personal keys across the organization.
	KeyTypeManageAPIKeys WorkspaceKeyType = "WORKSPACE_MANAGE_API_KEYS"
)

// OrgRole is a user's role in the organization.
// +kubebuilder:validation:Enum=ADMIN;MEMBER
type OrgRole string

const (
	// OrgRoleAdmin is an organization Admin.
	OrgRoleAdmin OrgRole = "ADMIN"
	// OrgRoleMember is any other member.
	OrgRoleMember OrgRole = "MEMBER"
)

// KeyOwner is the user a personal key belongs to.
type KeyOwner struct {
	// userID is the owner's user id.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	UserID string `json:"userID"`

	// email is the owner's email address.
	// +optional
	// +kubebuilder:validation:MaxLength=320
	Email string `json:"email,omitempty"`

	// name is the owner's display name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	Name string `json:"name,omitempty"`

	// role is the owner's organization role. Defaults to MEMBER.
	// +optional
	// +kubebuilder:default=MEMBER
	Role OrgRole `json:"role,omitempty"`
}

// KeyCreator is who created a workspace key: a user, or a key-management key.
//
// +kubebuilder:validation:XValidation:rule="has(self.userID) != has(self.apiKeyPrefix)",message="give exactly one of userID and apiKeyPrefix"
type KeyCreator struct {
	// userID is the user whose PERSONAL key created the key.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	UserID string `json:"userID,omitempty"`

	// apiKeyPrefix is the prefix of the WORKSPACE_MANAGE_API_KEYS (or other non-personal) key that created it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	APIKeyPrefix string `json:"apiKeyPrefix,omitempty"`
}

// WorkspaceAPIKeySpec is a key that authenticates management and model calls of the workspace.
//
// +kubebuilder:validation:XValidation:rule="self.type == oldSelf.type",message="type is immutable: create a key of the other type instead"
// +kubebuilder:validation:XValidation:rule="self.type != 'PERSONAL' || has(self.owner)",message="owner is required for PERSONAL keys",fieldPath=".owner"
// +kubebuilder:validation:XValidation:rule="!has(self.models) || size(self.models) == 0 || (has(self.environments) && size(self.environments) > 0) || self.type == 'WORKSPACE_INVOKE' || self.type == 'WORKSPACE_EXPORT_METRICS'",message="models alone scopes WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys only; a WORKSPACE_MANAGE_ALL key is scoped by environments, optionally with models",fieldPath=".models"
// +kubebuilder:validation:XValidation:rule="!has(self.environments) || size(self.environments) == 0 || self.type == 'WORKSPACE_MANAGE_ALL' || self.type == 'WORKSPACE_INVOKE'",message="environments scoping applies to WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only",fieldPath=".environments"
// +kubebuilder:validation:XValidation:rule="!has(self.teamID) || size(self.teamID) == 0 || (self.type != 'PERSONAL' && self.type != 'WORKSPACE_MANAGE_API_KEYS')",message="teamID may not be set on PERSONAL or WORKSPACE_MANAGE_API_KEYS keys: they act across the workspace",fieldPath=".teamID"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.createdBy) || (has(self.createdBy) && self.createdBy == oldSelf.createdBy)",message="createdBy is immutable once set",fieldPath=".createdBy"
// +kubebuilder:validation:XValidation:rule="!has(self.hash) || has(self.prefix)",message="prefix is required when hash is set"
// +kubebuilder:validation:XValidation:rule="!(has(self.hash) && has(self.secretRef))",message="hash and secretRef are mutually exclusive: give one key source"
// +kubebuilder:validation:XValidation:rule="!has(self.prefix) || has(self.hash)",message="prefix may only be set together with hash; a secretRef or minted key derives its own prefix"
// +kubebuilder:validation:XValidation:rule="has(self.hash) == has(oldSelf.hash) && (!has(self.hash) || (self.hash == oldSelf.hash && self.prefix == oldSelf.prefix))",message="prefix and hash are immutable: revoke the key and mint a new one"
type WorkspaceAPIKeySpec struct {
	// type is what the key may do. Immutable.
	// +required
	Type WorkspaceKeyType `json:"type"`

	// displayName is the key's name: lowercase letters, numbers and hyphens.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]*$`
	DisplayName string `json:"displayName,omitempty"`

	// owner is the user of a PERSONAL key.
	// +optional
	Owner *KeyOwner `json:"owner,omitempty"`

	// teamID is the Team a team key is scoped to; empty scopes it to the whole workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TeamID string `json:"teamID,omitempty"`

	// createdBy records who created the key: the user of a PERSONAL key that created it, or the prefix of the
	// WORKSPACE_MANAGE_API_KEYS key that did. It decides which keys a MEMBER sees and may revoke. Set once; the
	// REST API sets it, and the manager fills it from the former created-by annotation.
	// +optional
	CreatedBy *KeyCreator `json:"createdBy,omitempty"`

	// models restricts the key to these model ids or slugs. Empty means all. Each is a model name or an Endpoint
	// slug.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[A-Za-z0-9][A-Za-z0-9._:/-]*$')",message="must be a model name or an Endpoint slug (a letter or digit, then letters, digits, '.', '_', ':', '/' or '-')"
	Models []string `json:"models,omitempty"`

	// environments restricts the key to these environments. Empty means all. Each is an environment name
	// (lowercase RFC 1123 label).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$')",message="must be an environment name (lowercase RFC 1123 label)"
	Environments []string `json:"environments,omitempty"`

	KeySource `json:",inline"`
}

// WorkspaceAPIKey authenticates /v1 management calls and model calls of its workspace (namespace). Only a prefix
// and a SHA-256 hash of the key are ever stored in the object.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:selectablefield:JSONPath=`.spec.prefix`
// +kubebuilder:selectablefield:JSONPath=`.status.prefix`
// +kubebuilder:selectablefield:JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=`.status.prefix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkspaceAPIKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the key.
	// +required
	Spec WorkspaceAPIKeySpec `json:"spec"`

	// status is the observed state of the key.
	// +optional
	Status KeyStatus `json:"status,omitempty"`
}

// WorkspaceAPIKeyList is a list of WorkspaceAPIKeys.
// +kubebuilder:object:root=true
type WorkspaceAPIKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkspaceAPIKey `json:"items"`
}
