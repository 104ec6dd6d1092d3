package kit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestPrelude: the object is read (gone: nothing runs), one being deleted goes to Deleting or is left alone,
// Prepare may end the pass or give the result the pass does not override, and the status is patched once, only
// when the pass changed it, even when the pass fails.
func TestPrelude(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	later := ctrl.Result{RequeueAfter: time.Minute}
	failed := errors.New("the pass failed")
	setObserved := func(_ context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
		tm.Status.ObservedGeneration = 7
		return ctrl.Result{}, nil
	}
	for _, tc := range []struct {
		name     string
		team     *gatewayv1.Team // nil: absent
		prelude  Prelude[*gatewayv1.Team]
		pass     func(context.Context, *gatewayv1.Team) (ctrl.Result, error)
		wantRes  ctrl.Result
		wantErr  error
		wantRan  []string
		patches  int
		observed int64
	}{
		{name: "gone", wantRan: nil},
		{name: "deleting, left alone", team: deleting(), wantRan: nil},
		{name: "deleting, finalized", team: deleting(),
			prelude: Prelude[*gatewayv1.Team]{Deleting: func(context.Context, *gatewayv1.Team) (ctrl.Result, error) { return later, nil }},
			wantRes: later, wantRan: []string{"deleting"}},
		{name: "prepare ends the pass", team: team(),
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, true, nil }},
			wantRes: later, wantRan: []string{"prepare"}},
		{name: "prepare's result stands", team: team(),
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, false, nil }},
			wantRes: later, wantRan: []string{"prepare", "pass"}},
		{name: "the pass's own result wins", team: team(),
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, false, nil }},
			pass: func(context.Context, *gatewayv1.Team) (ctrl.Result, error) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			},
			wantRes: ctrl.Result{RequeueAfter: time.Second}, wantRan: []string{"prepare", "pass"}},
		{name: "unchanged status, no patch", team: team(), wantRan: []string{"pass"}},
		{name: "changed status, one patch", team: team(), pass: setObserved, wantRan: []string{"pass"}, patches: 1, observed: 7},
		{name: "changed status of a failed pass, patched", team: team(),
			pass: func(ctx context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
				_, _ = setObserved(ctx, tm)
				return ctrl.Result{}, failed
			},
			wantErr: failed, wantRan: []string{"pass"}, patches: 1, observed: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&gatewayv1.Team{})
			if tc.team != nil {
				b = b.WithObjects(tc.team)
			}
			patches := 0
			c := b.WithInterceptorFuncs(interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					patches++
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}).Build()
			var ran []string
			p := tc.prelude
			p.Kind, p.Status = "Team", func(tm *gatewayv1.Team) any { return tm.Status }
			if d := p.Deleting; d != nil {
				p.Deleting = func(ctx context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
					ran = append(ran, "deleting")
					return d(ctx, tm)
				}
			}
			if pr := p.Prepare; pr != nil {
				p.Prepare = func(ctx context.Context, tm *gatewayv1.Team) (ctrl.Result, bool, error) {
					ran = append(ran, "prepare")
					return pr(ctx, tm)
				}
			}
			pass := tc.pass
			if pass == nil {
				pass = func(context.Context, *gatewayv1.Team) (ctrl.Result, error) { return ctrl.Result{}, nil }
			}
			res, err := p.Run(context.Background(), c, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ws", Name: "t"}},
				func(ctx context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
					ran = append(ran, "pass")
					return pass(ctx, tm)
				})
			if res != tc.wantRes || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Run = (%+v, %v), want (%+v, %v)", res, err, tc.wantRes, tc.wantErr)
			}
			if !slices.Equal(ran, tc.wantRan) {
				t.Errorf("ran %v, want %v", ran, tc.wantRan)
			}
			if patches != tc.patches {
				t.Errorf("%d status patches, want %d", patches, tc.patches)
			}
			if tc.team != nil && tc.team.DeletionTimestamp.IsZero() {
				var stored gatewayv1.Team
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.team), &stored); err != nil {
					t.Fatal(err)
				}
				if stored.Status.ObservedGeneration != tc.observed {
					t.Errorf("stored observedGeneration %d, want %d", stored.Status.ObservedGeneration, tc.observed)
				}
			}
		})
	}
}

func team() *gatewayv1.Team {
	return &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "t"}}
}

func deleting() *gatewayv1.Team {
	t := team()
	t.Finalizers = []string{"test/hold"}
	t.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	return t
}
