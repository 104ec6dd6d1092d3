package celvalidation

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// admitted creates obj as a dry run and reports whether the API server admitted it; any refusal but the schema's
// or CEL's (Invalid) fails the test.
func admitted(t *testing.T, obj client.Object) bool {
	t.Helper()
	err := k8s.Create(context.Background(), obj, client.DryRunAll)
	if err != nil && !apierrors.IsInvalid(err) {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
	return err == nil
}

// TestKeyTypeRulesMatchTheCRD: every row of gatewayv1.KeyTypeRules, which REST and the name scopes read, is what
// the CRD's CEL rules admit for that key type.
func TestKeyTypeRulesMatchTheCRD(t *testing.T) {
	for _, typ := range gatewayv1.KeyTypes {
		rule := gatewayv1.KeyTypeRules[typ]
		key := func(change func(*gatewayv1.WorkspaceAPIKeySpec)) *gatewayv1.WorkspaceAPIKey {
			k := &gatewayv1.WorkspaceAPIKey{
				ObjectMeta: metav1.ObjectMeta{Name: "rules", Namespace: namespace},
				Spec:       gatewayv1.WorkspaceAPIKeySpec{Type: typ},
			}
			if rule.Owner {
				k.Spec.Owner = &gatewayv1.KeyOwner{UserID: "u1"}
			}
			change(&k.Spec)
			return k
		}
		for _, c := range []struct {
			what   string
			change func(*gatewayv1.WorkspaceAPIKeySpec)
			want   bool
		}{
			{"with no scope", func(*gatewayv1.WorkspaceAPIKeySpec) {}, true},
			{"without an owner", func(s *gatewayv1.WorkspaceAPIKeySpec) { s.Owner = nil }, !rule.Owner},
			{"with a teamID", func(s *gatewayv1.WorkspaceAPIKeySpec) { s.TeamID = "ml" }, rule.Team},
			{"scoped by models alone", func(s *gatewayv1.WorkspaceAPIKeySpec) { s.Models = []string{"demo"} }, rule.ModelsAlone},
			{"scoped by environments", func(s *gatewayv1.WorkspaceAPIKeySpec) { s.Environments = []string{"production"} }, rule.Environments},
			{"scoped by models and environments", func(s *gatewayv1.WorkspaceAPIKeySpec) {
				s.Models, s.Environments = []string{"demo"}, []string{"production"}
			}, rule.Environments},
		} {
			if got := admitted(t, key(c.change)); got != c.want {
				t.Errorf("a %s key %s: admitted %v, KeyTypeRules says %v", typ, c.what, got, c.want)
			}
		}
	}
}

// TestLimitKindsMatchTheCRD: each limit kind of gatewayv1.LimitKinds takes exactly the types and units the CRD's
// CEL rules admit on its list.
func TestLimitKindsMatchTheCRD(t *testing.T) {
	for _, kind := range gatewayv1.LimitKinds {
		for _, typ := range gatewayv1.LimitTypes {
			for _, unit := range gatewayv1.LimitUnits {
				g := parse(t, fmt.Sprintf(`
kind: Group
metadata: {name: rules, namespace: %s}
spec:
  externalEntityID: cust-rules
  models: [{slug: demo/echo, %s: [{type: %s, unit: %s, threshold: 1}]}]
`, namespace, kind.Field, typ, unit))
				if got, want := admitted(t, g), kind.Takes(unit) && kind.Counts(typ); got != want {
					t.Errorf("%s with a %s %s limit: admitted %v, LimitKinds says %v", kind.Field, typ, unit, got, want)
				}
			}
		}
		bad := parse(t, fmt.Sprintf(`
kind: Group
metadata: {name: rules, namespace: %s}
spec: {externalEntityID: cust-rules, models: [{slug: demo/echo, %s: [{type: HOUR, unit: %s, threshold: 1}]}]}
`, namespace, kind.Field, kind.Units[0]))
		if admitted(t, bad) {
			t.Errorf("%s with a limit of type HOUR admitted", kind.Field)
		}
	}
}
