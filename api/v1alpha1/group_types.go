package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LimitType is what a limit counts.
// +kubebuilder:validation:Enum=TOKEN;REQUEST;COST
type LimitType string

const (
	// LimitTypeToken counts prompt plus completion tokens.
	LimitTypeToken LimitType = "TOKEN"
	// LimitTypeRequest counts requests.
	LimitTypeRequest LimitType = "REQUEST"
	// LimitTypeCost counts the calls' cost in micro-USD (millionths of a dollar), from their targets' pricing.
	// It is a usage limit only.
	LimitTypeCost LimitType = "COST"
)

// LimitUnit is the window of a limit.
// +kubebuilder:validation:Enum=SECOND;MINUTE;DAY;MONTH
type LimitUnit string

const (
	// UnitSecond is a rolling one-second window (rate limits).
	UnitSecond LimitUnit = "SECOND"
	// UnitMinute is a rolling one-minute window (rate limits).
	UnitMinute LimitUnit = "MINUTE"
	// UnitDay is the calendar day in UTC, reset at midnight (usage limits).
	UnitDay LimitUnit = "DAY"
	// UnitMonth is the calendar month in UTC, reset at the first instant of the month (usage limits).
	UnitMonth LimitUnit = "MONTH"
)

// LimitTypes are the limit types, and LimitUnits the units, as the CRD's enums list them.
var (
	LimitTypes = []LimitType{LimitTypeToken, LimitTypeRequest, LimitTypeCost}
	LimitUnits = []LimitUnit{UnitSecond, UnitMinute, UnitDay, UnitMonth}
)

// LimitKind is one of a model's two lists of limits: its field in ModelConfig and the types and units its limits
// take. The CRD states them in CEL on each list (a test in test/celvalidation checks them against the API server).
// +kubebuilder:object:generate=false
type LimitKind struct {
	Field string
	Types []LimitType
	Units []LimitUnit
}

// Takes reports whether a limit of this kind may have unit u.
func (k LimitKind) Takes(u LimitUnit) bool { return slices.Contains(k.Units, u) }

// Counts reports whether a limit of this kind may have type t.
func (k LimitKind) Counts(t LimitType) bool { return slices.Contains(k.Types, t) }

var (
	// RateLimitKind is a model's rate limits, short rolling windows of requests or tokens.
	RateLimitKind = LimitKind{Field: "rateLimits", Types: []LimitType{LimitTypeToken, LimitTypeRequest}, Units: []LimitUnit{UnitSecond, UnitMinute}}
	// UsageLimitKind is its usage limits, per UTC calendar day or month.
	UsageLimitKind = LimitKind{Field: "usageLimits", Types: []LimitType{LimitTypeToken, LimitTypeRequest, LimitTypeCost}, Units: []LimitUnit{UnitDay, UnitMonth}}
	// LimitKinds are both.
	LimitKinds = []LimitKind{RateLimitKind, UsageLimitKind}
)

// LimitEnforcement is how limits combine along a hierarchy.
// +kubebuilder:validation:Enum=INDEPENDENT;CASCADING
type LimitEnforcement string

const (
	// EnforcementIndependent meters each group on its own; a child inherits limits it does not declare.
	EnforcementIndependent LimitEnforcement = "INDEPENDENT"
	// EnforcementCascading charges a child's usage to itself and every ancestor, so siblings share an ancestor's pool.
	EnforcementCascading LimitEnforcement = "CASCADING"
)

// MaxDepth is the deepest a group hierarchy may be: a root is at depth 1.
const MaxDepth = 5

// Limit is one ceiling on one (group, model slug) pair.
type Limit struct {
	// type is what the limit counts: TOKEN (prompt plus completion tokens), REQUEST, or COST (micro-USD, usage
	// limits only).
	// +required
	Type LimitType `json:"type"`

	// unit is the window: SECOND or MINUTE for rate limits, DAY or MONTH (UTC calendar) for usage limits.
	// +required
	Unit LimitUnit `json:"unit"`

	// threshold is the ceiling for one window, in micro-USD for COST (5000000 is $5). At least 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	Threshold int64 `json:"threshold"`
}

// ModelConfig allows one model slug to a group, with its limits.
type ModelConfig struct {
	// slug is the Endpoint slug the group may call, for example "demo/echo".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	Slug string `json:"slug"`

	// rateLimits are short rolling-window limits of TOKEN or REQUEST, unit SECOND or MINUTE, at most one per type.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.all(l, l.unit == 'SECOND' || l.unit == 'MINUTE')",message="rate limits take unit SECOND or MINUTE"
	// +kubebuilder:validation:XValidation:rule="self.all(l, l.type != 'COST')",message="rate limits take type TOKEN or REQUEST: COST is a usage limit only (unit DAY or MONTH)"
	// +kubebuilder:validation:XValidation:rule="self.all(l, self.exists_one(m, m.type == l.type))",message="at most one rate limit per type (one TOKEN and one REQUEST may coexist)"
	RateLimits []Limit `json:"rateLimits,omitempty"`

	// usageLimits are calendar limits, unit DAY (reset at midnight UTC) or MONTH (reset at the first instant of
	// the month, UTC), at most one per (type, unit).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:XValidation:rule="self.all(l, l.unit == 'DAY' || l.unit == 'MONTH')",message="usage limits take unit DAY or MONTH"
	// +kubebuilder:validation:XValidation:rule="self.all(l, self.exists_one(m, m.type == l.type && m.unit == l.unit))",message="at most one usage limit per type and unit (a DAY and a MONTH limit of each of TOKEN, REQUEST and COST may coexist)"
	UsageLimits []Limit `json:"usageLimits,omitempty"`
}

