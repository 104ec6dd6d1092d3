package kit

import (
	"context"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/tracing"
)

// ReadyReconciler reconciles a kind whose whole status is its Ready condition and observedGeneration, decided by
// the others of its kind: which Endpoint holds a slug, which Team is the default, which Workspace configures a
// namespace. The kind's package gives the check and the peers; the prelude, the watch and the status write are
// here, once.
type ReadyReconciler[T client.Object] struct {
	client.Client
	// Kind names the object in errors ("Endpoint").
	Kind string
	// Tracer gives each reconcile a span (Traced); none when nil.
	Tracer *tracing.Tracer
	// Status points at the object's Ready conditions and observedGeneration.
	Status func(T) (conditions *[]metav1.Condition, observedGeneration *int64)
	// Check decides the Ready condition of obj.
	Check func(ctx context.Context, c client.Reader, obj T) (Check, error)
	// Peers maps a change of one object to the others of its kind whose Ready it may change.
	Peers func(ctx context.Context, c client.Reader, obj client.Object) []reconcile.Request
	// PeerPredicates filter the changes Peers sees.
	PeerPredicates []predicate.Predicate
	// Count, when set, points at a status field that counts something in obj's spec (an Endpoint's
	// targetCount, which a printer column shows) and gives the count each pass writes there.
	Count func(obj T) (field *int32, n int32)
}

// readyStatus is what a ReadyReconciler writes, compared before and after its pass.
// Its fields are exported for equality.Semantic, which compares the conditions' times with its own functions.
type readyStatus struct {
	Conditions         []metav1.Condition
	ObservedGeneration int64
	Count              int32
}

// SetupWithManager registers the reconciler, its own kind's watch and the peers' on mgr.
func (r *ReadyReconciler[T]) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(newObject[T]()).
		Watches(newObject[T](), handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
			return r.Peers(ctx, r.Client, obj)
		}), builder.WithPredicates(r.PeerPredicates...)).
		WithOptions(opts).
		Complete(RequeueOnConflict{Reconciler: Trace(r.Tracer, r.Kind, r)})
}

// Reconcile writes the object's Ready condition and observedGeneration.
func (r *ReadyReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	status := func(obj T) any {
		conds, generation := r.Status(obj)
		st := readyStatus{Conditions: *conds, ObservedGeneration: *generation}
		if r.Count != nil {
			field, _ := r.Count(obj)
			st.Count = *field
		}
		return st
	}
	return Prelude[T]{Kind: r.Kind, Status: status}.Run(ctx, r.Client, req, func(ctx context.Context, obj T) (ctrl.Result, error) {
		c, err := r.Check(ctx, r.Client, obj)
		if err != nil {
			return ctrl.Result{}, err
		}
		conds, generation := r.Status(obj)
		*generation = obj.GetGeneration()
		SetReady(conds, c, obj.GetGeneration())
		if r.Count != nil {
			field, n := r.Count(obj)
			*field = n
		}
		return ctrl.Result{}, nil
	})
}

// newObject is a new empty object of T, a pointer to a kind's type.
func newObject[T client.Object]() T {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}
