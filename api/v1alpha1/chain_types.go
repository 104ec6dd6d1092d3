package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the manager sets on the ModelDeployments it runs for the chainlets of a ChainDeployment.
const (
	// LabelChain names the Chain (chain_id) of a ChainDeployment's chainlet deployment.
	LabelChain = "gateway.modelgate.io/chain"
	// LabelChainDeployment names the ChainDeployment that owns a chainlet deployment.
	LabelChainDeployment = "gateway.modelgate.io/chain-deployment"
	// LabelChainlet names the chainlet a ModelDeployment runs.
	LabelChainlet = "gateway.modelgate.io/chainlet"
)

// FieldChainDeploymentChain selects ChainDeployments by spec.chainID, declared by the selectablefield marker below.
const FieldChainDeploymentChain = "spec.chainID"

// Finalizers of the chain kinds: a Chain removes its ChainDeployments, and a ChainDeployment its chainlet
// ModelDeployments, before they go (owner references do too where a garbage collector runs; the finalizers make
// it happen without one, and in order).
const (
	ChainFinalizer           = "gateway.modelgate.io/chain"
	ChainDeploymentFinalizer = "gateway.modelgate.io/chain-deployment"
)

// EnvChainletURLs is the environment variable, and the status field's meaning, that gives a chainlet the
// addresses of the other chainlets of its deployment: a JSON object from chainlet name to base URL.
const EnvChainletURLs = "MODELGATE_CHAINLET_URLS"

// chainletModelPrefix makes the modelID of a chainlet deployment one that no Model can have ("_" is not allowed
// in an object name, and is in a label value), so the model routes and the model REST API never see chainlets.
const chainletModelPrefix = "chain_"

// ChainletModelID is spec.modelID of the ModelDeployments that run the chainlets of chain chainID.
func ChainletModelID(chainID string) string { return chainletModelPrefix + chainID }

// ChainOfModelID is the chain whose chainlets run under modelID, and false when modelID is a model's.
func ChainOfModelID(modelID string) (string, bool) {
	return strings.CutPrefix(modelID, chainletModelPrefix)
}

// ChainEnvironment points a named environment of a Chain at one of its ChainDeployments.
type ChainEnvironment struct {
	// name is the environment's name: lowercase letters, digits and hyphens. "production" is required.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name"`

	// deployment is the name of the ChainDeployment this environment serves; empty until one is promoted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Deployment string `json:"deployment,omitempty"`
}

// ChainSpec is a chain of the workspace: its environments, each a pointer to one of its deployments.
//
// +kubebuilder:validation:XValidation:rule="self.environments.exists(e, e.name == 'production')",message="a production environment is required",fieldPath=".environments"
// +kubebuilder:validation:XValidation:rule="self.environments.all(e, e.name != 'development')",message="development is not an environment: set spec.development to a deployment name",fieldPath=".environments"
type ChainSpec struct {
	// displayName is the chain's name as people see it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	DisplayName string `json:"displayName,omitempty"`

	// teamID is the team that owns the chain; empty means the whole workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TeamID string `json:"teamID,omitempty"`

	// environments are the chain's environments, each pointing at the ChainDeployment it serves.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Environments []ChainEnvironment `json:"environments"`

	// development is the name of the ChainDeployment the /development routes serve; empty when there is none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Development string `json:"development,omitempty"`
}

// ChainStatus is the observed state of a Chain.
type ChainStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// deploymentsCount is how many deployments the chain has.
	// +optional
	DeploymentsCount int32 `json:"deploymentsCount"`

	// environments show each environment's current deployment and its status.
	// +optional
	// +listType=atomic
	Environments []EnvironmentStatus `json:"environments,omitempty"`

	// conditions: Ready is True when production points at a deployment that exists.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Chain is a pipeline of chainlets deployed as one unit (name = chain_id): environments pointing at its
// ChainDeployments.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Production",type=string,JSONPath=`.spec.environments[?(@.name=="production")].deployment`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.environments[?(@.name=="production")].status`
// +kubebuilder:printcolumn:name="Deployments",type=integer,JSONPath=`.status.deploymentsCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Chain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the chain.
	// +required
	Spec ChainSpec `json:"spec"`

	// status is the observed state of the chain.
	// +optional
	Status ChainStatus `json:"status,omitempty"`
}

// ChainList is a list of Chains.
// +kubebuilder:object:root=true
type ChainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Chain `json:"items"`
}

