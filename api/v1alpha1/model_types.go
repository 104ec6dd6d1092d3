package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Environment names with a meaning of their own. Every Model has a production environment; development is the
// Model's spec.development pointer, addressed like an environment by the model routes.
const (
	EnvironmentProduction  = "production"
	EnvironmentDevelopment = "development"
)

// LabelModel, on a ModelDeployment, names its Model. The controller sets it; a user who sets it must set it to
// spec.modelID.
const LabelModel = "gateway.modelgate.io/model"

// FieldDeploymentModel selects ModelDeployments by spec.modelID, declared by the selectablefield marker below.
const FieldDeploymentModel = "spec.modelID"

// Annotations the manager and gatewayd write on a ModelDeployment.
const (
	// AnnotationScaledDownAt (RFC 3339) asks the manager to scale a deployment to zero, as promote does to the
	// deployment it replaces. A later AnnotationWakeRequestedAt brings it back.
	AnnotationScaledDownAt = "gateway.modelgate.io/scaled-down-at"
	// AnnotationWakeRequestedAt (RFC 3339) asks the manager to bring a deployment scaled to zero back.
	AnnotationWakeRequestedAt = "gateway.modelgate.io/wake-requested-at"
)

// ModelDeploymentFinalizer lets the manager remove what a container source created before the object goes.
const ModelDeploymentFinalizer = "gateway.modelgate.io/model-deployment"

