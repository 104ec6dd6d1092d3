package webhooks

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// The Chain's webhook is an EnvironmentsValidator (NewChainValidator).
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-chain,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=chains,verbs=create;update,versions=v1alpha1,name=vchain-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-chaindeployment,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=chaindeployments,verbs=create;update,versions=v1alpha1,name=vchaindeployment-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

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
