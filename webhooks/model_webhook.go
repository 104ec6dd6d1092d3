package webhooks

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// The Model's webhook is an EnvironmentsValidator (NewModelValidator).
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-model,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=models,verbs=create;update,versions=v1alpha1,name=vmodel-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-modeldeployment,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=modeldeployments,verbs=create;update;delete,versions=v1alpha1,name=vmodeldeployment-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var (
	deploymentNamePath = field.NewPath("metadata", "name")
	modelLabelPath     = field.NewPath("metadata", "labels").Key(gatewayv1.LabelModel)
)

// MaxDeploymentNameLength bounds a ModelDeployment's name so that the Service a container source runs as
// ("md-<name>", see ModelDeployment.WorkloadName) is still a DNS-1035 label of at most 63 characters.
const MaxDeploymentNameLength = validation.DNS1035LabelMaxLength - len("md-")

// ModelDeploymentValidator checks a ModelDeployment's name and model label, and refuses to delete a deployment
// that an environment of its Model still serves.
type ModelDeploymentValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.ModelDeployment] = &ModelDeploymentValidator{}

// ValidateCreate checks the name and the model label.
func (v *ModelDeploymentValidator) ValidateCreate(ctx context.Context, md *gatewayv1.ModelDeployment) (admission.Warnings, error) {
	errs := ValidateDeploymentName(md.Name)
	errs = append(errs, modelLabel(md)...)
	return nil, refuse(ctx, "ModelDeployment", md.Name, errs)
}

// ValidateUpdate checks the model label when it changes (spec.modelID is immutable). The name cannot change.
func (v *ModelDeploymentValidator) ValidateUpdate(ctx context.Context, old, md *gatewayv1.ModelDeployment) (admission.Warnings, error) {
	if md.DeletionTimestamp != nil || old.Labels[gatewayv1.LabelModel] == md.Labels[gatewayv1.LabelModel] {
		return nil, nil
	}
	return nil, refuse(ctx, "ModelDeployment", md.Name, modelLabel(md))
}

// ValidateDelete refuses to delete a deployment that an environment (or spec.development) of its Model points
// at: the environment's routes would answer 404 until someone noticed. A Model that is gone or being deleted
// serves nothing, so its deployments may go.
func (v *ModelDeploymentValidator) ValidateDelete(ctx context.Context, md *gatewayv1.ModelDeployment) (admission.Warnings, error) {
	if md.DeletionTimestamp != nil {
		return nil, nil
	}
	m := &gatewayv1.Model{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.ModelID}, m)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("admission of the deletion of ModelDeployment %s: failed to read Model %s: %w", md.Name, md.Spec.ModelID, err))
	case m.DeletionTimestamp != nil:
		return nil, nil
	}
	envs := m.EnvironmentsOf(md.Name)
	if len(envs) == 0 {
		return nil, nil
	}
	return nil, refuse(ctx, "ModelDeployment", md.Name, field.ErrorList{field.Forbidden(deploymentNamePath, fmt.Sprintf(
		"ModelDeployment %s serves the %s of model %s; promote another deployment to %s first (clear spec.development to drop it from development), then delete this one",
		md.Name, environmentList(envs), m.Name, pronoun(envs)))})
}

// environmentList names envs in a sentence: `environment "production"` or `environments "production", "staging"`.
func environmentList(envs []string) string {
	quoted := make([]string, len(envs))
	for i, e := range envs {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	if len(envs) == 1 {
		return "environment " + quoted[0]
	}
	return "environments " + strings.Join(quoted, ", ")
}

func pronoun(envs []string) string {
	if len(envs) == 1 {
		return "it"
	}
	return "them"
}

// ValidateDeploymentName checks a ModelDeployment's name: not an environment word that the model routes read as
// one ("production", "development"), and a DNS-1035 label short enough for the "md-<name>" Service a container
// source runs as.
func ValidateDeploymentName(name string) field.ErrorList {
	if name == gatewayv1.EnvironmentProduction || name == gatewayv1.EnvironmentDevelopment {
		return field.ErrorList{field.Invalid(deploymentNamePath, name, fmt.Sprintf(
			"%q addresses an environment in the model routes (/%s/predict); choose another deployment name", name, name))}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1035Label(name) {
		errs = append(errs, field.Invalid(deploymentNamePath, name, msg))
	}
	if len(name) > MaxDeploymentNameLength {
		errs = append(errs, field.TooLong(deploymentNamePath, name, MaxDeploymentNameLength))
	}
	return errs
}

// modelLabel refuses a model label that names another model than spec.modelID: whoever selects a model's
// deployments by the label (kubectl -l, the manager's workloads) would find this one under the wrong model.
func modelLabel(md *gatewayv1.ModelDeployment) field.ErrorList {
	l, ok := md.Labels[gatewayv1.LabelModel]
	if !ok || l == md.Spec.ModelID {
		return nil
	}
	return field.ErrorList{field.Invalid(modelLabelPath, l, fmt.Sprintf(
		"must equal spec.modelID (%s); leave the label out and the controller sets it", md.Spec.ModelID))}
}