var _ Environmental = &Chain{}

func (c *Chain) environmentAt(i int) (string, *string) {
	return c.Spec.Environments[i].Name, &c.Spec.Environments[i].Deployment
}

// EnvironmentPointers implements Environmental.
func (c *Chain) EnvironmentPointers() []EnvironmentPointer {
	if c == nil {
		return nil
	}
	return environmentPointers(len(c.Spec.Environments), c.environmentAt, c.Spec.Development)
}

// Environment returns the ChainDeployment that environment name points at: "development" reads
// spec.development. ok is false when the chain has no such environment.
func (c *Chain) Environment(name string) (deployment string, ok bool) {
	return pointedAt(c.EnvironmentPointers(), name)
}

// EnvironmentsOf returns the environments of c that point at deployment, "development" included, sorted.
func (c *Chain) EnvironmentsOf(deployment string) []string {
	return environmentsOf(c.EnvironmentPointers(), deployment)
}

// PointEnvironment implements Environmental.
func (c *Chain) PointEnvironment(name, deployment string) {
	pointEnvironment(len(c.Spec.Environments), c.environmentAt, &c.Spec.Development, name, deployment)
}

// OwnerTeam implements Environmental.
func (c *Chain) OwnerTeam() string { return c.Spec.TeamID }

// Chainlet is one step of a chain: a server of its own, scaled on its own.
type Chainlet struct {
	// name is the chainlet's name, its key in MODELGATE_CHAINLET_URLS: lowercase letters, digits and hyphens.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=30
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name"`

	// source is where the chainlet's server runs, as for a ModelDeployment. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a chainlet's source is immutable: create another ChainDeployment instead"
	Source DeploymentSource `json:"source"`

	// autoscaling bounds the chainlet's replicas. A chainlet other than the entrypoint runs at least one replica
	// while its chain deployment serves: the others call it at its own address, past gatewayd, so no call would
	// wake it from zero. When a promotion scales the whole chain deployment down, it is woken with the entrypoint.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// ChainDeploymentSpec is one immutable version of a chain: its chainlets and which of them answers the caller.
//
// +kubebuilder:validation:XValidation:rule="self.chainlets.exists(c, c.name == self.entrypoint)",message="entrypoint must name one of spec.chainlets",fieldPath=".entrypoint"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.chainlets) || self.chainlets.map(c, c.name) == oldSelf.chainlets.map(c, c.name)",message="chainlets cannot be added, removed or reordered: create another ChainDeployment instead",fieldPath=".chainlets"
type ChainDeploymentSpec struct {
	// chainID is the Chain this deployment belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="chainID is immutable: create a deployment of the other chain instead"
	ChainID string `json:"chainID"`

	// entrypoint is the name of the chainlet that run_remote calls. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=30
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="entrypoint is immutable: create another ChainDeployment instead"
	Entrypoint string `json:"entrypoint"`

	// chainlets are the chain's steps; names are unique.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Chainlets []Chainlet `json:"chainlets"`
}

// Chainlet returns the chainlet named name, nil when there is none.
func (s *ChainDeploymentSpec) Chainlet(name string) *Chainlet {
	for i := range s.Chainlets {
		if s.Chainlets[i].Name == name {
			return &s.Chainlets[i]
		}
	}
	return nil
}

// ChainletStatus is the observed state of one chainlet.
type ChainletStatus struct {
	// name is the chainlet's name.
	Name string `json:"name"`

	// deployment is the ModelDeployment that runs it.
	// +optional
	Deployment string `json:"deployment,omitempty"`

	// status is that deployment's status; empty until it reports one.
	// +optional
	Status DeploymentStatus `json:"status,omitempty"`

	// activeReplicaCount is how many of its replicas are ready.
	// +optional
	ActiveReplicaCount int32 `json:"activeReplicaCount"`

	// url is the chainlet's base address, as the other chainlets reach it.
	// +optional
	URL string `json:"url,omitempty"`

	// chainletURLs is MODELGATE_CHAINLET_URLS for this chainlet: the other chainlets' base addresses by name. A
	// container source gets it as that environment variable; a service or url source, run by someone else,
	// reads it here.
	// +optional
	ChainletURLs map[string]string `json:"chainletURLs,omitempty"`
}

// ChainDeploymentStatus is the observed state of a ChainDeployment.
type ChainDeploymentStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// status is the worst of the chainlets' statuses (see WorstStatus).
	// +optional
	Status DeploymentStatus `json:"status,omitempty"`

	// chainlets are each chainlet's deployment, status and addresses, in spec order.
	// +optional
	// +listType=atomic
	Chainlets []ChainletStatus `json:"chainlets,omitempty"`

	// environments are the environments of the Chain that serve this deployment ("development" included).
	// +optional
	// +listType=atomic
	Environments []string `json:"environments,omitempty"`

	// conditions: Ready is True while every chainlet can serve a call now.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ChainDeployment is one deployment of a Chain (name = deployment_id): one ModelDeployment per chainlet.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate,shortName=cdep
// +kubebuilder:selectablefield:JSONPath=`.spec.chainID`
// +kubebuilder:printcolumn:name="Chain",type=string,JSONPath=`.spec.chainID`
// +kubebuilder:printcolumn:name="Entrypoint",type=string,JSONPath=`.spec.entrypoint`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ChainDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the chain deployment.
	// +required
	Spec ChainDeploymentSpec `json:"spec"`

	// status is the observed state of the chain deployment.
	// +optional
	Status ChainDeploymentStatus `json:"status,omitempty"`
}