// ModelEnvironment points a named environment of a Model at one of its deployments.
type ModelEnvironment struct {
	// name is the environment's name: lowercase letters, digits and hyphens. "production" is required.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name"`

	// deployment is the name of the ModelDeployment this environment serves; empty until one is promoted.
	// Changing it is a promotion: one atomic patch.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Deployment string `json:"deployment,omitempty"`

	// autoscaling overrides the served deployment's autoscaling while it serves this environment.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// ModelSpec is a model of the workspace: its environments, each a pointer to one of its deployments.
//
// +kubebuilder:validation:XValidation:rule="self.environments.exists(e, e.name == 'production')",message="a production environment is required",fieldPath=".environments"
// +kubebuilder:validation:XValidation:rule="self.environments.all(e, e.name != 'development')",message="development is not an environment: set spec.development to a deployment name",fieldPath=".environments"
type ModelSpec struct {
	// displayName is the model's name as people see it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]') && !self.startsWith(' ') && !self.endsWith(' ')",message="must not contain control characters, nor begin or end with a space"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\p{Cf}\x{A0}\x{2007}\x{202F}]')`,message="must not contain invisible characters: bidirectional controls, zero-width or other format characters, non-breaking spaces"
	DisplayName string `json:"displayName,omitempty"`

	// teamID is the team that owns the model; empty means the whole workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TeamID string `json:"teamID,omitempty"`

	// environments are the model's environments, each pointing at the deployment it serves.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Environments []ModelEnvironment `json:"environments"`

	// development is the name of the deployment the /development routes serve; empty when there is none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Development string `json:"development,omitempty"`
}

// Autoscaling bounds how many replicas serve a deployment.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplica) || !has(self.maxReplica) || self.minReplica <= self.maxReplica",message="minReplica must not exceed maxReplica",fieldPath=".minReplica"
type Autoscaling struct {
	// minReplica is the fewest replicas while active; 0 lets the deployment scale to zero when idle.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinReplica *int32 `json:"minReplica,omitempty"`

	// maxReplica is the most replicas the autoscaler may run.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplica *int32 `json:"maxReplica,omitempty"`

	// concurrencyTarget is how many calls at once one replica is meant to serve.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	ConcurrencyTarget *int32 `json:"concurrencyTarget,omitempty"`

	// scaleDownDelaySeconds is how long after its last call a deployment waits before it scales down.
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	ScaleDownDelaySeconds *int32 `json:"scaleDownDelaySeconds,omitempty"`
}

// ContainerSource runs the model server image in pods the manager creates: a Deployment and a Service.
type ContainerSource struct {
	// image is the model server's image reference.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`

	// command overrides the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args overrides the image's arguments.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env is the server's environment.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Env []EnvVar `json:"env,omitempty"`

	// port is the port the server listens on.
	// +optional
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// resources are the server container's requests and limits, as quantities by resource name ("cpu",
	// "memory", "nvidia.com/gpu").
	// +optional
	Resources *Resources `json:"resources,omitempty"`
}

// EnvVar is one environment variable of a model server.
//
// +kubebuilder:validation:XValidation:rule="!has(self.secretKeyRef) || (has(self.secretKeyRef.key) && size(self.secretKeyRef.key) > 0)",message="secretKeyRef.key is required: name the Secret entry that holds the value",fieldPath=".secretKeyRef.key"
// +kubebuilder:validation:XValidation:rule="!(has(self.secretKeyRef) && has(self.value) && size(self.value) > 0)",message="give value or secretKeyRef, not both"
type EnvVar struct {
	// name is the variable's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z][-._a-zA-Z0-9]*$`
	Name string `json:"name"`

	// value is the variable's value.
	// +optional
	Value string `json:"value,omitempty"`

	// secretKeyRef takes the value from a Secret entry of the namespace.
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// Resources are a container's requests and limits.
type Resources struct {
	// requests are the quantities the scheduler reserves.
	// +optional
	Requests map[string]string `json:"requests,omitempty"`

	// limits are the quantities the container may not exceed.
	// +optional
	Limits map[string]string `json:"limits,omitempty"`
}

// ScaleTargetRef names a workload with a scale subresource.
type ScaleTargetRef struct {
	// apiVersion of the workload, for example "apps/v1".
	// +required
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`

	// kind of the workload, for example "Deployment".
	// +required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`

	// name of the workload, in the deployment's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ServiceSource routes to an existing Service run by something else (a vLLM, Triton or KServe server).
type ServiceSource struct {
	// name is the Service's name, in the deployment's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// port is the Service port to call.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// scaleTargetRef names what activation and the autoscaler scale, through its scale subresource. Without it,
	// activation only gates traffic.
	// +optional
	ScaleTargetRef *ScaleTargetRef `json:"scaleTargetRef,omitempty"`
}

// DeploymentSource is where a deployment's server runs. Exactly one field is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.container), has(self.service), has(self.url)].filter(x, x).size() == 1",message="exactly one of container, service and url must be set"
type DeploymentSource struct {
	// container runs an image in pods the manager creates.
	// +optional
	Container *ContainerSource `json:"container,omitempty"`

	// service routes to an existing Service's ready endpoints.
	// +optional
	Service *ServiceSource `json:"service,omitempty"`

	// url is a server outside the cluster, as an absolute http(s) base URL. Activation only gates traffic.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="url must be an absolute http or https URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^:/?#]+://[^/?#]*@')",message="url must not carry credentials (user:password@)"
	URL string `json:"url,omitempty"`
}

// Kind returns which source is set: "container", "service", "url", or "" when none is.
func (s DeploymentSource) Kind() string {
	switch {
	case s.Container != nil:
		return "container"
	case s.Service != nil:
		return "service"
	case s.URL != "":
		return "url"
	}
	return ""
}

// ModelDeploymentSpec is one immutable version of a model's server, like a Knative revision: only active,
// autoscaling and retryNonce change after creation.
type ModelDeploymentSpec struct {
	// modelID is the Model this deployment belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="modelID is immutable: create a deployment of the other model instead"
	ModelID string `json:"modelID"`

	// source is where the server runs. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="source is immutable: create another deployment instead"
	Source DeploymentSource `json:"source"`

	// active gates traffic: an inactive deployment runs no replicas and its routes answer 404.
	// +optional
	// +kubebuilder:default=true
	Active *bool `json:"active,omitempty"`

	// autoscaling bounds the replicas while active.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`

	// startupTimeoutSeconds is how long a replica may take to become ready before the deployment is
	// DEPLOY_FAILED, and the longest a call is held while the deployment starts. Immutable.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="startupTimeoutSeconds is immutable: create another deployment instead"
	StartupTimeoutSeconds int32 `json:"startupTimeoutSeconds,omitempty"`

	// predictPath is the server's path for predict calls. Immutable.
	// +optional
	// +kubebuilder:default="/predict"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[!-~]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="predictPath is immutable: create another deployment instead"
	PredictPath string `json:"predictPath,omitempty"`

	// readinessPath is the server's path that answers 2xx once it can serve. Immutable.
	// +optional
	// +kubebuilder:default="/health"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[!-~]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="readinessPath is immutable: create another deployment instead"
	ReadinessPath string `json:"readinessPath,omitempty"`

	// retryNonce, when changed, makes the manager deploy a failed deployment again.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryNonce int64 `json:"retryNonce,omitempty"`
}

// IsActive reports spec.active, which defaults to true.
func (s *ModelDeploymentSpec) IsActive() bool { return s.Active == nil || *s.Active }

// DeploymentStatus is a deployment's state, by the names of the API this one mirrors.
// +kubebuilder:validation:Enum=BUILDING;DEPLOYING;DEPLOY_FAILED;LOADING_MODEL;ACTIVE;UNHEALTHY;BUILD_FAILED;BUILD_STOPPED;DEACTIVATING;INACTIVE;FAILED;UPDATING;SCALED_TO_ZERO;WAKING_UP
type DeploymentStatus string

// The deployment states.
const (
	StatusBuilding     DeploymentStatus = "BUILDING"
	StatusDeploying    DeploymentStatus = "DEPLOYING"
	StatusDeployFailed DeploymentStatus = "DEPLOY_FAILED"
	StatusLoadingModel DeploymentStatus = "LOADING_MODEL"
	StatusActive       DeploymentStatus = "ACTIVE"
	StatusUnhealthy    DeploymentStatus = "UNHEALTHY"
	StatusBuildFailed  DeploymentStatus = "BUILD_FAILED"
	StatusBuildStopped DeploymentStatus = "BUILD_STOPPED"
	StatusDeactivating DeploymentStatus = "DEACTIVATING"
	StatusInactive     DeploymentStatus = "INACTIVE"
	StatusFailed       DeploymentStatus = "FAILED"
	StatusUpdating     DeploymentStatus = "UPDATING"
	StatusScaledToZero DeploymentStatus = "SCALED_TO_ZERO"
	StatusWakingUp     DeploymentStatus = "WAKING_UP"
)

// Retryable reports whether retry may redeploy a deployment in this state.
func (s DeploymentStatus) Retryable() bool {
	return s == StatusDeployFailed || s == StatusBuildFailed || s == StatusFailed
}

// Promotable reports whether an environment may be pointed at a deployment in this state.
func (s DeploymentStatus) Promotable() bool { return s == StatusActive || s == StatusScaledToZero }

// ModelDeploymentStatus is the observed state of a deployment.
type ModelDeploymentStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// status is the deployment's state.
	// +optional
	Status DeploymentStatus `json:"status,omitempty"`

	// activeReplicaCount is how many replicas are ready to serve.
	// +optional
	ActiveReplicaCount int32 `json:"activeReplicaCount"`

	// environments are the environments of the Model that serve this deployment ("development" included).
	// +optional
	// +listType=atomic
	Environments []string `json:"environments,omitempty"`

	// readySince is when the deployment first became ready since it was last (re)deployed; a deployment that has
	// never been ready is never scaled down.
	// +optional
	ReadySince *metav1.Time `json:"readySince,omitempty"`

	// deployingSince is when the current attempt to deploy started: creation, activation or a retry.
	// +optional
	DeployingSince *metav1.Time `json:"deployingSince,omitempty"`

	// observedRetryNonce is the spec.retryNonce of the current attempt.
	// +optional
	ObservedRetryNonce int64 `json:"observedRetryNonce,omitempty"`

	// service is the Service gatewayd routes to for container and service sources, and portName its port's
	// name in the Service's EndpointSlices ("" when the Service has one unnamed port).
	// +optional
	Service string `json:"service,omitempty"`
	// +optional
	PortName string `json:"portName,omitempty"`

	// conditions: Ready is True while the deployment can serve a call now.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ModelDeployment is one deployment of a Model (name = deployment_id).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate,shortName=mdep
// +kubebuilder:selectablefield:JSONPath=`.spec.modelID`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.modelID`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.activeReplicaCount`
// +kubebuilder:printcolumn:name="Environments",type=string,JSONPath=`.status.environments`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the deployment.
	// +required
	Spec ModelDeploymentSpec `json:"spec"`

	// status is the observed state of the deployment.
	// +optional
	Status ModelDeploymentStatus `json:"status,omitempty"`
}

// ModelDeploymentList is a list of ModelDeployments.
// +kubebuilder:object:root=true
type ModelDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelDeployment `json:"items"`
}

// EnvironmentStatus is what one environment of a Model serves now.
type EnvironmentStatus struct {
	// name is the environment's name ("development" for spec.development).
	Name string `json:"name"`
	// deployment is the deployment it points at.
	// +optional
	Deployment string `json:"deployment,omitempty"`
	// status is that deployment's status; empty when it does not exist.
	// +optional
	Status DeploymentStatus `json:"status,omitempty"`
}

// ModelStatus is the observed state of a Model.
type ModelStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// deploymentsCount is how many deployments the model has.
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

// Model is a model of the workspace (name = model_id): environments pointing at its deployments.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Production",type=string,JSONPath=`.spec.environments[?(@.name=="production")].deployment`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.environments[?(@.name=="production")].status`
// +kubebuilder:printcolumn:name="Deployments",type=integer,JSONPath=`.status.deploymentsCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Model struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the model.
	// +required
	Spec ModelSpec `json:"spec"`

	// status is the observed state of the model.
	// +optional
	Status ModelStatus `json:"status,omitempty"`
}

