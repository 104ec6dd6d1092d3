package webhooks

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-team,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=teams,verbs=create;update;delete,versions=v1alpha1,name=vteam-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var (
	teamNamePath    = field.NewPath("metadata", "name")
	teamDefaultPath = field.NewPath("spec", "default")
)

// TeamValidator refuses a Team whose name is not a DNS-1123 label (the name is the team id that keys, models and
// the REST API carry), and a second Team with spec.default in a namespace. Deleting a Team is always admitted,
// with a warning naming what it revokes and what still refers to it: GitOps prunes in any order, and keys minted
// over REST are in no repository, so a refusal could block a prune for good. Nothing is deleted, but the team keys
// bound to the Team (gatewayv1.AnnotationTeamUID) are revoked with it: a Team applied again under the same name
// does not bring them back. Its models, and keys admitted before it existed, are kept and reach a Team of that
// name again.
type TeamValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Team] = &TeamValidator{}

// ValidateCreate checks the name and the default.
func (v *TeamValidator) ValidateCreate(ctx context.Context, t *gatewayv1.Team) (admission.Warnings, error) {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(t.Name) {
		errs = append(errs, field.Invalid(teamNamePath, t.Name, "a Team's name is its team id and must be a DNS-1123 label: "+msg))
	}
	if len(errs) > 0 {
		return nil, refuse(ctx, "Team", t.Name, errs)
	}
	return nil, v.validateDefault(ctx, t)
}

// ValidateUpdate checks the default only when the update makes the team the default.
func (v *TeamValidator) ValidateUpdate(ctx context.Context, old, t *gatewayv1.Team) (admission.Warnings, error) {
	if t.DeletionTimestamp != nil || old.Spec.Default || !t.Spec.Default {
		return nil, nil
	}
	return nil, v.validateDefault(ctx, t)
}

// ValidateDelete admits the deletion, warning of the keys it revokes and of the keys and models that still name
// the team.
func (v *TeamValidator) ValidateDelete(ctx context.Context, t *gatewayv1.Team) (admission.Warnings, error) {
	var keys gatewayv1.WorkspaceAPIKeyList
	if err := v.Reader.List(ctx, &keys, client.InNamespace(t.Namespace)); err != nil {
		return nil, listFailed("WorkspaceAPIKeys", t.Namespace, err)
	}
	var models gatewayv1.ModelList
	if err := v.Reader.List(ctx, &models, client.InNamespace(t.Namespace)); err != nil {
		return nil, listFailed("Models", t.Namespace, err)
	}
	var revoked, refs []string
	for i := range keys.Items {
		k := &keys.Items[i]
		switch {
		case k.Spec.TeamID != t.Name || k.DeletionTimestamp != nil || k.TeamRevoked(string(t.UID)):
			// Not this team's, or revoked already by a Team of this name deleted before.
		case k.TeamRevoked(""):
			revoked = append(revoked, "WorkspaceAPIKey "+k.Name)
		default:
			refs = append(refs, "WorkspaceAPIKey "+k.Name)
		}
	}
	for i := range models.Items {
		if m := &models.Items[i]; m.Spec.TeamID == t.Name && m.DeletionTimestamp == nil {
			refs = append(refs, "Model "+m.Name)
		}
	}
	var warnings admission.Warnings
	if len(revoked) > 0 {
		warnings = append(warnings, fmt.Sprintf("deleting Team %s revokes its team keys %s: they stop authenticating now, and a Team created again as %s does not bring them back; delete them, and create new keys for a new Team",
			t.Name, listed(revoked), t.Name))
	}
	if len(refs) > 0 {
		warnings = append(warnings, fmt.Sprintf("Team %s is still named by spec.teamID of %s; they are kept, and reach no team resources until a Team %s exists again",
			t.Name, listed(refs), t.Name))
	}
	return warnings, nil
}

// listed joins refs for a warning, naming the first ten.
func listed(refs []string) string {
	const shown = 10
	if len(refs) > shown {
		return strings.Join(refs[:shown], ", ") + fmt.Sprintf(" and %d more", len(refs)-shown)
	}
	return strings.Join(refs, ", ")
}

// validateDefault refuses t's spec.default when another Team of the namespace, not being deleted, is the default.
// Two concurrent admissions can both pass; then the older one is the default (translate.DefaultTeam) and the
// other reports Ready=False, reason DuplicateDefault.
func (v *TeamValidator) validateDefault(ctx context.Context, t *gatewayv1.Team) error {
	if !t.Spec.Default {
		return nil
	}
	var list gatewayv1.TeamList
	if err := v.Reader.List(ctx, &list, client.InNamespace(t.Namespace)); err != nil {
		return listFailed("Teams", t.Namespace, err)
	}
	for i := range list.Items {
		if o := &list.Items[i]; counts(t, o) && o.Spec.Default {
			return refuse(ctx, "Team", t.Name, field.ErrorList{field.Forbidden(teamDefaultPath, fmt.Sprintf(
				"Team %s is already the default team of namespace %s; at most one Team per namespace may set spec.default", o.Name, t.Namespace))})
		}
	}
	return nil
}
