package samples

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/test/stack"
)

// TestDefaultKustomization builds config/default, checks the wiring kustomize is trusted with (names, namespace,
// the webhook's Service and CA injection), and has the API server validate every object it can serve.
func TestDefaultKustomization(t *testing.T) {
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := kubectl(t, "kustomize", filepath.Join(root, "config", "default"))

	type object struct {
		kind, name, namespace string
		doc                   []byte
	}
	var objects []object
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("Failed to parse kustomize output: %v\n%s", err, doc)
		}
		objects = append(objects, object{meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace, []byte(doc)})
	}
	has := func(kind, name string) bool {
		return slices.ContainsFunc(objects, func(o object) bool { return o.kind == kind && o.name == name })
	}
	for _, want := range []struct{ kind, name string }{
		{"Namespace", "modelgate-system"},
		{"Deployment", "modelgate-manager"},
		{"Deployment", "modelgate-gatewayd"},
		{"Service", "modelgate-gatewayd"},
		{"Service", "modelgate-webhook"},
		{"ServiceAccount", "modelgate-manager"},
		{"ServiceAccount", "modelgate-gatewayd"},
		{"ClusterRole", "modelgate-manager"},
		{"ClusterRole", "modelgate-gatewayd"},
		{"Role", "modelgate-manager-leader-election"},
		{"Certificate", "modelgate-serving-cert"},
		{"ValidatingWebhookConfiguration", "modelgate-validating"},
		{"MutatingWebhookConfiguration", "modelgate-mutating"},
		{"CustomResourceDefinition", "groups.gateway.modelgate.io"},
		{"CustomResourceDefinition", "apikeys.gateway.modelgate.io"},
		{"CustomResourceDefinition", "endpoints.gateway.modelgate.io"},
		{"CustomResourceDefinition", "workspaces.gateway.modelgate.io"},
		{"CustomResourceDefinition", "workspaceapikeys.gateway.modelgate.io"},
	} {
		if !has(want.kind, want.name) {
			t.Errorf("config/default lacks %s %s", want.kind, want.name)
		}
	}

	var servable bytes.Buffer
	for _, o := range objects {
		switch o.kind {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
			// Cluster-scoped.
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			// The fields checked here are common to both kinds.
			var hook admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(o.doc, &hook); err != nil {
				t.Fatalf("Failed to parse the webhook configuration: %v", err)
			}
			if got := hook.Annotations["cert-manager.io/inject-ca-from"]; got != "modelgate-system/modelgate-serving-cert" {
				t.Errorf("%s %s injects its CA from %q, want modelgate-system/modelgate-serving-cert", o.kind, o.name, got)
			}
			if len(hook.Webhooks) == 0 {
				t.Errorf("%s %s has no webhooks", o.kind, o.name)
			}
			for _, w := range hook.Webhooks {
				if svc := w.ClientConfig.Service; svc == nil || svc.Name != "modelgate-webhook" || svc.Namespace != "modelgate-system" {
					t.Errorf("Webhook %s calls %+v, want Service modelgate-system/modelgate-webhook", w.Name, svc)
				}
			}
			// Installing it would send this API server's admissions to a Service that does not exist.
			continue
		default:
			if o.namespace != "modelgate-system" {
				t.Errorf("%s %s is in namespace %q, want modelgate-system", o.kind, o.name, o.namespace)
			}
		}
		if o.kind == "Certificate" || o.kind == "Issuer" {
			continue // cert-manager's kinds are not served by a bare API server
		}
		servable.WriteString("---\n")
		servable.Write(o.doc)
		servable.WriteString("\n")
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "modelgate-system"}}
	if err := s.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("Failed to create namespace modelgate-system: %v", err)
	}
	file := filepath.Join(t.TempDir(), "default.yaml")
	if err := os.WriteFile(file, servable.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "--dry-run=server", "-f", file)
}
