package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Provider is the kind of upstream an Endpoint target is.
// +kubebuilder:validation:Enum=OPENAI;AZURE_OPENAI;ANTHROPIC;BEDROCK;GEMINI
type Provider string

const (
	// ProviderOpenAI is any OpenAI-compatible HTTP API (chat completions, completions, embeddings).
	ProviderOpenAI Provider = "OPENAI"

	// ProviderAzureOpenAI is Azure OpenAI; its targets require apiVersion, and only they take it.
	ProviderAzureOpenAI Provider = "AZURE_OPENAI"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic Provider = "ANTHROPIC"
	// ProviderBedrock is Amazon Bedrock's Converse API, signed with AWS SigV4; only its targets take region,
	// which they need.
	ProviderBedrock Provider = "BEDROCK"
	// ProviderGemini is Google's Gemini API.
	ProviderGemini Provider = "GEMINI"
)

// EndpointTarget is one upstream of an Endpoint.
// +kubebuilder:validation:XValidation:rule="!has(self.apiVersion) || self.provider == 'AZURE_OPENAI'",message="apiVersion is taken only by an AZURE_OPENAI target; remove it from this target"
// +kubebuilder:validation:XValidation:rule="has(self.apiVersion) || self.provider != 'AZURE_OPENAI'",message="apiVersion is required on an AZURE_OPENAI target: the api-version of its calls, for example 2024-10-21"
// +kubebuilder:validation:XValidation:rule="!has(self.region) || self.provider == 'BEDROCK'",message="region is taken only by a BEDROCK target; remove it from this target"
// +kubebuilder:validation:XValidation:rule="has(self.region) || self.provider != 'BEDROCK'",message="region is required on a BEDROCK target: the AWS region its calls are signed for"
type EndpointTarget struct {
	// name identifies the target in metrics, logs and cooldown state. Unique in the Endpoint, a DNS-1123 label;
	// when empty the target is called "target-<index>" (0-based), which no other target may then take.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// provider is the upstream's protocol: OPENAI for an OpenAI-compatible API, AZURE_OPENAI for Azure OpenAI,
	// ANTHROPIC for Anthropic's Messages API, BEDROCK for Amazon Bedrock's Converse API, GEMINI for Google's
	// Gemini API (docs/routing.md "Providers").
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
	// Bearer token (in x-goog-api-key to GEMINI). A BEDROCK target's Secret holds aws_access_key_id,
	// aws_secret_access_key and optionally aws_session_token instead, and key is not used. The key is read by
	// gatewayd at request time and never copied into the snapshot.
	// +optional
	APIKeySecretRef *SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// targetModel replaces the "model" field of forwarded requests; when empty the slug is forwarded as is.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	TargetModel string `json:"targetModel,omitempty"`

	// weight is the target's share of calls among the usable targets of its priority: a target of weight 3 takes
	// three calls for each call of a target of weight 1. From 1 to 1000.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight,omitempty"`

	// priority orders the targets, lower first: a target of a higher number takes a call only when no target of
	// a lower one can (all in cooldown, or each tried and failed). From 0 to 9.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9
	Priority int32 `json:"priority,omitempty"`

	// pricing is what the target's tokens cost, for billing; unpriced when absent.
	// +optional
	Pricing *EndpointPricing `json:"pricing,omitempty"`

	// apiVersion is the api-version query parameter of an AZURE_OPENAI target, which requires it. Refused on any
	// other provider.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	APIVersion string `json:"apiVersion,omitempty"`

	// region is the AWS region of a BEDROCK target, which its calls are signed for. Required on a BEDROCK
	// target, refused on any other provider.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`
}

// EndpointPricing is a target's price in US dollars per million tokens, each a decimal string with at most six
// places after the point (a micro-dollar), for example "0.60".
type EndpointPricing struct {
	// inputPerMillionTokens is the price of a million prompt tokens, in USD.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?$`
	InputPerMillionTokens string `json:"inputPerMillionTokens,omitempty"`

	// outputPerMillionTokens is the price of a million completion tokens, in USD.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?$`
	OutputPerMillionTokens string `json:"outputPerMillionTokens,omitempty"`
}

// EndpointRetry says when a failed try of a call is followed by a try of another target.
type EndpointRetry struct {
	// attempts is the number of further tries after the first, from 0 (no retry) to 5. When absent, gatewayd
	// tries once more per further target, at most 2.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	Attempts *int32 `json:"attempts,omitempty"`

	// onStatus are the upstream answer statuses, each from 400 to 599, that fail a try; when absent, 429, 500,
	// 502, 503 and 504. A refused connection, or a timeout before the answer's first byte, always fails a try.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=200
	// +kubebuilder:validation:items:Minimum=400
	// +kubebuilder:validation:items:Maximum=599
	OnStatus []int32 `json:"onStatus,omitempty"`
}

// EndpointCooldown says when a target leaves the rotation, and for how long.
type EndpointCooldown struct {
	// failures is the number of consecutive failed tries, from 1 to 100, that take a target out of rotation.
	// When absent, 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Failures int32 `json:"failures,omitempty"`

	// duration is how long the target stays out of rotation, from 1s to 1h. When absent, 30s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="duration must be from 1s to 1h"
	Duration *metav1.Duration `json:"duration,omitempty"`
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

	// targets are the upstreams of the slug, 1 to 16: a call goes to one of the lowest priority that can take it,
	// chosen by weight, and a failed try may be retried on another (retry, cooldown). Their names are unique.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.name) || self.exists_one(u, has(u.name) && u.name == t.name))",message="target names must be unique: a name may not repeat"
	// +kubebuilder:validation:XValidation:rule="self.all(i, t, !has(t.name) || !t.name.matches('^target-(0|[1-9][0-9]?)$') || int(t.name.substring(7)) == i || int(t.name.substring(7)) >= size(self) || has(self[int(t.name.substring(7))].name))",message="target names must be unique: a name may not equal the default name target-<index> of another target that has none"
	Targets []EndpointTarget `json:"targets"`

	// retry says when a failed try is followed by a try of another target. When absent, gatewayd's defaults:
	// once more per further target, at most 2, on 429, 500, 502, 503 and 504.
	// +optional
	Retry *EndpointRetry `json:"retry,omitempty"`

	// cooldown says when a target leaves the rotation after failed tries. When absent, gatewayd's defaults
	// (3 failures, 30s).
	// +optional
	Cooldown *EndpointCooldown `json:"cooldown,omitempty"`

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

// Endpoint routes a model slug to its OpenAI-compatible upstreams. Without one, no call to the slug can succeed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:selectablefield:JSONPath=`.spec.slug`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Slug",type=string,JSONPath=`.spec.slug`
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.targetCount`
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

	// targetCount is the number of spec.targets, shown by kubectl get (a printer column cannot count a list).
	// +optional
	TargetCount int32 `json:"targetCount,omitempty"`

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
