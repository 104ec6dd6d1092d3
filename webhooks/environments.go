package webhooks

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// environmental is a kind whose environments point at deployments of its own: a Model, a Chain.
type environmental interface {
	client.Object
	gatewayv1.Environmental
}

// EnvironmentsValidator refuses an object (a Model, a Chain) whose environment, or spec.development, points at
// a deployment (a ModelDeployment, a ChainDeployment) of another object, or at one being deleted. A pointer at a
// deployment that does not exist yet is admitted with a warning: GitOps applies in any order, and the object's
// status reports the missing deployment until it exists.
type EnvironmentsValidator[O environmental, D client.Object] struct {
	Reader client.Reader
	// Kind and DeploymentKind name the two kinds in refusals: "Model" and "ModelDeployment".
	Kind, DeploymentKind string
	// NewDeployment returns an empty deployment to read into; OwnerOf is the object a deployment belongs to.
	NewDeployment func() D
	OwnerOf       func(D) string
}

var (
	_ admission.Validator[*gatewayv1.Model] = NewModelValidator(nil)
	_ admission.Validator[*gatewayv1.Chain] = NewChainValidator(nil)
)

// ValidateCreate checks every pointer.
func (v *EnvironmentsValidator[O, D]) ValidateCreate(ctx context.Context, o O) (admission.Warnings, error) {
	return v.validate(ctx, nil, o)
}

// ValidateUpdate checks only the pointers the update changes, so that an object left pointing at a deployment
// it no longer owns by a race can still take unrelated writes (its finalizer, a promotion elsewhere).
func (v *EnvironmentsValidator[O, D]) ValidateUpdate(ctx context.Context, old, o O) (admission.Warnings, error) {
	if o.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	return v.validate(ctx, old.EnvironmentPointers(), o)
}

// ValidateDelete admits every deletion.
func (v *EnvironmentsValidator[O, D]) ValidateDelete(context.Context, O) (admission.Warnings, error) {
	return nil, nil
}

// changedPointers returns the non-empty pointers of o that old (nil on a create) does not already hold at the
// same environment.
func changedPointers(old []gatewayv1.EnvironmentPointer, o gatewayv1.Environmental) []gatewayv1.EnvironmentPointer {
	var out []gatewayv1.EnvironmentPointer
	for _, p := range o.EnvironmentPointers() {
		if p.Deployment == "" {
			continue
		}
		unchanged := false
		for _, q := range old {
			unchanged = unchanged || (q.Name == p.Name && q.Deployment == p.Deployment)
		}
		if !unchanged {
			out = append(out, p)
		}
	}
	return out
}

func (v *EnvironmentsValidator[O, D]) validate(ctx context.Context, old []gatewayv1.EnvironmentPointer, o O) (admission.Warnings, error) {
	var warnings admission.Warnings
	var errs field.ErrorList
	noun := strings.ToLower(v.Kind)
	for _, p := range changedPointers(old, o) {
		if bad := p.InvalidPointer(); bad != nil {
			errs = append(errs, bad)
			continue
		}
		d := v.NewDeployment()
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: p.Deployment}, d)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("%s: %s %q does not exist yet; the environment serves nothing until it exists.",
				p.Path, v.DeploymentKind, p.Deployment))
		case err != nil:
			return nil, apierrors.NewInternalError(fmt.Errorf("admission of %s %s: failed to read %s %s: %w",
				v.Kind, o.GetName(), v.DeploymentKind, p.Deployment, err))
		case v.OwnerOf(d) != o.GetName():
			errs = append(errs, field.Invalid(p.Path, p.Deployment, fmt.Sprintf(
				"%s %s belongs to %s %s; an environment may only point at a deployment of %s %s",
				v.DeploymentKind, p.Deployment, noun, v.OwnerOf(d), noun, o.GetName())))
		case d.GetDeletionTimestamp() != nil:
			errs = append(errs, field.Invalid(p.Path, p.Deployment, fmt.Sprintf(
				"%s %s is being deleted; point the environment at another deployment", v.DeploymentKind, p.Deployment)))
		}
	}
	return warnings, refuse(ctx, v.Kind, o.GetName(), errs)
}

// NewModelValidator is the EnvironmentsValidator of Models.
func NewModelValidator(r client.Reader) *EnvironmentsValidator[*gatewayv1.Model, *gatewayv1.ModelDeployment] {
	return &EnvironmentsValidator[*gatewayv1.Model, *gatewayv1.ModelDeployment]{Reader: r, Kind: "Model", DeploymentKind: "ModelDeployment",
		NewDeployment: func() *gatewayv1.ModelDeployment { return &gatewayv1.ModelDeployment{} },
		OwnerOf:       func(md *gatewayv1.ModelDeployment) string { return md.Spec.ModelID }}
}

// NewChainValidator is the EnvironmentsValidator of Chains.
func NewChainValidator(r client.Reader) *EnvironmentsValidator[*gatewayv1.Chain, *gatewayv1.ChainDeployment] {
	return &EnvironmentsValidator[*gatewayv1.Chain, *gatewayv1.ChainDeployment]{Reader: r, Kind: "Chain", DeploymentKind: "ChainDeployment",
		NewDeployment: func() *gatewayv1.ChainDeployment { return &gatewayv1.ChainDeployment{} },
		OwnerOf:       func(cd *gatewayv1.ChainDeployment) string { return cd.Spec.ChainID }}
}
