package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-chain,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=chains,verbs=create;update,versions=v1alpha1,name=vchain-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-chaindeployment,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=chaindeployments,verbs=create;update,versions=v1alpha1,name=vchaindeployment-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

// ChainValidator refuses a Chain whose environment, or spec.development, points at a ChainDeployment of another
// chain. A pointer at a deployment that does not exist yet is admitted with a warning, as for a Model.
type ChainValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Chain] = &ChainValidator{}

// ValidateCreate checks every pointer.
func (v *ChainValidator) ValidateCreate(ctx context.Context, c *gatewayv1.Chain) (admission.Warnings, error) {
	return v.validate(ctx, nil, c)
}

// ValidateUpdate checks only the pointers the update changes.
func (v *ChainValidator) ValidateUpdate(ctx context.Context, old, c *gatewayv1.Chain) (admission.Warnings, error) {
	if c.DeletionTimestamp != nil {
		return nil, nil
	}
	return v.validate(ctx, old, c)
}

// ValidateDelete admits every deletion.
func (v *ChainValidator) ValidateDelete(context.Context, *gatewayv1.Chain) (admission.Warnings, error) {
	return nil, nil
}

// changedChainPointers returns the non-empty pointers of c that old (nil on a create) does not already hold at
// the same environment.
func changedChainPointers(old, c *gatewayv1.Chain) []modelPointer {
	var out []modelPointer
	unchanged := func(env, d string) bool {
		if old == nil {
			return false
		}
		prev, ok := old.Environment(env)
		return ok && prev == d
	}
	for i, e := range c.Spec.Environments {
		if e.Deployment != "" && !unchanged(e.Name, e.Deployment) {
			out = append(out, modelPointer{field.NewPath("spec", "environments").Index(i).Child("deployment"), e.Deployment})
		}
	}
	if d := c.Spec.Development; d != "" && !unchanged(gatewayv1.EnvironmentDevelopment, d) {
		out = append(out, modelPointer{developmentPath, d})
	}
	return out
}

func (v *ChainValidator) validate(ctx context.Context, old, c *gatewayv1.Chain) (admission.Warnings, error) {
	var warnings admission.Warnings
	var errs field.ErrorList
	for _, p := range changedChainPointers(old, c) {
		cd := &gatewayv1.ChainDeployment{}
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: p.deployment}, cd)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("%s: ChainDeployment %q does not exist yet; the environment serves nothing until it exists.",
				p.path, p.deployment))
		case err != nil:
			return nil, apierrors.NewInternalError(fmt.Errorf("admission of Chain %s: failed to read ChainDeployment %s: %w", c.Name, p.deployment, err))
		case cd.Spec.ChainID != c.Name:
			errs = append(errs, field.Invalid(p.path, p.deployment, fmt.Sprintf(
				"ChainDeployment %s belongs to chain %s; an environment may only point at a deployment of chain %s",
				p.deployment, cd.Spec.ChainID, c.Name)))
		case cd.DeletionTimestamp != nil:
			errs = append(errs, field.Invalid(p.path, p.deployment, fmt.Sprintf(
				"ChainDeployment %s is being deleted; point the environment at another deployment", p.deployment)))
		}
	}
	return warnings, refuse(ctx, "Chain", c.Name, errs)
}

// ChainDeploymentValidator checks a new ChainDeployment: its entrypoint and chainlet names (the CRD's CEL says
// the same; see gatewayv1.ValidateChainDeploymentSpec), and that every chainlet's ModelDeployment name
// ("<name>-<chainlet>") is a valid deployment name. The spec's shape cannot change after creation (CEL).
type ChainDeploymentValidator struct{}

var _ admission.Validator[*gatewayv1.ChainDeployment] = &ChainDeploymentValidator{}

// ValidateCreate checks the spec and the chainlet deployment names.
func (v *ChainDeploymentValidator) ValidateCreate(ctx context.Context, cd *gatewayv1.ChainDeployment) (admission.Warnings, error) {
	errs := gatewayv1.ValidateChainDeploymentSpec(&cd.Spec)
	if cd.Name == gatewayv1.EnvironmentProduction || cd.Name == gatewayv1.EnvironmentDevelopment {
		errs = append(errs, field.Invalid(deploymentNamePath, cd.Name, fmt.Sprintf(
			"%q addresses an environment in the chain routes (/%s/run_remote); choose another deployment name", cd.Name, cd.Name)))
	}
	for i, c := range cd.Spec.Chainlets {
		name := cd.ChainletDeploymentName(c.Name)
		for _, e := range ValidateDeploymentName(name) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "chainlets").Index(i).Child("name"), c.Name, fmt.Sprintf(
				"the chainlet runs as ModelDeployment %q (<chain deployment>-<chainlet>), which is invalid: %s: shorten the names", name, e.Detail)))
		}
	}
	return nil, refuse(ctx, "ChainDeployment", cd.Name, errs)
}

// ValidateUpdate admits every update: the CRD's CEL keeps the spec's shape.
func (v *ChainDeploymentValidator) ValidateUpdate(context.Context, *gatewayv1.ChainDeployment, *gatewayv1.ChainDeployment) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete admits every deletion.
func (v *ChainDeploymentValidator) ValidateDelete(context.Context, *gatewayv1.ChainDeployment) (admission.Warnings, error) {
	return nil, nil
}
