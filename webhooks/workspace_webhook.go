package webhooks

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gateway-modelgate-io-v1alpha1-workspace,mutating=false,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=workspaces,verbs=create;update,versions=v1alpha1,name=vworkspace-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

var workspaceNamePath = field.NewPath("metadata", "name")

// WorkspaceValidator refuses a second Workspace in a namespace: the namespace is the workspace, and its settings
// (public key, billing webhook) must have one source.
type WorkspaceValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*gatewayv1.Workspace] = &WorkspaceValidator{}

// ValidateCreate refuses a second Workspace.
func (v *WorkspaceValidator) ValidateCreate(ctx context.Context, w *gatewayv1.Workspace) (admission.Warnings, error) {
	var list gatewayv1.WorkspaceList
	if err := v.Reader.List(ctx, &list, client.InNamespace(w.Namespace)); err != nil {
		return nil, listFailed("Workspaces", w.Namespace, err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if counts(w, o) {
			return nil, refuse(ctx, "Workspace", w.Name, field.ErrorList{field.Forbidden(workspaceNamePath,
				fmt.Sprintf("namespace %s already has Workspace %s; at most one Workspace per namespace", w.Namespace, o.Name))})
		}
	}
	return nil, nil
}

// ValidateUpdate admits every update (an update never adds a Workspace), warning when it deprovisions people:
// the manager deletes the PERSONAL keys of everyone spec.members no longer lists.
func (v *WorkspaceValidator) ValidateUpdate(_ context.Context, old, w *gatewayv1.Workspace) (admission.Warnings, error) {
	return membershipWarnings(old, w), nil
}

// membershipWarnings says whom an update of spec.members deprovisions: the members it removes, or, when it
// adopts membership (members was unset), everyone it does not list.
func membershipWarnings(old, w *gatewayv1.Workspace) admission.Warnings {
	if w.Spec.Members == nil || w.DeletionTimestamp != nil {
		return nil
	}
	if old.Spec.Members == nil {
		return admission.Warnings{fmt.Sprintf("spec.members: Workspace %s adopts membership; the manager deletes the PERSONAL keys of every user it does not list", w.Name)}
	}
	listed := make(map[string]bool, len(w.Spec.Members))
	for _, m := range w.Spec.Members {
		listed[m.UserID] = true
	}
	var removed []string
	for _, m := range old.Spec.Members {
		if !listed[m.UserID] {
			removed = append(removed, m.UserID)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	return admission.Warnings{fmt.Sprintf("spec.members: removing %s deprovisions them; the manager deletes their PERSONAL keys",
		strings.Join(removed, ", "))}
}

// ValidateDelete admits every deletion.
func (v *WorkspaceValidator) ValidateDelete(context.Context, *gatewayv1.Workspace) (admission.Warnings, error) {
	return nil, nil
}
