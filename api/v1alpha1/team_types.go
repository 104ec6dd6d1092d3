package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// TeamRole is a member's role in one team.
// +kubebuilder:validation:Enum=ADMIN;MEMBER
type TeamRole string

const (
	// TeamRoleAdmin administers a team: creates its team keys and sees every key scoped to it.
	TeamRoleAdmin TeamRole = "ADMIN"
	// TeamRoleMember is any other member of a team.
	TeamRoleMember TeamRole = "MEMBER"
)

// TeamMember is one member of a team. The user must be a member of the Workspace to act: a team membership of
// someone the Workspace does not list grants nothing.
type TeamMember struct {
	// userID is the member's user id, as in Workspace.spec.members.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	UserID string `json:"userID"`

	// role is the member's role in the team.
	// +required
	Role TeamRole `json:"role"`
}

// TeamSpec is a team of the workspace: models, keys and sandbox images may belong to one.
type TeamSpec struct {
	// displayName is the team's name as people read it (the API's team_name).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	DisplayName string `json:"displayName"`

	// default marks the workspace's default team, where what is created without a team goes. At most one team
	// of a workspace is the default (admission refuses a second).
	// +optional
	Default bool `json:"default,omitempty"`

	// members are the team's members and their roles.
	// +optional
	// +listType=map
	// +listMapKey=userID
	// +kubebuilder:validation:MaxItems=10000
	Members []TeamMember `json:"members,omitempty"`
}

// TeamStatus is the observed state of a Team.
type TeamStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Team groups the people, models and keys of a workspace. Its name is the team id (a DNS-1123 label).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Display Name",type=string,JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.default`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Team struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the team.
	// +required
	Spec TeamSpec `json:"spec"`

	// status is the observed state of the team.
	// +optional
	Status TeamStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TeamList is a list of Teams.
type TeamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Team `json:"items"`
}
