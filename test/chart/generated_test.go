package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/modelgate/modelgate/test/chart/helmtest"
)

// generated reads the objects of a file that `make manifests` generates.
func generated(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(helmtest.Root(t), rel))
	if err != nil {
		t.Fatalf("Failed to read %s (run `make manifests`): %v", rel, err)
	}
	return b
}

// permissions flattens rules into "group|resource|verb" triples, so that two rule lists compare however they
// are grouped.
func permissions(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 {
			continue // name-restricted rules are the chart's own narrowing, compared elsewhere
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[g+"|"+res+"|"+v] = true
				}
			}
		}
	}
	return out
}

// TestManagerRBACMatchesGenerated keeps the chart's manager permissions equal to the reconcilers'
// +kubebuilder:rbac markers (config/rbac/role.yaml): a new marker without a chart change would crash-loop the
// manager on Forbidden, and a chart rule without a marker would be privilege nobody asked for. The one
// deliberate difference is leases, which the chart grants only in the release namespace.
func TestManagerRBACMatchesGenerated(t *testing.T) {
	var role rbacv1.ClusterRole
	for _, obj := range helmtest.Documents(t, string(generated(t, "config/rbac/role.yaml"))) {
		if obj.GetKind() == "ClusterRole" {
			fromUnstructured(t, obj, &role)
		}
	}
	want := permissions(role.Rules)
	if len(want) == 0 {
		t.Fatal("config/rbac/role.yaml holds no ClusterRole rules")
	}

	objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace))
	served := permissions(clusterRole(t, objs, "modelgate-manager").Rules)
	var le rbacv1.Role
	fromUnstructured(t, helmtest.Find(objs, "Role", "modelgate-manager-leader-election"), &le)
	local := permissions(le.Rules)

	for p := range want {
		if strings.HasPrefix(p, "coordination.k8s.io|leases|") {
			if !local[p] {
				t.Errorf("The manager's leader-election Role lacks %s, which config/rbac/role.yaml grants", p)
			}
			if served[p] {
				t.Errorf("The chart grants %s in every served namespace; leases belong in the release namespace only", p)
			}
			continue
		}
		if !served[p] {
			t.Errorf("The chart's manager rules (templates/_rbac_rules.tpl) lack %s, which the reconcilers' markers need", p)
		}
	}
	for p := range served {
		if !want[p] {
			t.Errorf("The chart grants the manager %s, which no +kubebuilder:rbac marker asks for", p)
		}
	}
}

// TestWebhooksMatchGenerated keeps the chart's webhook configuration equal to the +kubebuilder:webhook markers
// (config/webhook/manifests.yaml) in every field the manager's handlers depend on.
func TestWebhooksMatchGenerated(t *testing.T) {
	var gen admissionregistrationv1.ValidatingWebhookConfiguration
	for _, obj := range helmtest.Documents(t, string(generated(t, "config/webhook/manifests.yaml"))) {
		if obj.GetKind() == "ValidatingWebhookConfiguration" {
			fromUnstructured(t, obj, &gen)
		}
	}
	if len(gen.Webhooks) == 0 {
		t.Fatal("config/webhook/manifests.yaml holds no validating webhooks")
	}
	chart := webhookConfiguration(t, helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace)))

	byName := map[string]admissionregistrationv1.ValidatingWebhook{}
	for _, w := range chart.Webhooks {
		byName[w.Name] = w
	}
	if len(chart.Webhooks) != len(gen.Webhooks) {
		t.Errorf("The chart has %d webhooks, the markers generate %d", len(chart.Webhooks), len(gen.Webhooks))
	}
	for _, g := range gen.Webhooks {
		c, ok := byName[g.Name]
		if !ok {
			t.Errorf("The chart lacks webhook %s", g.Name)
			continue
		}
		if *c.ClientConfig.Service.Path != *g.ClientConfig.Service.Path {
			t.Errorf("Webhook %s path = %s, markers say %s", g.Name, *c.ClientConfig.Service.Path, *g.ClientConfig.Service.Path)
		}
		if *c.FailurePolicy != *g.FailurePolicy || *c.SideEffects != *g.SideEffects {
			t.Errorf("Webhook %s failurePolicy/sideEffects = %s/%s, markers say %s/%s", g.Name, *c.FailurePolicy, *c.SideEffects, *g.FailurePolicy, *g.SideEffects)
		}
		if !slices.Equal(c.AdmissionReviewVersions, g.AdmissionReviewVersions) {
			t.Errorf("Webhook %s admissionReviewVersions = %v, markers say %v", g.Name, c.AdmissionReviewVersions, g.AdmissionReviewVersions)
		}
		if len(c.Rules) != len(g.Rules) {
			t.Errorf("Webhook %s has %d rules, markers say %d", g.Name, len(c.Rules), len(g.Rules))
			continue
		}
		for i := range g.Rules {
			cr, gr := c.Rules[i], g.Rules[i]
			if !slices.Equal(cr.APIGroups, gr.APIGroups) || !slices.Equal(cr.APIVersions, gr.APIVersions) ||
				!slices.Equal(cr.Resources, gr.Resources) || !slices.Equal(cr.Operations, gr.Operations) {
				t.Errorf("Webhook %s rule %d = %+v, markers say %+v", g.Name, i, cr.Rule, gr.Rule)
			}
		}
	}
}
