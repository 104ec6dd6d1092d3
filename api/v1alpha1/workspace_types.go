package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// KeyRegistration holds what signed registration of federated keys needs.
type KeyRegistration struct {
	// publicKey is the workspace's Ed25519 public key, the standard base64 of its raw 32 bytes. Registration
	// requests carry X-Service-Signature, a signature over the exact body bytes made with the matching private key.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	PublicKey string `json:"publicKey"`
}

// BillingWebhook is where billing events are delivered.
type BillingWebhook struct {
	// url receives POSTs of {"type":"API_BILLING_USAGE","data":{"events":[...]}}.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="url must be an absolute http or https URL"
	URL string `json:"url"`

	// secretRef names the Secret entry (key defaults to "secret") holding the Standard Webhooks signing secret.
	// +required
	SecretRef SecretKeySelector `json:"secretRef"`
}

// ModelAPILimits bounds what one workspace key may spend on the shared model API (the OpenAI-compatible routes),
// across all models.
type ModelAPILimits struct {
	// requestsPerMinute is the ceiling of requests per minute per workspace key.
	// +optional
	// +kubebuilder:validation:Minimum=1
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`

	// tokensPerMinute is the ceiling of tokens per minute per workspace key.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
}

// WorkspaceSpec holds the settings of one workspace (one namespace).
type WorkspaceSpec struct {
	// keyRegistration enables registration of caller-supplied federated keys. Until it is set, every
	// registration call is refused with 400.
	// +optional
	KeyRegistration *KeyRegistration `json:"keyRegistration,omitempty"`

	// billingWebhook, when set, receives billing events as signed webhooks.
	// +optional
	BillingWebhook *BillingWebhook `json:"billingWebhook,omitempty"`

	// modelAPILimits is the workspace's model-API tier: the requests and tokens per minute one workspace key may
	// spend on the OpenAI-compatible routes, whatever the model. A federated key calling an Endpoint marked
	// sharedModelAPI is held to these limits too, on top of its group's.
	// +optional
	ModelAPILimits *ModelAPILimits `json:"modelAPILimits,omitempty"`

	// modelAPITier is the former name of modelAPILimits, read only when modelAPILimits is unset.
	//
	// Deprecated: use modelAPILimits.
	// +optional
	ModelAPITier *ModelAPILimits `json:"modelAPITier,omitempty"`

	// members are the organization's people and their roles. A PERSONAL key acts with its owner's role here, as
	// it is now. Removing a member deprovisions them: the manager deletes their PERSONAL keys. When members is
	// unset, the workspace has not adopted membership yet, and a PERSONAL key acts with the role recorded in its
	// own spec.owner.role.
	// +optional
	// +listType=map
	// +listMapKey=userID
	// +kubebuilder:validation:MaxItems=10000
	Members []WorkspaceMember `json:"members,omitempty"`

	// asyncWebhook holds the secret that signs the result webhooks of async inference requests. A request that
	// names a webhook_endpoint is refused until it is set.
	// +optional
	AsyncWebhook *AsyncWebhook `json:"asyncWebhook,omitempty"`

	// imageRegistry is where the workspace's sandbox images (and their uploaded build contexts) are pushed. A
	// sandbox image push is refused until it is set.
	// +optional
	ImageRegistry *ImageRegistry `json:"imageRegistry,omitempty"`
}

// AsyncWebhook is how async inference results are signed; each request names its own webhook_endpoint.
type AsyncWebhook struct {
	// secretRef names the Secret entry (key defaults to "secret") holding the Standard Webhooks signing secret.
	// +required
	SecretRef SecretKeySelector `json:"secretRef"`
}

// WorkspaceMember is one person of the organization.
type WorkspaceMember struct {
	// userID is the member's user id, as PERSONAL keys and teams name them.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	UserID string `json:"userID"`

	// email is the member's email address.
	// +optional
	// +kubebuilder:validation:MaxLength=320
	Email string `json:"email,omitempty"`

	// name is the member's display name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	Name string `json:"name,omitempty"`

	// role is the member's organization role.
	// +required
	Role OrgRole `json:"role"`
}

// WorkspaceStatus is the observed state of a Workspace.
type WorkspaceStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// snapshotVersion is the version of the last snapshot published for this workspace.
	// +optional
	SnapshotVersion int64 `json:"snapshotVersion,omitempty"`

	// conditions: Ready once a snapshot of the workspace is published.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Workspace holds the settings of the workspace its namespace is. At most one per namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Snapshot",type=integer,JSONPath=`.status.snapshotVersion`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Workspace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the workspace.
	// +optional
	Spec WorkspaceSpec `json:"spec,omitempty"`

	// status is the observed state of the workspace.
	// +optional
	Status WorkspaceStatus `json:"status,omitempty"`
}

// WorkspaceList is a list of Workspaces.
// +kubebuilder:object:root=true
type WorkspaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workspace `json:"items"`
}