// ModelList is a list of Models.
// +kubebuilder:object:root=true
type ModelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Model `json:"items"`
}

var _ Environmental = &Model{}

func (m *Model) environmentAt(i int) (string, *string) {
	return m.Spec.Environments[i].Name, &m.Spec.Environments[i].Deployment
}

// EnvironmentPointers implements Environmental.
func (m *Model) EnvironmentPointers() []EnvironmentPointer {
	if m == nil {
		return nil
	}
	return environmentPointers(len(m.Spec.Environments), m.environmentAt, m.Spec.Development)
}

// Environment returns the deployment that environment name points at: "development" reads spec.development.
// ok is false when the model has no such environment.
func (m *Model) Environment(name string) (deployment string, ok bool) {
	return pointedAt(m.EnvironmentPointers(), name)
}

// EnvironmentsOf returns the environments of m that point at deployment, "development" included, sorted.
func (m *Model) EnvironmentsOf(deployment string) []string {
	return environmentsOf(m.EnvironmentPointers(), deployment)
}

// PointEnvironment implements Environmental.
func (m *Model) PointEnvironment(name, deployment string) {
	pointEnvironment(len(m.Spec.Environments), m.environmentAt, &m.Spec.Development, name, deployment)
}

// OwnerTeam implements Environmental.
func (m *Model) OwnerTeam() string { return m.Spec.TeamID }

// ModelPortName names a container source's port in its pod and Service, so the Service's EndpointSlices carry it.
const ModelPortName = "http"

// WorkloadName is the name of the Deployment and Service that a container source runs as. The prefix keeps them
// apart from the user's own objects.
func (md *ModelDeployment) WorkloadName() string { return "md-" + md.Name }
