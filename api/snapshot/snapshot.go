// Package snapshot is the contract between the manager and gatewayd: the materialized, self-contained view of
// one workspace that gatewayd serves from, and its byte encoding (gzip'd JSON, checksummed, chunked across
// ConfigMaps). The manager builds it with a pure translation; gatewayd decodes, verifies and swaps it in.
//
// Nothing secret is in a snapshot: keys appear only as prefix and SHA-256 hash, and upstream credentials only
// as references to Secrets.
package snapshot

import "slices"

// Format names the encoding of the snapshot. gatewayd refuses any other.
const Format = "v1alpha1"

// Snapshot is one workspace, resolved. Every list is sorted, so equal inputs encode to equal bytes.
type Snapshot struct {
	// Namespace is the workspace.
	Namespace string `json:"namespace"`
	// Workspace holds the workspace settings; zero when the namespace has no Workspace object.
	Workspace Workspace `json:"workspace"`
	// Groups are the Ready groups, sorted by ID. Groups being deleted, and their subtrees, are absent.
	Groups []Group `json:"groups"`
	// APIKeys are the usable federated keys of the listed groups, sorted by Prefix.
	APIKeys []APIKey `json:"apiKeys"`
	// WorkspaceAPIKeys are the usable workspace keys, sorted by Prefix.
	WorkspaceAPIKeys []WorkspaceAPIKey `json:"workspaceAPIKeys"`
	// Endpoints are the routable slugs, sorted by Slug.
	Endpoints []Endpoint `json:"endpoints"`
	// Models are the workspace's models with the deployment each environment points at, sorted by ID.
	Models []ServedModel `json:"models"`
	// Deployments are the model deployments and where they are served, sorted by ID.
	Deployments []Deployment `json:"deployments"`
	// Teams are the workspace's teams, sorted by ID.
	Teams []Team `json:"teams,omitempty"`
	// Chains are the workspace's chains that are not being deleted, with the chain deployment each environment
	// points at, sorted by ID.
	Chains []ServedChain `json:"chains,omitempty"`
	// ChainDeployments are the chain deployments of the listed chains, each with the deployment (in
	// Deployments) of its entrypoint, sorted by ID.
	ChainDeployments []ChainDeployment `json:"chainDeployments,omitempty"`
}

// ServedChain is a chain and its environments.
type ServedChain struct {
	ID     string `json:"id"`
	TeamID string `json:"teamID,omitempty"`
	// Environments point at chain deployments by ID; an empty Deployment has none promoted yet.
	Environments []EnvironmentRoute `json:"environments"`
	// Development is the chain deployment of the development routes, empty when none.
	Development string `json:"development,omitempty"`
}

// ChainDeployment is one deployment of a chain: run_remote calls its entrypoint's deployment.
type ChainDeployment struct {
	ID      string `json:"id"`
	ChainID string `json:"chainID"`
	// Entrypoint is the ID of the Deployment that runs the entrypoint chainlet.
	Entrypoint string `json:"entrypoint"`
}

// ServedModel is a model and its environments.
type ServedModel struct {
	ID     string `json:"id"`
	TeamID string `json:"teamID,omitempty"`
	// Environments point at deployments by ID; an empty Deployment has none promoted yet.
	Environments []EnvironmentRoute `json:"environments"`
	// Development is the deployment of the development routes, empty when none.
	Development string `json:"development,omitempty"`
}

// EnvironmentRoute is one environment of a model.
type EnvironmentRoute struct {
	Name       string `json:"name"`
	Deployment string `json:"deployment,omitempty"`
}

// Deployment kinds: how gatewayd reaches a deployment.
const (
	// DeploymentURL is called at URL.
	DeploymentURL = "url"
	// DeploymentService is called at a ready address of Service's EndpointSlices, on the port named PortName.
	DeploymentService = "service"
)

