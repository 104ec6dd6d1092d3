package kit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRequeueOnConflict: an optimistic-concurrency conflict, bare or wrapped, is a requeue without an error (so
// controller-runtime logs no ERROR with a stack trace); any other error, and a success, pass through unchanged.
func TestRequeueOnConflict(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "gateway.modelgate.io", Resource: "modeldeployments"}, "v1",
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	other := errors.New("the API server is unreachable")
	for _, tc := range []struct {
		name    string
		res     reconcile.Result
		err     error
		wantRes reconcile.Result
		wantErr error
	}{
		{"conflict", reconcile.Result{}, conflict, reconcile.Result{Requeue: true}, nil},
		{"wrapped conflict", reconcile.Result{}, fmt.Errorf("failed to remove the finalizer: %w", conflict), reconcile.Result{Requeue: true}, nil},
		{"other error", reconcile.Result{}, other, reconcile.Result{}, other},
		{"success", reconcile.Result{RequeueAfter: 5}, nil, reconcile.Result{RequeueAfter: 5}, nil},
	} {
		inner := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return tc.res, tc.err })
		res, err := RequeueOnConflict{Reconciler: inner}.Reconcile(context.Background(), reconcile.Request{})
		if res != tc.wantRes || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: (%+v, %v), want (%+v, %v)", tc.name, res, err, tc.wantRes, tc.wantErr)
		}
	}
}
