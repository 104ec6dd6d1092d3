package workspace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// KeyCreatorReconciler migrates the creator of WorkspaceAPIKeys stored before spec.createdBy existed: it copies
// the gateway.modelgate.io/created-by annotation into spec.createdBy, once, by a patch conditioned on the
// resourceVersion it read. The annotation is left in place. Until the copy is made, and for a key whose stored
// spec breaks a scope rule added since (the API server refuses any spec change of it; the key itself keeps
// working, see docs/decisions.md), the translation reads the annotation, so no key loses its creator.
type KeyCreatorReconciler struct {
	client.Client
	// Recorder receives the CreatedByMigrated and CreatedByNotMigrated Events; none are sent when nil.
	Recorder record.EventRecorder
}

// needsCreator passes keys that carry the annotation but no spec.createdBy.
var needsCreator = predicate.NewPredicateFuncs(func(o client.Object) bool {
	k, ok := o.(*gatewayv1.WorkspaceAPIKey)
	return ok && k.Spec.CreatedBy == nil && k.Annotations[gatewayv1.AnnotationCreatedBy] != ""
})

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *KeyCreatorReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("workspaceapikey-createdby").
		For(&gatewayv1.WorkspaceAPIKey{}, builder.WithPredicates(needsCreator)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// Reconcile fills spec.createdBy from the annotation when it is unset. It writes the spec, not the status.
func (r *KeyCreatorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.WorkspaceAPIKey]{}.Run(ctx, r.Client, req, r.migrate)
}

func (r *KeyCreatorReconciler) migrate(ctx context.Context, k *gatewayv1.WorkspaceAPIKey) (ctrl.Result, error) {
	if k.Spec.CreatedBy != nil {
		return ctrl.Result{}, nil
	}
	value := k.Annotations[gatewayv1.AnnotationCreatedBy]
	if value == "" {
		return ctrl.Result{}, nil
	}
	creator, ok := gatewayv1.CreatorFromAnnotation(value)
	if !ok {
		r.event(k, corev1.EventTypeWarning, gatewayv1.ReasonCreatedByNotMigrated,
			"Annotation %s is neither user:<id> nor key:<prefix>; spec.createdBy is left unset.", gatewayv1.AnnotationCreatedBy)
		return ctrl.Result{}, nil
	}
	before := k.DeepCopy()
	k.Spec.CreatedBy = creator
	err := r.Patch(ctx, k, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		logf.FromContext(ctx).Info("Migrated key creator into spec.createdBy", "key", k.Name)
		r.event(k, corev1.EventTypeNormal, gatewayv1.ReasonCreatedByMigrated,
			"Copied annotation %s into spec.createdBy.", gatewayv1.AnnotationCreatedBy)
		return ctrl.Result{}, nil
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: time.Second}, nil // changed meanwhile: read it again
	case apierrors.IsInvalid(err):
		// The stored spec breaks a rule added after it was written. Ratcheting keeps the key as it is, but any
		// spec change must satisfy the rules; rewriting the key's scope is not the manager's call.
		r.event(k, corev1.EventTypeWarning, gatewayv1.ReasonCreatedByNotMigrated,
			"spec.createdBy cannot be set because the stored spec breaks a current rule; the key keeps working and its creator is read from annotation %s: %v",
			gatewayv1.AnnotationCreatedBy, err)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, fmt.Errorf("failed to migrate the creator of WorkspaceAPIKey %s/%s: %w", k.Namespace, k.Name, err)
}

func (r *KeyCreatorReconciler) event(k *gatewayv1.WorkspaceAPIKey, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(k, typ, reason, format, args...)
	}
}
