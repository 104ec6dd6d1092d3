package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EnvironmentPointer is one environment of a Model or a Chain and the deployment it points at.
//
// +kubebuilder:object:generate=false
type EnvironmentPointer struct {
	// Name is the environment's name; "development" stands for spec.development.
	Name string
	// Deployment is the deployment it serves, empty until one is promoted.
	Deployment string
	// Path is where the pointer is written: spec.environments[i].deployment or spec.development.
	Path *field.Path
}

// Environmental is what a Model and a Chain share: named environments, each a pointer at one of the object's
// own deployments by name, and spec.development. The webhooks, the reconcilers and REST read both kinds through
// it, so a rule about environment pointers is written once.
//
// +kubebuilder:object:generate=false
type Environmental interface {
	// EnvironmentPointers are the environments in spec order, "development" last when spec.development is set.
	// A nil object has none.
	EnvironmentPointers() []EnvironmentPointer
	// Environment returns the deployment environment name points at; ok is false when there is no such
	// environment ("development" exists only while spec.development is set).
	Environment(name string) (deployment string, ok bool)
	// EnvironmentsOf returns the environments that point at deployment, "development" included, sorted.
	EnvironmentsOf(deployment string) []string
	// PointEnvironment points environment name at deployment (a promotion); an unknown name changes nothing.
	PointEnvironment(name, deployment string)
	// OwnerTeam is the team that owns the object (spec.teamID); empty means the whole workspace.
	OwnerTeam() string
}

var (
	environmentsPath = field.NewPath("spec", "environments")
	developmentPath  = field.NewPath("spec", "development")
)

// environmentPointers lists the n environments of spec.environments (the i-th by at) and then development.
func environmentPointers(n int, at func(i int) (name string, deployment *string), development string) []EnvironmentPointer {
	out := make([]EnvironmentPointer, 0, n+1)
	for i := range n {
		name, d := at(i)
		out = append(out, EnvironmentPointer{Name: name, Deployment: *d, Path: environmentsPath.Index(i).Child("deployment")})
	}
	if development != "" {
		out = append(out, EnvironmentPointer{Name: EnvironmentDevelopment, Deployment: development, Path: developmentPath})
	}
	return out
}

// InvalidPointer refuses a pointer whose deployment could be no object's name ("a/b", "../x"): the deployment
// it names cannot exist, and the webhook that looks it up must refuse it as invalid rather than fail to read it.
// An empty pointer (nothing promoted yet) is valid.
func (p EnvironmentPointer) InvalidPointer() *field.Error {
	if p.Deployment == "" {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(p.Deployment); len(msgs) > 0 {
		return field.Invalid(p.Path, p.Deployment, "must name a deployment: "+msgs[0])
	}
	return nil
}

// pointedAt is Environmental.Environment over ps.
func pointedAt(ps []EnvironmentPointer, name string) (string, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p.Deployment, true
		}
	}
	return "", false
}

// environmentsOf is Environmental.EnvironmentsOf over ps.
func environmentsOf(ps []EnvironmentPointer, deployment string) []string {
	var out []string
	for _, p := range ps {
		if p.Deployment == deployment && deployment != "" {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// pointEnvironment is Environmental.PointEnvironment over the n environments of spec.environments (the i-th by
// at) and spec.development.
func pointEnvironment(n int, at func(i int) (name string, deployment *string), development *string, name, deployment string) {
	if name == EnvironmentDevelopment {
		*development = deployment
		return
	}
	for i := range n {
		if env, d := at(i); env == name {
			*d = deployment
		}
	}
}