// ChainDeploymentList is a list of ChainDeployments.
// +kubebuilder:object:root=true
type ChainDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ChainDeployment `json:"items"`
}

// ChainletDeploymentName is the name of the ModelDeployment that runs chainlet of cd.
func (cd *ChainDeployment) ChainletDeploymentName(chainlet string) string {
	return cd.Name + "-" + chainlet
}

// ChainletURL is the base address at which the other chainlets reach chainlet c of cd: a url source's URL, or
// the in-cluster name of the Service that a container source runs as or a service source names.
func (cd *ChainDeployment) ChainletURL(c *Chainlet) string {
	switch src := c.Source; {
	case src.URL != "":
		return strings.TrimRight(src.URL, "/")
	case src.Container != nil:
		md := ModelDeployment{}
		md.Name = cd.ChainletDeploymentName(c.Name)
		port := src.Container.Port
		if port == 0 {
			port = 8080
		}
		return fmt.Sprintf("http://%s.%s.svc:%d", md.WorkloadName(), cd.Namespace, port)
	case src.Service != nil:
		return fmt.Sprintf("http://%s.%s.svc:%d", src.Service.Name, cd.Namespace, src.Service.Port)
	}
	return ""
}

// ChainletURLs is MODELGATE_CHAINLET_URLS of chainlet name of cd: every other chainlet's address by name.
func (cd *ChainDeployment) ChainletURLs(name string) map[string]string {
	out := make(map[string]string, len(cd.Spec.Chainlets))
	for i := range cd.Spec.Chainlets {
		if c := &cd.Spec.Chainlets[i]; c.Name != name {
			out[c.Name] = cd.ChainletURL(c)
		}
	}
	return out
}

// ChainletURLsJSON is ChainletURLs as the JSON object of the environment variable (keys sorted).
func (cd *ChainDeployment) ChainletURLsJSON(name string) string {
	b, _ := json.Marshal(cd.ChainletURLs(name)) // a map of strings always marshals
	return string(b)
}

// statusSeverity orders deployment states from healthy to worst: a chain deployment is as healthy as its
// least healthy chainlet. A failure outranks anything in progress, which outranks a healthy state.
var statusSeverity = map[DeploymentStatus]int{
	StatusActive:       0,
	StatusScaledToZero: 1,
	StatusUpdating:     2,
	StatusWakingUp:     3,
	StatusLoadingModel: 4,
	StatusDeploying:    5,
	StatusBuilding:     6,
	StatusDeactivating: 7,
	StatusInactive:     8,
	StatusUnhealthy:    9,
	StatusBuildStopped: 10,
	StatusFailed:       11,
	StatusBuildFailed:  12,
	StatusDeployFailed: 13,
}

// WorstStatus is the least healthy of statuses; an empty status (a chainlet not observed yet) counts as
// DEPLOYING, and no statuses at all is DEPLOYING too.
func WorstStatus(statuses ...DeploymentStatus) DeploymentStatus {
	worst := StatusActive
	if len(statuses) == 0 {
		return StatusDeploying
	}
	for _, s := range statuses {
		if s == "" {
			s = StatusDeploying
		}
		if statusSeverity[s] > statusSeverity[worst] {
			worst = s
		}
	}
	return worst
}
