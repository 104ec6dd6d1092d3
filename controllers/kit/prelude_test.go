package kit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
)

// TestPrelude: the object is read (gone: nothing runs), one being deleted goes to Deleting or is left alone,
// Prepare may end the pass or give the result the pass does not override, and the status is patched once, only
// when the pass changed it, even when the pass fails. The objects live on a real API server (envtest).
func TestPrelude(t *testing.T) {
	env := kubetest.StartTest(t, kubetest.Options{CRDs: true})
	ctx := context.Background()
	ns, err := kubetest.NewNamespace(ctx, env.Client, "prelude")
	if err != nil {
		t.Fatal(err)
	}
	// The interceptor that counts status patches wraps a client that can watch.
	watching, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	later := ctrl.Result{RequeueAfter: time.Minute}
	failed := errors.New("the pass failed")
	setObserved := func(_ context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
		tm.Status.ObservedGeneration = 7
		return ctrl.Result{}, nil
	}
	for i, tc := range []struct {
		name     string
		team     func(ns, name string) *gatewayv1.Team // nil: absent
		prelude  Prelude[*gatewayv1.Team]
		pass     func(context.Context, *gatewayv1.Team) (ctrl.Result, error)
		wantRes  ctrl.Result
		wantErr  error
		wantRan  []string
		patches  int
		observed int64
	}{
		{name: "gone", wantRan: nil},
		{name: "deleting, left alone", team: deleting, wantRan: nil},
		{name: "deleting, finalized", team: deleting,
			prelude: Prelude[*gatewayv1.Team]{Deleting: func(context.Context, *gatewayv1.Team) (ctrl.Result, error) { return later, nil }},
			wantRes: later, wantRan: []string{"deleting"}},
		{name: "prepare ends the pass", team: team,
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, true, nil }},
			wantRes: later, wantRan: []string{"prepare"}},
		{name: "prepare's result stands", team: team,
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, false, nil }},
			wantRes: later, wantRan: []string{"prepare", "pass"}},
		{name: "the pass's own result wins", team: team,
			prelude: Prelude[*gatewayv1.Team]{Prepare: func(context.Context, *gatewayv1.Team) (ctrl.Result, bool, error) { return later, false, nil }},
			pass: func(context.Context, *gatewayv1.Team) (ctrl.Result, error) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			},
			wantRes: ctrl.Result{RequeueAfter: time.Second}, wantRan: []string{"prepare", "pass"}},
		{name: "unchanged status, no patch", team: team, wantRan: []string{"pass"}},
		{name: "changed status, one patch", team: team, pass: setObserved, wantRan: []string{"pass"}, patches: 1, observed: 7},
		{name: "changed status of a failed pass, patched", team: team,
			pass: func(ctx context.Context, tm *gatewayv1.Team) (ctrl.Result, error) {
				_, _ = setObserved(ctx, tm)
				return ctrl.Result{}, failed
			},
			wantErr: failed, wantRan: []string{"pass"}, patches: 1, observed: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("t%d", i)
			var stored *gatewayv1.Team
			if tc.team != nil {
				stored = tc.team(ns, name)
				if err := env.Client.Create(ctx, stored); err != nil {
					t.Fatal(err)
				}
				if len(stored.Finalizers) > 0 {
					// Deleting an object that holds a finalizer leaves it, being deleted, until the finalizer goes.
					if err := env.Client.Delete(ctx, stored); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() {
						_ = env.Client.Patch(ctx, stored, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
					})
				}
			}
			patches := 0
			c := interceptor.NewClient(watching, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					patches++
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			})
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
			res, err := p.Run(ctx, c, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}},
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
			if stored != nil && len(stored.Finalizers) == 0 {
				var got gatewayv1.Team
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(stored), &got); err != nil {
					t.Fatal(err)
				}
				if got.Status.ObservedGeneration != tc.observed {
					t.Errorf("stored observedGeneration %d, want %d", got.Status.ObservedGeneration, tc.observed)
				}
			}
		})
	}
}

func team(ns, name string) *gatewayv1.Team {
	return &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gatewayv1.TeamSpec{DisplayName: name}}
}

// deleting is a team that a finalizer holds, deleted once created.
func deleting(ns, name string) *gatewayv1.Team {
	t := team(ns, name)
	t.Finalizers = []string{"test.modelgate.io/hold"}
	return t
}