// Deployment is one model deployment and how to reach it.
type Deployment struct {
	ID      string `json:"id"`
	ModelID string `json:"modelID"`
	// Kind is DeploymentURL or DeploymentService.
	Kind string `json:"kind"`
	// URL is the base address of a url deployment, without a trailing slash.
	URL string `json:"url,omitempty"`
	// Service and PortName locate a service deployment's EndpointSlices and port ("" when the Service has one
	// unnamed port).
	Service  string `json:"service,omitempty"`
	PortName string `json:"portName,omitempty"`
	// PredictPath is appended to the address of a predict call.
	PredictPath string `json:"predictPath"`
	// Active is false for a deactivated deployment, whose routes answer 404.
	Active bool `json:"active"`
	// Ready is true when the manager saw it able to serve; a service deployment is served by the ready
	// addresses gatewayd itself watches, whatever this says.
	Ready bool `json:"ready"`
	// Status is the deployment's status as the manager last wrote it.
	Status string `json:"status,omitempty"`
	// StartupTimeoutSeconds bounds how long a call waits for the deployment to start.
	StartupTimeoutSeconds int32 `json:"startupTimeoutSeconds,omitempty"`
	// ConcurrencyTarget and MaxReplica are the deployment's autoscaling settings, 0 when unset (the defaults, 1
	// each, apply). The async dispatcher runs replicas x ConcurrencyTarget requests at once.
	ConcurrencyTarget int32 `json:"concurrencyTarget,omitempty"`
	MaxReplica        int32 `json:"maxReplica,omitempty"`
}

// Workspace is the settings of a workspace.
type Workspace struct {
	// Name is the Workspace object's name, empty when there is none.
	Name string `json:"name,omitempty"`
	// KeyRegistrationPublicKey is the base64 Ed25519 public key for signed key registration, empty when unset.
	KeyRegistrationPublicKey string `json:"keyRegistrationPublicKey,omitempty"`
	// BillingWebhook is where billing events go, nil when unset.
	BillingWebhook *BillingWebhook `json:"billingWebhook,omitempty"`
	// ModelAPILimits bounds each workspace key, and federated keys on shared-model-API Endpoints, on the
	// OpenAI-compatible routes; nil when unset.
	ModelAPILimits *ModelAPILimits `json:"modelAPILimits,omitempty"`
	// AsyncWebhookSecret signs async inference result webhooks, nil when unset.
	AsyncWebhookSecret *SecretRef `json:"asyncWebhookSecret,omitempty"`
	// MembershipManaged is true when the Workspace lists its members: a PERSONAL key then acts only while its
	// owner is listed, with the role listed. When false, a PERSONAL key acts with the role in its own owner record.
	MembershipManaged bool `json:"membershipManaged,omitempty"`
	// Members are the organization's people, sorted by UserID.
	Members []Member `json:"members,omitempty"`
}

// Member is one person of the organization and their role.
type Member struct {
	UserID string `json:"userID"`
	Role   string `json:"role"`
}

// Team is a team of the workspace and its members.
type Team struct {
	// ID is the Team object's name.
	ID      string `json:"id"`
	Name    string `json:"name"`
	Default bool   `json:"default,omitempty"`
	// Members are sorted by UserID.
	Members []Member `json:"members,omitempty"`
}

// BillingWebhook is a delivery target for billing events.
type BillingWebhook struct {
	URL    string    `json:"url"`
	Secret SecretRef `json:"secret"`
}

// ModelAPILimits is the per-key ceiling on the shared model API.
type ModelAPILimits struct {
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	TokensPerMinute   int64 `json:"tokensPerMinute,omitempty"`
}

// SecretRef names one entry of a Secret in the snapshot's namespace.
type SecretRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Group is a Ready group with its effective models.
type Group struct {
	ID               string `json:"id"`
	ExternalEntityID string `json:"externalEntityID"`
	DisplayName      string `json:"displayName,omitempty"`
	// ParentID is empty for a root.
	ParentID string `json:"parentID,omitempty"`
	// Mode is INDEPENDENT or CASCADING.
	Mode  string `json:"mode"`
	Depth int    `json:"depth"`
	// Models are the group's effective models, sorted by slug: exactly the slugs its keys may call.
	Models []Model `json:"models"`
}

// Equal reports whether g and o are the same record, field for field; gatewayd reuses what it resolved from a
// group whose record did not change.
func (g *Group) Equal(o *Group) bool {
	return g.ID == o.ID && g.ExternalEntityID == o.ExternalEntityID && g.DisplayName == o.DisplayName &&
		g.ParentID == o.ParentID && g.Mode == o.Mode && g.Depth == o.Depth &&
		slices.EqualFunc(g.Models, o.Models, func(a, b Model) bool {
			return a.Slug == b.Slug && slices.Equal(a.RateLimits, b.RateLimits) && slices.Equal(a.UsageLimits, b.UsageLimits)
		})
}

// Model is an allowed slug with every limit that applies to it.
type Model struct {
	Slug        string  `json:"slug"`
	RateLimits  []Limit `json:"rateLimits,omitempty"`
	UsageLimits []Limit `json:"usageLimits,omitempty"`
}

