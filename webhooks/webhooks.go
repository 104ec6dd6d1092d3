// Package webhooks holds the admission webhooks of the gateway.modelgate.io kinds: a validating webhook per kind,
// and ParentBinder, the mutating webhook that binds Groups and APIKeys to the group they are created under.
//
// The validating webhooks enforce the rules that read other objects of the same namespace (the workspace): group hierarchy depth, cycles, modes and
// cascading thresholds (through api/v1alpha1/hierarchy, the same functions the reconciler runs again), and
// uniqueness of external ids, key prefixes, key names within their scope, endpoint slugs, the Workspace itself and the default Team, and the pointers from a
// Model's environments to its ModelDeployments. Rules about one object alone live in the CRDs' CEL. Every refusal
// is an Invalid status whose causes carry the field path and the rule.
//
// An update is checked only for the rules whose inputs it changes. A conflict that two racing admissions let in
// is reported by the reconciler, and must not block unrelated writes such as a controller removing its finalizer.
package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=groups;apikeys;endpoints;workspaces;workspaceapikeys;models;modeldeployments;teams;chains;chaindeployments,verbs=get;list;watch

// SetupWithManager registers the validating webhook of every kind with the manager's webhook server.
//
// The webhooks read through the manager's API reader, not its cache: a uniqueness check against an informer
// that lags by a few milliseconds would admit two objects created back to back, which is exactly the case it
// exists for. Every read is narrowed by a field selector the CRDs declare (selectableFields), so the API server
// answers from its watch cache with the few objects a rule involves, and admission costs the same in a
// workspace of ten groups or of ten thousand.
func SetupWithManager(mgr manager.Manager) error {
	r := mgr.GetAPIReader()
	claims := &claimer{Writer: mgr.GetClient(), Reader: r, current: currentValue(r)}
	steps := []struct {
		kind string
		add  func() error
	}{
		{"Group", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Group{}).WithDefaulter(NewGroupBinder(r)).
				WithValidator(&GroupValidator{Reader: r, Claims: claims}).Complete()
		}},
		{"APIKey", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.APIKey{}).WithDefaulter(NewAPIKeyBinder(r)).
				WithValidator(&APIKeyValidator{Reader: r, Claims: claims}).Complete()
		}},
		{"Endpoint", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Endpoint{}).WithValidator(&EndpointValidator{Reader: r}).Complete()
		}},
		{"Workspace", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Workspace{}).WithValidator(&WorkspaceValidator{Reader: r}).Complete()
		}},
		{"WorkspaceAPIKey", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.WorkspaceAPIKey{}).WithDefaulter(NewTeamKeyBinder(r)).WithValidator(&WorkspaceAPIKeyValidator{Reader: r, Claims: claims}).Complete()
		}},
		{"Team", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Team{}).WithValidator(&TeamValidator{Reader: r}).Complete()
		}},
		{"Model", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Model{}).WithValidator(NewModelValidator(r)).Complete()
		}},
		{"ModelDeployment", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.ModelDeployment{}).WithValidator(&ModelDeploymentValidator{Reader: r}).Complete()
		}},
		{"Chain", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.Chain{}).WithValidator(NewChainValidator(r)).Complete()
		}},
		{"ChainDeployment", func() error {
			return builder.WebhookManagedBy(mgr, &gatewayv1.ChainDeployment{}).WithValidator(&ChainDeploymentValidator{}).Complete()
		}},
	}
	for _, s := range steps {
		if err := s.add(); err != nil {
			return fmt.Errorf("failed to register the %s webhook: %w", s.kind, err)
		}
	}
	return nil
}

// refuse turns field errors into the Invalid status the API server returns to the client, so the response
// carries each field path, or nil when there are none.
func refuse(ctx context.Context, kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	log.FromContext(ctx).Info("Refused write", "kind", kind, "name", name, "errors", errs.ToAggregate().Error())
	return apierrors.NewInvalid(schema.GroupKind{Group: gatewayv1.GroupVersion.Group, Kind: kind}, name, errs)
}

// listFailed reports a failed read of the namespace. Admission fails closed (failurePolicy=fail), so the
// client sees why and can retry.
func listFailed(kind, ns string, err error) error {
	return apierrors.NewInternalError(fmt.Errorf("failed to list %s in namespace %s for admission: %w", kind, ns, err))
}

// counts is true when another object of the namespace takes part in a uniqueness check: not the object being
// written, and not one being deleted, whose id is freed as soon as deletion starts.
func counts(self, other client.Object) bool {
	return other.GetName() != self.GetName() && other.GetDeletionTimestamp() == nil
}

// holder returns an object of list's kind in self's namespace that counts against self (see counts) and whose
// value for one of fields equals value, or nil when there is none. The reads are narrowed by field selector.
func holder(ctx context.Context, r client.Reader, list client.ObjectList, self client.Object, value string, fields ...string) (client.Object, error) {
	for _, f := range fields {
		if err := r.List(ctx, list, client.InNamespace(self.GetNamespace()), client.MatchingFields{f: value}); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			if o, ok := item.(client.Object); ok && counts(self, o) {
				return o, nil
			}
		}
	}
	return nil, nil
}

// duplicate is the refusal of a value another object already holds.
func duplicate(path *field.Path, value, otherKind, otherName, scope string) *field.Error {
	e := field.Duplicate(path, value)
	e.Detail = fmt.Sprintf("already used by %s %s; %s must be unique %s", otherKind, otherName, path, scope)
	return e
}
