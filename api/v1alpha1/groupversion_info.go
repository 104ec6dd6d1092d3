// Package v1alpha1 holds the gateway.modelgate.io/v1alpha1 API: the Workspace, Group, APIKey, Endpoint,
// WorkspaceAPIKey, Model, ModelDeployment, Chain and ChainDeployment custom resources that kubectl, GitOps and the REST API all write.
// It imports nothing beyond apimachinery, so clients can depend on it cheaply.
//
// +kubebuilder:object:generate=true
// +groupName=gateway.modelgate.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "gateway.modelgate.io", Version: "v1alpha1"}

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Workspace{}, &WorkspaceList{},
		&Group{}, &GroupList{},
		&APIKey{}, &APIKeyList{},
		&Endpoint{}, &EndpointList{},
		&WorkspaceAPIKey{}, &WorkspaceAPIKeyList{},
		&Model{}, &ModelList{},
		&ModelDeployment{}, &ModelDeploymentList{},
		&Team{}, &TeamList{},
		&SandboxImage{}, &SandboxImageList{},
		&SandboxImageBuild{}, &SandboxImageBuildList{},
		&Chain{}, &ChainList{},
		&ChainDeployment{}, &ChainDeploymentList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