// Limit is one enforced ceiling. In CASCADING mode the counter charged is SourceGroup's; in INDEPENDENT mode it
// is the calling group's own, with SourceGroup only telling where the threshold comes from.
type Limit struct {
	Type        string `json:"type"`
	Unit        string `json:"unit"`
	Threshold   int64  `json:"threshold"`
	SourceGroup string `json:"sourceGroup"`
}

// APIKey is a usable federated key.
type APIKey struct {
	// ID is the APIKey object's name.
	ID string `json:"id"`
	// Prefix is the first 16 characters of the key.
	Prefix string `json:"prefix"`
	// Hash is the lowercase hex SHA-256 of the whole key.
	Hash    string `json:"hash"`
	GroupID string `json:"groupID"`
	Name    string `json:"name,omitempty"`
}

// WorkspaceAPIKey is a usable workspace key.
type WorkspaceAPIKey struct {
	ID           string    `json:"id"`
	Prefix       string    `json:"prefix"`
	Hash         string    `json:"hash"`
	Type         string    `json:"type"`
	Name         string    `json:"name,omitempty"`
	Owner        *KeyOwner `json:"owner,omitempty"`
	TeamID       string    `json:"teamID,omitempty"`
	Models       []string  `json:"models,omitempty"`
	Environments []string  `json:"environments,omitempty"`
	// CreatedBy is who created the key, nil when unrecorded.
	CreatedBy *KeyCreator `json:"createdBy,omitempty"`
}

// KeyCreator is the user, or the key-management key, that created a workspace key.
type KeyCreator struct {
	UserID       string `json:"userID,omitempty"`
	APIKeyPrefix string `json:"apiKeyPrefix,omitempty"`
}

// KeyOwner is the user of a personal workspace key.
type KeyOwner struct {
	UserID string `json:"userID"`
	Email  string `json:"email,omitempty"`
	Name   string `json:"name,omitempty"`
	Role   string `json:"role,omitempty"`
}

// Endpoint routes a slug to its upstreams (docs/routing.md).
type Endpoint struct {
	ID      string   `json:"id"`
	Slug    string   `json:"slug"`
	Targets []Target `json:"targets"`
	// TimeoutMillis bounds one upstream try; 0 means gatewayd's default.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
	// SharedModelAPI holds federated keys calling the slug to the workspace's ModelAPILimits too.
	SharedModelAPI bool `json:"sharedModelAPI,omitempty"`
	// Retry says when a failed try is followed by another; nil keeps the defaults.
	Retry *Retry `json:"retry,omitempty"`
	// Cooldown says when a target leaves the rotation; nil keeps the defaults.
	Cooldown *Cooldown `json:"cooldown,omitempty"`
}

// Target is one upstream of an Endpoint.
type Target struct {
	// Name is unique in the Endpoint: the spec's, or "target-<index>" when the spec names none.
	Name        string `json:"name,omitempty"`
	Provider    string `json:"provider"`
	BaseURL     string `json:"baseURL"`
	TargetModel string `json:"targetModel,omitempty"`
	// APIKeySecret names the Secret entry with the upstream's key; gatewayd reads it, the snapshot never holds it.
	APIKeySecret *SecretRef `json:"apiKeySecret,omitempty"`
	// Weight is the target's share of calls among the usable targets of its priority; 0 means 1.
	Weight int32 `json:"weight,omitempty"`
	// Priority orders the targets: lower first.
	Priority int32 `json:"priority,omitempty"`
	// Pricing prices the target's tokens, nil when unpriced.
	Pricing *Pricing `json:"pricing,omitempty"`
	// APIVersion is the AZURE_OPENAI api-version; Region the BEDROCK region.
	APIVersion string `json:"apiVersion,omitempty"`
	Region     string `json:"region,omitempty"`
}

// Pricing is a target's price in USD per million tokens, as decimal strings.
type Pricing struct {
	InputPerMillionTokens  string `json:"inputPerMillionTokens,omitempty"`
	OutputPerMillionTokens string `json:"outputPerMillionTokens,omitempty"`
}

// Retry is an Endpoint's retry policy.
type Retry struct {
	// Attempts is the number of further tries after the first; nil means the default (targets minus one, at
	// most 2).
	Attempts *int32 `json:"attempts,omitempty"`
	// OnStatus are the upstream statuses that fail a try; empty means the default (429, 500, 502, 503, 504).
	OnStatus []int32 `json:"onStatus,omitempty"`
}

// Cooldown is when a target leaves the rotation: after Failures consecutive failed tries, for DurationMillis.
// Zero fields keep the defaults (3 failures, 30 s).
type Cooldown struct {
	Failures       int32 `json:"failures,omitempty"`
	DurationMillis int64 `json:"durationMillis,omitempty"`
}
