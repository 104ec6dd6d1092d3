// Package kit is what every reconciler of the manager shares: the reconcile prelude (Prelude: get the object,
// leave it while it is being deleted, one deferred status patch), the Ready condition from an ordered check and
// the reconciler of a kind whose status is only that (ReadyReconciler), the
// predicates and map helpers of their watches, the quiet requeue on a conflict, and the field-index type the
// concern packages declare their indexes with. It knows no kind: the concern packages (gateway, models,
// workspace, sandboximage) sit above it.
package kit

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Prelude is how a reconciler begins and ends its pass over one object, in the Cluster API order: get the
// object (gone: nothing to do), hand it to Deleting once it is being deleted (or leave it alone), run Prepare
// (writes of the object itself, checks that end the pass), then run the pass with one deferred patch of the
// status, sent only when the pass changed it.
type Prelude[T client.Object] struct {
	// Kind names the object in errors ("Endpoint").
	Kind string
	// Status returns the object's status, compared before and after the pass. Nil sends no patch: the pass
	// writes what it writes itself.
	Status func(T) any
	// Deleting runs instead of Prepare and the pass for an object being deleted (a finalizer's work). Nil leaves
	// such an object alone.
	Deleting func(context.Context, T) (ctrl.Result, error)
	// Prepare, when set, runs before the status is read for the patch. done ends the pass with res and err;
	// otherwise res stands unless the pass asks for a requeue of its own.
	Prepare func(context.Context, T) (res ctrl.Result, done bool, err error)
}

// Run reads the object req names with c and runs the prelude around pass.
func (p Prelude[T]) Run(ctx context.Context, c client.Client, req ctrl.Request, pass func(context.Context, T) (ctrl.Result, error)) (_ ctrl.Result, retErr error) {
	obj := newObject[T]()
	if err := c.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		if p.Deleting == nil {
			return ctrl.Result{}, nil
		}
		return p.Deleting(ctx, obj)
	}
	var prepared ctrl.Result
	if p.Prepare != nil {
		res, done, err := p.Prepare(ctx, obj)
		if done || err != nil {
			return res, err
		}
		prepared = res
	}
	if p.Status != nil {
		before := obj.DeepCopyObject().(T)
		defer func() {
			if err := PatchStatus(ctx, c, p.Kind, before, obj, p.Status(before), p.Status(obj)); err != nil {
				retErr = kerrors.NewAggregate([]error{retErr, err})
			}
		}()
	}
	res, err := pass(ctx, obj)
	if res.IsZero() {
		res = prepared
	}
	return res, err
}

// PatchStatus sends the difference between before and after as a merge patch of the status subresource, and
// nothing when the status did not change. An object deleted meanwhile is not an error.
func PatchStatus(ctx context.Context, c client.Client, kind string, before, after client.Object, beforeStatus, afterStatus any) error {
	if equality.Semantic.DeepEqual(beforeStatus, afterStatus) {
		return nil
	}
	if err := c.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to patch status of %s %s/%s: %w", kind, after.GetNamespace(), after.GetName(), err)
	}
	return nil
}

// Check is the outcome of one ordered pure check: the first failed check decides the Ready condition.
type Check struct {
	Reason, Message string
	Failed          bool
}

// Ready is the passing outcome, with the message of a Ready condition.
func Ready(message string) Check { return Check{Reason: gatewayv1.ReasonReady, Message: message} }

// SetReady writes the Ready condition from c. meta.SetStatusCondition keeps lastTransitionTime unless the status
// flips, so an unchanged outcome leaves the object unchanged and no patch is sent.
func SetReady(conds *[]metav1.Condition, c Check, generation int64) {
	status := metav1.ConditionTrue
	if c.Failed {
		status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: gatewayv1.ConditionReady, Status: status, Reason: c.Reason, Message: c.Message, ObservedGeneration: generation,
	})
}

// Requests turns objects into reconcile requests.
func Requests[T client.Object](objs ...T) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(objs))
	for _, o := range objs {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
	}
	return out
}

// SpecOrLifecycleChanged passes creations, deletions, and updates that change the spec (generation) or start a
// deletion, so that status-only writes do not fan out to other objects.
var SpecOrLifecycleChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
}

// UnsafeNoCopy lists from the cache without deep copies. Only for read-only use of the listed objects.
var UnsafeNoCopy = client.UnsafeDisableDeepCopy

// RequeueOnConflict wraps a reconciler so that an optimistic-concurrency conflict ("the object has been
// modified": the object changed after it was read, say while a finalizer was removed) is a quiet requeue, logged
// at debug level, not an error that controller-runtime logs with a stack trace. The next reconcile reads the
// object again; any other error passes through.
type RequeueOnConflict struct{ reconcile.Reconciler }

// Reconcile runs the wrapped reconciler and turns a conflict into a requeue.
func (q RequeueOnConflict) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := q.Reconciler.Reconcile(ctx, req)
	if err != nil && apierrors.IsConflict(err) {
		logf.FromContext(ctx).V(1).Info("Conflict on update; requeued to read the object again", "cause", err.Error())
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

// Index is one field index of the manager's cache: Object's kind listed by Field, with the values Extract
// returns. The concern packages declare theirs; the manager registers them all once.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// NonEmpty returns the distinct non-empty values, as index values.
func NonEmpty(values ...string) []string {
	var out []string
	for _, v := range values {
		if v != "" && (len(out) == 0 || out[len(out)-1] != v) {
			out = append(out, v)
		}
	}
	return out
}

// AddFinalizer is a Prepare that adds finalizer to an object of kind that lacks it, by an update that ends the
// pass: the update's event brings the object back.
func AddFinalizer[T client.Object](c client.Client, kind, finalizer string) func(context.Context, T) (ctrl.Result, bool, error) {
	return func(ctx context.Context, obj T) (ctrl.Result, bool, error) {
		if !controllerutil.AddFinalizer(obj, finalizer) {
			return ctrl.Result{}, false, nil
		}
		if err := c.Update(ctx, obj); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("failed to add the finalizer to %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
		}
		return ctrl.Result{}, true, nil
	}
}

// ListRequests is the map function's half of a watch: the requests of the objects list holds, read from the
// cache with opts (without copies: only their names are read), but those keep refuses (nil keeps every one). A
// failed list is logged and maps to none.
func ListRequests(ctx context.Context, c client.Reader, list client.ObjectList, keep func(client.Object) bool, opts ...client.ListOption) []reconcile.Request {
	if err := c.List(ctx, list, append(opts, UnsafeNoCopy)...); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the objects a change reaches", "list", fmt.Sprintf("%T", list))
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if o := o.(client.Object); keep == nil || keep(o) {
			out = append(out, Requests(o)...)
		}
		return nil
	})
	return out
}

// Others keeps the objects not named as obj: the others of its kind whose verdict depends on it.
func Others(obj client.Object) func(client.Object) bool {
	return func(o client.Object) bool { return o.GetName() != obj.GetName() }
}
