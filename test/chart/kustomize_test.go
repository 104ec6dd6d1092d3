package chart

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modelgate/modelgate/test/chart/helmtest"
)

// kustomizeValues are the chart values config/default corresponds to: the defaults, except that the webhook
// certificate comes from cert-manager, which config/default requires.
var kustomizeValues = []string{"--set", "webhook.certManager.enabled=true"}

// TestKustomizeMatchesChart checks that `kubectl apply -k config/default` installs what `helm install modelgate
// charts/modelgate -n modelgate-system --set webhook.certManager.enabled=true` installs. Both renders are sent to a
// real API server as server-side dry runs, which validates every kustomize document and fills in the defaults
// either side may leave out (protocol: TCP, a webhook's port 443), and the returned objects must then be equal:
// the same kind/namespace/name set, and the same content, after normalize drops only what legitimately differs.
func TestKustomizeMatchesChart(t *testing.T) {
	kust := helmtest.Documents(t, helmtest.Kustomize(t, "config/default"))
	chart := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace, append(kustomizeValues, "--include-crds")...))

	cfg, missing := helmtest.StartEnvWithExternalCRDs(t)
	ctx := context.Background()
	helmtest.CreateNamespaces(ctx, t, cfg, namespace)
	applier, err := helmtest.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// helm creates the namespace itself (--create-namespace); kustomize renders it.
	if kust = withoutNamespace(t, kust); len(kust) == 0 {
		t.Fatal("config/default renders nothing but its Namespace")
	}
	got := stored(ctx, t, applier, missing, "config/default", kust)
	want := stored(ctx, t, applier, missing, "the chart", chart)
	if d := compareInstalls(got, want); d != "" {
		t.Errorf("config/default differs from the chart's defaults with webhook.certManager.enabled=true; change the side "+
			"that is wrong (kustomize: config/, chart: charts/modelgate) so that they agree:\n%s", d)
	}
}

// withoutNamespace drops the Namespace config/default renders, after checking it is the install namespace.
func withoutNamespace(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			out = append(out, o)
			continue
		}
		if o.GetName() != namespace {
			t.Errorf("config/default renders Namespace %s, want %s", o.GetName(), namespace)
		}
	}
	return out
}

// stored dry-runs each object and returns what the API server would store, normalized and keyed by
// kind/namespace/name. An object of a kind whose CRD could not be fetched is compared as rendered.
func stored(ctx context.Context, t *testing.T, a *helmtest.Applier, missing map[string]error, from string, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		key := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := out[key]; dup {
			t.Errorf("%s renders %s twice", from, key)
		}
		got, err := a.DryRun(ctx, o)
		switch {
		case err == nil:
		case errors.Is(err, helmtest.ErrKindNotServed) && missing[o.GetKind()] != nil:
			t.Logf("Comparing %s as rendered: its CRD is not installed (%v)", key, missing[o.GetKind()])
			got = o
		default:
			t.Errorf("Server-side dry run refused a document of %s: %v", from, err)
			continue
		}
		out[key] = normalize(t, got)
	}
	return out
}

// helmOnly are labels and annotations that only Helm sets: its bookkeeping, and the chart version and release
// that the kustomize install has no notion of.
var helmOnly = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/resource-policy"}

// normalize keeps what an install means and drops what legitimately differs between the two renders:
//   - server bookkeeping (uid, resourceVersion, managedFields, timestamps, status) and the Service's allocated
//     cluster IPs, which the dry run picks at random;
//   - helmOnly labels and annotations, on objects and pod templates;
//   - the image tag (kustomize pins one with `images:`, the chart uses its appVersion), not the repository;
//   - CRD labels: Helm installs crds/ untemplated, so the chart cannot label them;
//   - how RBAC rules are grouped: rules become the sorted set of "group resource verb [name]" grants they allow.
func normalize(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	obj := o.DeepCopy().Object
	delete(obj, "status")
	meta := map[string]any{"name": o.GetName()}
	if ns := o.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if l := without(o.GetLabels(), helmOnly); len(l) > 0 && o.GetKind() != "CustomResourceDefinition" {
		meta["labels"] = l
	}
	if a := without(o.GetAnnotations(), helmOnly); len(a) > 0 {
		meta["annotations"] = a
	}
	obj["metadata"] = meta

	switch o.GetKind() {
	case "Deployment":
		tmpl, _, _ := unstructured.NestedMap(obj, "spec", "template", "metadata")
		for _, field := range []string{"labels", "annotations"} {
			if m, ok := tmpl[field].(map[string]any); ok {
				for _, k := range helmOnly {
					delete(m, k)
				}
			}
		}
		_ = unstructured.SetNestedMap(obj, tmpl, "spec", "template", "metadata")
		containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
		for _, c := range containers {
			c := c.(map[string]any)
			if image, ok := c["image"].(string); ok {
				c["image"] = imageRepository(image)
			}
		}
		_ = unstructured.SetNestedSlice(obj, containers, "spec", "template", "spec", "containers")
	case "Service":
		unstructured.RemoveNestedField(obj, "spec", "clusterIP")
		unstructured.RemoveNestedField(obj, "spec", "clusterIPs")
	case "Role", "ClusterRole":
		var role rbacv1.ClusterRole // a Role's rules have the same shape
		fromUnstructured(t, &unstructured.Unstructured{Object: map[string]any{"rules": obj["rules"]}}, &role)
		obj["rules"] = grants(role.Rules)
	}
	return obj
}

func without(m map[string]string, keys []string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// imageRepository drops the tag (and digest) of an image reference, keeping a registry port.
func imageRepository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// grants flattens rules into the sorted, deduplicated list of single grants they allow.
func grants(rules []rbacv1.PolicyRule) []any {
	set := map[string]bool{}
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{"*"}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						set[fmt.Sprintf("%q %s %s %s", g, res, v, n)] = true
					}
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				set["url "+u+" "+v] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	anys := make([]any, len(out))
	for i, g := range out {
		anys[i] = g
	}
	return anys
}

// compareInstalls lists the objects only one side installs and every field where a shared object differs.
func compareInstalls(kust, chart map[string]map[string]any) string {
	var lines []string
	for key, k := range kust {
		c, ok := chart[key]
		if !ok {
			lines = append(lines, "only config/default installs "+key)
			continue
		}
		for _, d := range diff("", k, c) {
			lines = append(lines, key+": "+d)
		}
	}
	for key := range chart {
		if _, ok := kust[key]; !ok {
			lines = append(lines, "only the chart installs "+key)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// diff returns "path: config/default=X chart=Y" for each leaf where a and b differ.
func diff(path string, a, b any) []string {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		var out []string
		for k := range keys {
			out = append(out, diff(path+"."+k, av[k], bv[k])...)
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		if path == ".rules" {
			return grantDiff(path, av, bv)
		}
		if len(av) != len(bv) {
			break
		}
		var out []string
		for i := range av {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])...)
		}
		return out
	}
	return []string{fmt.Sprintf("%s: config/default=%s chart=%s", path, short(a), short(b))}
}

func short(v any) string {
	if v == nil {
		return "(absent)"
	}
	s := fmt.Sprintf("%v", v)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// grantDiff names the RBAC grants only one side has, rather than printing both lists.
func grantDiff(path string, kust, chart []any) []string {
	var out []string
	for _, g := range kust {
		if !slices.Contains(chart, g) {
			out = append(out, fmt.Sprintf("%s: only config/default grants %v", path, g))
		}
	}
	for _, g := range chart {
		if !slices.Contains(kust, g) {
			out = append(out, fmt.Sprintf("%s: only the chart grants %v", path, g))
		}
	}
	return out
}
