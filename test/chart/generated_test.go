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

// TestWebhooksMatchGenerated keeps the chart's webhook configurations, validating and mutating, equal to the
// +kubebuilder:webhook markers (config/webhook/manifests.yaml) in every field the manager's handlers depend on.
func TestWebhooksMatchGenerated(t *testing.T) {
	var genV admissionregistrationv1.ValidatingWebhookConfiguration
	var genM admissionregistrationv1.MutatingWebhookConfiguration
	for _, obj := range helmtest.Documents(t, string(generated(t, "config/webhook/manifests.yaml"))) {
		switch obj.GetKind() {
		case "ValidatingWebhookConfiguration":
			fromUnstructured(t, obj, &genV)
		case "MutatingWebhookConfiguration":
			fromUnstructured(t, obj, &genM)
		}
	}
	if len(genV.Webhooks) == 0 || len(genM.Webhooks) == 0 {
		t.Fatal("config/webhook/manifests.yaml lacks validating or mutating webhooks")
	}
	objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace))
	compareHooks(t, hooksOf(webhookConfiguration(t, objs).Webhooks), hooksOf(genV.Webhooks))
	compareHooks(t, hooksOf(mutatingConfiguration(t, objs).Webhooks), hooksOf(genM.Webhooks))
}

// hook is what a validating and a mutating webhook have in common and the manager's handlers depend on.
type hook struct {
	name, path, failurePolicy, sideEffects string
	versions                               []string
	rules                                  []admissionregistrationv1.RuleWithOperations
}

func hooksOf[W admissionregistrationv1.ValidatingWebhook | admissionregistrationv1.MutatingWebhook](ws []W) []hook {
	var out []hook
	for _, w := range ws {
		switch w := any(w).(type) {
		case admissionregistrationv1.ValidatingWebhook:
			out = append(out, hook{w.Name, *w.ClientConfig.Service.Path, string(*w.FailurePolicy), string(*w.SideEffects), w.AdmissionReviewVersions, w.Rules})
		case admissionregistrationv1.MutatingWebhook:
			out = append(out, hook{w.Name, *w.ClientConfig.Service.Path, string(*w.FailurePolicy), string(*w.SideEffects), w.AdmissionReviewVersions, w.Rules})
		}
	}
	return out
}

// compareHooks reports every difference between the chart's webhooks and the generated ones.
func compareHooks(t *testing.T, chart, gen []hook) {
	t.Helper()
	byName := map[string]hook{}
	for _, c := range chart {
		byName[c.name] = c
	}
	if len(chart) != len(gen) {
		t.Errorf("The chart has %d webhooks, the markers generate %d", len(chart), len(gen))
	}
	for _, g := range gen {
		c, ok := byName[g.name]
		if !ok {
			t.Errorf("The chart lacks webhook %s", g.name)
			continue
		}
		if c.path != g.path {
			t.Errorf("Webhook %s path = %s, markers say %s", g.name, c.path, g.path)
		}
		if c.failurePolicy != g.failurePolicy || c.sideEffects != g.sideEffects {
			t.Errorf("Webhook %s failurePolicy/sideEffects = %s/%s, markers say %s/%s", g.name, c.failurePolicy, c.sideEffects, g.failurePolicy, g.sideEffects)
		}
		if !slices.Equal(c.versions, g.versions) {
			t.Errorf("Webhook %s admissionReviewVersions = %v, markers say %v", g.name, c.versions, g.versions)
		}
		if len(c.rules) != len(g.rules) {
			t.Errorf("Webhook %s has %d rules, markers say %d", g.name, len(c.rules), len(g.rules))
			continue
		}
		for i := range g.rules {
			cr, gr := c.rules[i], g.rules[i]
			if !slices.Equal(cr.APIGroups, gr.APIGroups) || !slices.Equal(cr.APIVersions, gr.APIVersions) ||
				!slices.Equal(cr.Resources, gr.Resources) || !slices.Equal(cr.Operations, gr.Operations) {
				t.Errorf("Webhook %s rule %d = %+v, markers say %+v", g.name, i, cr.Rule, gr.Rule)
			}
		}
	}
}
