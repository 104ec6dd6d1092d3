package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// check is the outcome of one ordered pure check: the first failed check decides the Ready condition.
type check struct {
	reason, message string
	failed          bool
}

// ready is the passing outcome, with the message of a Ready condition.
func ready(message string) check { return check{reason: gatewayv1.ReasonReady, message: message} }

// setReady writes the Ready condition from c. meta.SetStatusCondition keeps lastTransitionTime unless the status
// flips, so an unchanged outcome leaves the object unchanged and no patch is sent.
func setReady(conds *[]metav1.Condition, c check, generation int64) {
	status := metav1.ConditionTrue
	if c.failed {
		status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: gatewayv1.ConditionReady, Status: status, Reason: c.reason, Message: c.message, ObservedGeneration: generation,
	})
}

// patchStatus sends the difference between before and after as a merge patch of the status subresource, and
// nothing when the status did not change. An object deleted meanwhile is not an error.
func patchStatus(ctx context.Context, c client.Client, kind string, before, after client.Object, beforeStatus, afterStatus any) error {
	if equality.Semantic.DeepEqual(beforeStatus, afterStatus) {
		return nil
	}
	if err := c.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to patch status of %s %s/%s: %w", kind, after.GetNamespace(), after.GetName(), err)
	}
	return nil
}

// requests turns objects into reconcile requests.
func requests[T client.Object](objs ...T) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(objs))
	for _, o := range objs {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
	}
	return out
}

// specOrLifecycleChanged passes creations, deletions, and updates that change the spec (generation) or start a
// deletion, so that status-only writes do not fan out to other objects.
var specOrLifecycleChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
}

// unsafeNoCopy lists from the cache without deep copies. Only for read-only use of the listed objects.
var unsafeNoCopy = client.UnsafeDisableDeepCopy

// routingChanged passes what specOrLifecycleChanged passes, and ModelDeployment status writes that change what
// the snapshot says of it (its status or resolved port), but not those that only move a replica count or a
// condition's message.
var routingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if specOrLifecycleChanged.Update(e) {
			return true
		}
		o, ok1 := e.ObjectOld.(*gatewayv1.ModelDeployment)
		n, ok2 := e.ObjectNew.(*gatewayv1.ModelDeployment)
		return !ok1 || !ok2 || o.Status.Status != n.Status.Status || o.Status.PortName != n.Status.PortName
	},
}

// requeueOnConflict wraps a reconciler so that an optimistic-concurrency conflict ("the object has been
// modified": the object changed after it was read, say while a finalizer was removed) is a quiet requeue, logged
// at debug level, not an error that controller-runtime logs with a stack trace. The next reconcile reads the
// object again; any other error passes through.
type requeueOnConflict struct{ reconcile.Reconciler }

// Reconcile runs the wrapped reconciler and turns a conflict into a requeue.
func (q requeueOnConflict) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := q.Reconciler.Reconcile(ctx, req)
	if err != nil && apierrors.IsConflict(err) {
		logf.FromContext(ctx).V(1).Info("Conflict on update; requeued to read the object again", "cause", err.Error())
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}
