package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Provider is the kind of upstream an Endpoint target is.
// +kubebuilder:validation:Enum=OPENAI
type Provider string

const (
	// ProviderOpenAI is any OpenAI-compatible HTTP API (chat completions, completions, embeddings).
	ProviderOpenAI Provider = "OPENAI"
)

// EndpointTarget is one upstream of an Endpoint.
type EndpointTarget struct {
	// provider is the upstream's protocol. OPENAI for an OpenAI-compatible API.
	// +required
	Provider Provider `json:"provider"`

	// baseURL is the upstream's base address, including the version path, for example "http://vllm:8000/v1".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="baseURL must be an absolute http or https URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^:/?#]+://[^/?#]*@')",message="baseURL must not carry credentials (user:password@); put the upstream's key in a Secret named by apiKeySecretRef"
	BaseURL string `json:"baseURL"`

	// apiKeySecretRef names the Secret entry (key defaults to "api_key") holding the upstream's API key, sent as a
	// Bearer token. The key is read by gatewayd at request time and never copied into the snapshot.
	// +optional
	APIKeySecretRef *SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// targetModel replaces the "model" field of forwarded requests; when empty the slug is forwarded as is.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	TargetModel string `json:"targetModel,omitempty"`
}

// EndpointSpec routes a model slug to an upstream.
type EndpointSpec struct {
	// slug is the model name clients send in the "model" field, unique within the workspace. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="slug is immutable: create another Endpoint instead"
	Slug string `json:"slug"`

	// targets are the upstreams of the slug. Exactly one for now.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1
	Targets []EndpointTarget `json:"targets"`

	// timeout bounds one upstream call, after which the caller gets 504 timeout. Defaults to gatewayd's --upstream-timeout.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// sharedModelAPI marks the slug as part of the workspace's shared model API: a federated key calling it is
	// held to the Workspace's modelAPILimits as well as its group's limits, and either can answer 429.
	// +optional
	SharedModelAPI bool `json:"sharedModelAPI,omitempty"`
}

// FieldEndpointSlug selects Endpoints by spec.slug, declared by the +kubebuilder:selectablefield marker below.
const FieldEndpointSlug = "spec.slug"

// Endpoint routes a model slug to an OpenAI-compatible upstream. Without one, no call to the slug can succeed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:selectablefield:JSONPath=`.spec.slug`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Slug",type=string,JSONPath=`.spec.slug`
// +kubebuilder:printcolumn:name="Upstream",type=string,JSONPath=`.spec.targets[0].baseURL`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Endpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the endpoint.
	// +required
	Spec EndpointSpec `json:"spec"`

	// status is the observed state of the endpoint.
	// +optional
	Status EndpointStatus `json:"status,omitempty"`
}

// EndpointStatus is the observed state of an Endpoint.
type EndpointStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, or why not (DuplicateSlug).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EndpointList is a list of Endpoints.
// +kubebuilder:object:root=true
type EndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Endpoint `json:"items"`
}
