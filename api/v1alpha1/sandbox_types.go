package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxStatus is where a sandbox image push is (docs/rest-api.md "Sandbox images"). Only BUILT images are ready.
// +kubebuilder:validation:Enum=UPLOADING;BUILDING;BUILT;FAILED
type SandboxStatus string

const (
	// SandboxUploading waits for the caller to PUT the build context to the upload URL.
	SandboxUploading SandboxStatus = "UPLOADING"
	// SandboxBuilding is an import or a build in progress on the control plane.
	SandboxBuilding SandboxStatus = "BUILDING"
	// SandboxBuilt: the tag exists in the workspace registry.
	SandboxBuilt SandboxStatus = "BUILT"
	// SandboxFailed: the push ended without a tag; reason says why.
	SandboxFailed SandboxStatus = "FAILED"
)

// Labels of the sandbox objects.
const (
	// LabelSandboxImage names the SandboxImage object a SandboxImageBuild (and its Secret) belongs to.
	LabelSandboxImage = "gateway.modelgate.io/sandbox-image"
	// LabelSandboxTeam is the team of a SandboxImage or SandboxImageBuild.
	LabelSandboxTeam = "gateway.modelgate.io/team"
	// AnnotationLatestBuild on a SandboxImage names the build of the latest push. The POST writes it before it
	// answers, so the image's status is read from the newest build, never from a previous push.
	AnnotationLatestBuild = "gateway.modelgate.io/latest-build"
	// DockerConfigKey is the Secret entry holding a docker config JSON (as kubernetes.io/dockerconfigjson).
	DockerConfigKey = ".dockerconfigjson"
)

// SandboxImageObjectName is the object name of the SandboxImage of (team, name): a hash, because a repository
// name may hold characters ('/', '_') that an object name may not, and one object per team and name makes a
// concurrent first push of the same name a conflict the API server settles.
func SandboxImageObjectName(teamID, name string) string {
	sum := sha256.Sum256([]byte(teamID + "\x00" + name))
	return "img-" + hex.EncodeToString(sum[:10])
}

// SandboxImageSpec names an image repository of a team.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: the object name is derived from teamID and name"
type SandboxImageSpec struct {
	// teamID is the team the repository belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	TeamID string `json:"teamID"`

	// name is the repository name within the team, as a registry repository name: lowercase path components of
	// letters and digits joined by '.', '_', '__' or '-', separated by '/'.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`
	Name string `json:"name"`
}

// SandboxImageTag is one service-assigned tag of a repository.
type SandboxImageTag struct {
	// name is the tag: v1, v2, ... (latest is implied by the highest version and not listed).
	// +required
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// digest is the manifest digest the tag points at.
	// +required
	// +kubebuilder:validation:MaxLength=100
	Digest string `json:"digest"`
	// build is the SandboxImageBuild that produced the tag; a build interrupted after its tag was recorded finds
	// it here and takes no second one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Build string `json:"build,omitempty"`
	// created_at is when the tag was recorded.
	// +required
	CreatedAt metav1.Time `json:"createdAt"`
	// sizeBytes is the sum of the sizes of the manifest, config and layers (of every platform of an index).
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// SandboxImageStatus is the observed state of a SandboxImage.
type SandboxImageStatus struct {
	// status is the status of the latest push as the manager last recorded it. The REST API reads the latest
	// build itself (annotation gateway.modelgate.io/latest-build), which is never behind.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`

	// lastVersion is the highest version number assigned (tag v<lastVersion>). Written with optimistic
	// concurrency, so two builds never take the same tag.
	// +optional
	LastVersion int64 `json:"lastVersion,omitempty"`

	// tags are the assigned tags, oldest first.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	Tags []SandboxImageTag `json:"tags,omitempty"`
}

// SandboxImage is an image repository of a team in the workspace registry (Workspace.spec.imageRegistry). Its
// object name is SandboxImageObjectName(teamID, name).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Team",type=string,JSONPath=`.spec.teamID`
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Version",type=integer,JSONPath=`.status.lastVersion`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the repository.
	// +required
	Spec SandboxImageSpec `json:"spec"`

	// status holds its tags.
	// +optional
	Status SandboxImageStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SandboxImageList is a list of SandboxImages.
type SandboxImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxImage `json:"items"`
}