// Hierarchy places a group in a tree. Both fields are immutable.
type Hierarchy struct {
	// limitEnforcement is INDEPENDENT (the default) or CASCADING, and must equal the root's.
	// +optional
	// +kubebuilder:default=INDEPENDENT
	LimitEnforcement LimitEnforcement `json:"limitEnforcement,omitempty"`

	// parentGroupID is the name of the parent Group in the same namespace, or null for a root.
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ParentGroupID *string `json:"parentGroupID,omitempty"`
}

// GroupSpec is a billable customer: its external id, allowed models with their limits, and its place in a hierarchy.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (has(self.models) && size(self.models) > 0)",message="models must be non-empty on create",fieldPath=".models",optionalOldSelf=true
type GroupSpec struct {
	// displayName is an optional human-readable name (metadata.name in the REST API).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	DisplayName string `json:"displayName,omitempty"`

	// externalEntityID is the caller's own identifier of the customer, unique within the workspace. It is
	// reported on billing events and metrics.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	ExternalEntityID string `json:"externalEntityID"`

	// models is the complete set of slugs this group may call. Non-empty on create; an empty list on update
	// removes every model.
	// +optional
	// +listType=map
	// +listMapKey=slug
	// +kubebuilder:validation:MaxItems=256
	Models []ModelConfig `json:"models"`

	// hierarchy is where the group sits in a tree and how limits combine. Immutable after creation.
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hierarchy is immutable after creation"
	Hierarchy Hierarchy `json:"hierarchy"`
}

// EffectiveLimit is a limit the runtime enforces, with the group it is anchored to.
type EffectiveLimit struct {
	Limit `json:",inline"`

	// sourceGroup is the id of the group (self or an ancestor) that declares this limit.
	// +required
	SourceGroup string `json:"sourceGroup"`
}

// EffectiveModel is a slug with the limits that apply after walking the hierarchy.
type EffectiveModel struct {
	// slug is the model slug.
	// +required
	Slug string `json:"slug"`

	// rateLimits are the SECOND and MINUTE limits that apply.
	// +optional
	// +listType=atomic
	RateLimits []EffectiveLimit `json:"rateLimits,omitempty"`

	// usageLimits are the DAY and MONTH limits that apply.
	// +optional
	// +listType=atomic
	UsageLimits []EffectiveLimit `json:"usageLimits,omitempty"`
}

// GroupStatus is the resolved state of a group.
type GroupStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// depth is the level of the group: 1 for a root.
	// +optional
	Depth int32 `json:"depth,omitempty"`

	// rootGroupID is the root of the group's tree.
	// +optional
	RootGroupID string `json:"rootGroupID,omitempty"`

	// effectiveModels are the limits the runtime enforces, per slug, after walking the hierarchy.
	// +optional
	// +listType=atomic
	EffectiveModels []EffectiveModel `json:"effectiveModels,omitempty"`

	// conditions: Ready, with reasons ParentNotFound and Invalid when it is not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Field selectors of Groups, declared by the +kubebuilder:selectablefield markers below. The manager's cache indexes
// the same paths under the same names, so client.MatchingFields reads alike from the cache and the API server.
const (
	// FieldGroupExternalID selects Groups by spec.externalEntityID.
	FieldGroupExternalID = "spec.externalEntityID"
	// FieldGroupParent selects Groups by spec.hierarchy.parentGroupID.
	FieldGroupParent = "spec.hierarchy.parentGroupID"
)

// AnnotationParentUID is the UID of the group an object was admitted under: a Group's parent, an APIKey's group.
// Admission sets it on create, from the group it finds then, and keeps it unchanged on every update; users never
// set it. The object belongs to that group: if the group is gone (deleted, or deleted and created again under the
// same name) the object is deleted too, even when it reached etcd only after the group's finalizer had already
// looked for it.
const AnnotationParentUID = "gateway.modelgate.io/parent-uid"

// AnnotationTeamUID is the UID of the Team a team key (a WorkspaceAPIKey with spec.teamID) was admitted under.
// Admission sets it on create, from the Team it finds then (none when the Team does not exist yet, as GitOps may
// apply it after the key), and keeps it unchanged on every update; users never set it. A key bound to a Team is
// served only while that Team, the same object, exists: a deleted Team's keys stop authenticating at once, and
// never attach to a new Team of the same name (docs/security.md "Team keys are bound to their Team").
const AnnotationTeamUID = "gateway.modelgate.io/team-uid"

// Group is a billable customer of the gateway. Its metadata.name is the id used by the REST API and by
// children's hierarchy.parentGroupID; its namespace is its workspace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:selectablefield:JSONPath=`.spec.externalEntityID`
// +kubebuilder:selectablefield:JSONPath=`.spec.hierarchy.parentGroupID`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="External ID",type=string,JSONPath=`.spec.externalEntityID`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.hierarchy.parentGroupID`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.hierarchy.limitEnforcement`
// +kubebuilder:printcolumn:name="Depth",type=integer,JSONPath=`.status.depth`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Group struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the group.
	// +required
	Spec GroupSpec `json:"spec"`

	// status is the resolved state of the group.
	// +optional
	Status GroupStatus `json:"status,omitempty"`
}

// GroupList is a list of Groups.
// +kubebuilder:object:root=true
type GroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Group `json:"items"`
}

// ParentID returns the parent's id, or "" for a root.
func (g *Group) ParentID() string {
	if g.Spec.Hierarchy.ParentGroupID == nil {
		return ""
	}
	return *g.Spec.Hierarchy.ParentGroupID
}

// Enforcement returns the group's limit enforcement, INDEPENDENT when unset.
func (g *Group) Enforcement() LimitEnforcement {
	if g.Spec.Hierarchy.LimitEnforcement == "" {
		return EnforcementIndependent
	}
	return g.Spec.Hierarchy.LimitEnforcement
}
