package celvalidation

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// seventeenTargets is an Endpoint with one target more than the CRD admits.
func seventeenTargets() string {
	var b strings.Builder
	b.WriteString("kind: Endpoint\nspec:\n  slug: m\n  targets:\n")
	for i := range gatewayv1.MaxEndpointTargets + 1 {
		fmt.Fprintf(&b, "  - {provider: OPENAI, baseURL: \"http://t%d/v1\"}\n", i)
	}
	return b.String()
}

// TestEndpointWithoutTargetFieldsDefaulted writes an Endpoint as a release before several targets wrote it: it is
// admitted as it was, and read back with weight 1 and priority 0 on its target, no name, retry or cooldown.
func TestEndpointWithoutTargetFieldsDefaulted(t *testing.T) {
	obj := parse(t, endpoint)
	obj.SetName("before-targets")
	obj.SetNamespace(namespace)
	if err := k8s.Create(t.Context(), obj); err != nil {
		t.Fatalf("an Endpoint of one target without the new fields was refused: %v", err)
	}
	var e gatewayv1.Endpoint
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(obj), &e); err != nil {
		t.Fatal(err)
	}
	got := e.Spec.Targets[0]
	if got.Weight != 1 || got.Priority != 0 || got.Name != "" || e.Spec.Retry != nil || e.Spec.Cooldown != nil {
		t.Errorf("read back %+v, retry %v, cooldown %v; want weight 1, priority 0, no name, retry or cooldown", got, e.Spec.Retry, e.Spec.Cooldown)
	}
}