// SandboxImport copies an image from another registry.
type SandboxImport struct {
	// image is the source reference, registry hostname included (for example ghcr.io/org/app:1.2).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`

	// dockerConfigSecretRef names a Secret (entry .dockerconfigjson) with the credentials for a private source.
	// It is owned by the build and deleted with it.
	// +optional
	DockerConfigSecretRef *SecretKeySelector `json:"dockerConfigSecretRef,omitempty"`
}

// SandboxUpload builds from a ZIP (a Dockerfile and its context) that the caller PUTs to the signed upload URL.
type SandboxUpload struct{}

// SandboxSource is where the image comes from. Exactly one applies.
// +kubebuilder:validation:XValidation:rule="has(self.upload) != has(self.import)",message="exactly one of upload and import must be set"
type SandboxSource struct {
	// upload builds from an uploaded ZIP.
	// +optional
	Upload *SandboxUpload `json:"upload,omitempty"`

	// import copies a registry image.
	// +optional
	Import *SandboxImport `json:"import,omitempty"`
}

// SandboxImageBuildSpec is one push: an import or a build into the repository imageRef.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a SandboxImageBuild is immutable: push again for a new version"
type SandboxImageBuildSpec struct {
	// imageRef is the name of the SandboxImage object the result is tagged into.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ImageRef string `json:"imageRef"`

	// teamID is the team of the SandboxImage.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	TeamID string `json:"teamID"`

	// source is where the image comes from.
	// +required
	Source SandboxSource `json:"source"`
}

// SandboxImageBuildStatus is the observed state of one push.
type SandboxImageBuildStatus struct {
	// status is where the push is.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`

	// reason is a sentence saying why a push FAILED.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`

	// contextDigest is the manifest digest of the uploaded build context in the workspace registry, recorded by
	// gatewayd once the upload is complete.
	// +optional
	// +kubebuilder:validation:MaxLength=100
	ContextDigest string `json:"contextDigest,omitempty"`

	// tag is the tag assigned once the image is in the registry (v1, v2, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Tag string `json:"tag,omitempty"`

	// digest is the manifest (or index) digest of the result.
	// +optional
	// +kubebuilder:validation:MaxLength=100
	Digest string `json:"digest,omitempty"`

	// jobName is the BuildKit Job running the build, when the BuildKit backend builds it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	JobName string `json:"jobName,omitempty"`

	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (True once BUILT; False with reason Uploading, Building or Failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Reasons of a SandboxImageBuild's Ready condition.
const (
	ReasonSandboxUploading = "Uploading"
	ReasonSandboxBuilding  = "Building"
	ReasonSandboxBuilt     = "Built"
	ReasonSandboxFailed    = "Failed"
)

// Phase is the status of the build, with an unwritten status read from its source: an upload waits for its
// context, an import is being processed.
func (b *SandboxImageBuild) Phase() SandboxStatus {
	switch {
	case b.Status.Status != "":
		return b.Status.Status
	case b.Spec.Source.Upload != nil && b.Status.ContextDigest == "":
		return SandboxUploading
	}
	return SandboxBuilding
}

// Terminal is true once the build is BUILT or FAILED.
func (s SandboxStatus) Terminal() bool { return s == SandboxBuilt || s == SandboxFailed }

// SandboxImageBuild is one push (an import or a build) of a SandboxImage, immutable. The manager runs it and
// assigns the tag when it succeeds.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=modelgate
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.imageRef`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Tag",type=string,JSONPath=`.status.tag`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxImageBuild struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the push.
	// +required
	Spec SandboxImageBuildSpec `json:"spec"`

	// status is its progress.
	// +optional
	Status SandboxImageBuildStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SandboxImageBuildList is a list of SandboxImageBuilds.
type SandboxImageBuildList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxImageBuild `json:"items"`
}

// ImageRegistry is the registry a workspace's sandbox images are pushed to.
type ImageRegistry struct {
	// url is the registry and repository prefix, for example registry.example.com/sandboxes. Repositories are
	// <url>/<team>/<name>. The prefix http:// selects plain HTTP (development registries only).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	URL string `json:"url"`

	// secretRef names a Secret entry (key defaults to .dockerconfigjson) with docker config credentials for the
	// registry.
	// +optional
	SecretRef *SecretKeySelector `json:"secretRef,omitempty"`
}
