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

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-model,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=models,verbs=create;update,versions=v1alpha1,name=vmodel-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-modeldeployment,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=modeldeployments,verbs=create;update;delete,versions=v1alpha1,name=vmodeldeployment-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var (
	developmentPath    = field.NewPath("spec", "development")
	deploymentNamePath = field.NewPath("metadata", "name")
	modelLabelPath     = field.NewPath("metadata", "labels").Key(gatewayv1.LabelModel)
)

// MaxDeploymentNameLength bounds a ModelDeployment's name so that the Service a container source runs as
// ("md-<name>", see ModelDeployment.WorkloadName) is still a DNS-1035 label of at most 63 characters.
const MaxDeploymentNameLength = validation.DNS1035LabelMaxLength - len("md-")

// ModelValidator refuses a Model whose environment, or spec.development, points at a ModelDeployment of another
// model. A pointer at a deployment that does not exist yet is admitted with a warning: GitOps applies in any
// order, and the Model's status reports the missing deployment until it exists.
type ModelValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Model] = &ModelValidator{}

// ValidateCreate checks every pointer.
func (v *ModelValidator) ValidateCreate(ctx context.Context, m *gatewayv1.Model) (admission.Warnings, error) {
	return v.validate(ctx, nil, m)
}

// ValidateUpdate checks only the pointers the update changes, so that a Model left pointing at a deployment it
// no longer owns by a race can still take unrelated writes (its finalizer, a promotion elsewhere).
func (v *ModelValidator) ValidateUpdate(ctx context.Context, old, m *gatewayv1.Model) (admission.Warnings, error) {
	if m.DeletionTimestamp != nil {
		return nil, nil
	}
	return v.validate(ctx, old, m)
}

// ValidateDelete admits every deletion.
func (v *ModelValidator) ValidateDelete(context.Context, *gatewayv1.Model) (admission.Warnings, error) {
	return nil, nil
}

// modelPointer is one place of a Model that names a deployment.
type modelPointer struct {
	path       *field.Path
	deployment string
}

// changedPointers returns the non-empty pointers of m that old (nil on a create) does not already hold at the
// same environment.
func changedPointers(old, m *gatewayv1.Model) []modelPointer {
	var out []modelPointer
	before := func(env string) (string, bool) {
		if old == nil {
			return "", false
		}
		return old.Environment(env)
	}
	for i, e := range m.Spec.Environments {
		if e.Deployment == "" {
			continue
		}
		if d, ok := before(e.Name); ok && d == e.Deployment {
			continue
		}
		out = append(out, modelPointer{field.NewPath("spec", "environments").Index(i).Child("deployment"), e.Deployment})
	}
	if d := m.Spec.Development; d != "" {
		if prev, ok := before(gatewayv1.EnvironmentDevelopment); !ok || prev != d {
			out = append(out, modelPointer{developmentPath, d})
		}
	}
	return out
}

func (v *ModelValidator) validate(ctx context.Context, old, m *gatewayv1.Model) (admission.Warnings, error) {
	var warnings admission.Warnings
	var errs field.ErrorList
	for _, p := range changedPointers(old, m) {
		md := &gatewayv1.ModelDeployment{}
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: p.deployment}, md)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("%s: ModelDeployment %q does not exist yet; the environment serves nothing until it exists.",
				p.path, p.deployment))
		case err != nil:
			return nil, apierrors.NewInternalError(fmt.Errorf("admission of Model %s: failed to read ModelDeployment %s: %w", m.Name, p.deployment, err))
		case md.Spec.ModelID != m.Name:
			errs = append(errs, field.Invalid(p.path, p.deployment, fmt.Sprintf(
				"ModelDeployment %s belongs to model %s; an environment may only point at a deployment of model %s",
				p.deployment, md.Spec.ModelID, m.Name)))
		case md.DeletionTimestamp != nil:
			errs = append(errs, field.Invalid(p.path, p.deployment, fmt.Sprintf(
				"ModelDeployment %s is being deleted; point the environment at another deployment", p.deployment)))
		}
	}
	return warnings, refuse(ctx, "Model", m.Name, errs)
}

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
