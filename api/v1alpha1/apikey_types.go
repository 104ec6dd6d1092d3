package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// APIKeySpec is a federated API key under a Group. Revoking a key is deleting it.
//
// +kubebuilder:validation:XValidation:rule="self.groupID == oldSelf.groupID",message="groupID is immutable: mint a new key in the other group instead"
// +kubebuilder:validation:XValidation:rule="!has(self.hash) || has(self.prefix)",message="prefix is required when hash is set"
// +kubebuilder:validation:XValidation:rule="!(has(self.hash) && has(self.secretRef))",message="hash and secretRef are mutually exclusive: give one key source"
// +kubebuilder:validation:XValidation:rule="!has(self.prefix) || has(self.hash)",message="prefix may only be set together with hash; a secretRef or minted key derives its own prefix"
// +kubebuilder:validation:XValidation:rule="has(self.hash) == has(oldSelf.hash) && (!has(self.hash) || (self.hash == oldSelf.hash && self.prefix == oldSelf.prefix))",message="prefix and hash are immutable: revoke the key and mint a new one"
type APIKeySpec struct {
	// groupID is the id (metadata.name) of the Group the key belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GroupID string `json:"groupID"`

	// displayName is an optional label (name in the REST API).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	DisplayName string `json:"displayName,omitempty"`

	KeySource `json:",inline"`
}

// Field selectors of APIKeys and WorkspaceAPIKeys, declared by the +kubebuilder:selectablefield markers of both
// kinds.
const (
	// FieldAPIKeyGroup selects APIKeys by spec.groupID.
	FieldAPIKeyGroup = "spec.groupID"
	// FieldSpecPrefix selects keys by the prefix a REST mint or registration wrote into the spec.
	FieldSpecPrefix = "spec.prefix"
	// FieldStatusPrefix selects keys by the prefix derived from a Secret or a controller-minted key.
	FieldStatusPrefix = "status.prefix"
)

// APIKey is a federated API key: customers call models with it through gatewayd, and its usage counts against
// its Group's limits. Only a prefix and a SHA-256 hash of the key are ever stored in the object.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:selectablefield:JSONPath=`.spec.groupID`
// +kubebuilder:selectablefield:JSONPath=`.spec.prefix`
// +kubebuilder:selectablefield:JSONPath=`.status.prefix`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.groupID`
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=`.status.prefix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type APIKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the key.
	// +required
	Spec APIKeySpec `json:"spec"`

	// status is the observed state of the key.
	// +optional
	Status KeyStatus `json:"status,omitempty"`
}

// APIKeyList is a list of APIKeys.
// +kubebuilder:object:root=true
type APIKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []APIKey `json:"items"`
}
