package e2e

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// gitopsKey is the key that config/samples/gitops/keys/project-ci.yaml brings in its Secret.
const gitopsKey = "mgk_G1tOpsDemo4k7.vQ3xR8mZp2LwN6cYt1HsJ9bFd5KgE0aU"

// TestGitOpsReverseOrderConverges applies the GitOps example repository the way a GitOps tool that knows no
// dependencies might: one object at a time, with server-side apply, in reverse dependency order (the key and its
// Secret first, then the leaf group up to the root, then the Endpoint, the Workspace and the namespace last but
// one). Everything must converge: every group Ready, the key Ready, and the key working through gatewayd.
func TestGitOpsReverseOrderConverges(t *testing.T) {
	s := theStack(t)
	rendered, err := exec.Command(s.KubectlPath, "kustomize", filepath.Join("..", "..", "config", "samples", "gitops")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/samples/gitops: %v", err)
	}
	// The example routes to the demo upstream of `make run`, and its upstream Secret lists that host only; this
	// stack's upstream listens elsewhere.
	up, err := url.Parse(s.UpstreamURL)
	if err != nil {
		t.Fatal(err)
	}
	rendered = bytes.ReplaceAll(rendered, []byte("http://127.0.0.1:9999/v1"), []byte(s.UpstreamURL))
	rendered = bytes.ReplaceAll(rendered, []byte(`upstream-hosts: 127.0.0.1:9999`), []byte("upstream-hosts: "+up.Host))

	docs := strings.Split(string(rendered), "\n---\n")
	rank := func(doc string) int {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("rendered document does not parse: %v", err)
		}
		// Reverse dependency order; the namespace must exist before anything namespaced is applied.
		order := map[string]int{"Namespace": 0, "APIKey": 1, "Secret": 2, "Group": 3, "Endpoint": 4, "Workspace": 5}
		r, ok := order[u.GetKind()]
		if !ok {
			t.Fatalf("unexpected kind %s in the GitOps example", u.GetKind())
		}
		// Groups leaf first.
		return r*10 + map[string]int{"project": 0, "customer": 1, "reseller": 2}[u.GetName()]
	}
	slices.SortStableFunc(docs, func(a, b string) int { return rank(a) - rank(b) })

	for _, doc := range docs {
		cmd := exec.Command(s.KubectlPath, "apply", "--server-side", "--field-manager=gitops-e2e", "-f", "-")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+s.KubeconfigPath)
		cmd.Stdin = strings.NewReader(doc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply --server-side refused a document of the example: %v\n%s\n%s", err, out, doc)
		}
	}

	const ns = "gitops-demo"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"reseller", "customer", "project"} {
		waitReady(ctx, t, s.Client, &gatewayv1.Group{}, ns, name, func(o client.Object) []metav1.Condition {
			return o.(*gatewayv1.Group).Status.Conditions
		})
	}
	waitReady(ctx, t, s.Client, &gatewayv1.APIKey{}, ns, "project-ci", func(o client.Object) []metav1.Condition {
		return o.(*gatewayv1.APIKey).Status.Conditions
	})

	// The key reaches gatewayd with the snapshot that follows; poll within a bound, not a timing assertion.
	var last response
	for ctx.Err() == nil {
		if last = infer(t, s, gitopsKey, "demo/echo"); last.code == 200 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the GitOps key never worked through gatewayd; last answer: %s", last)
}

// waitReady polls one object until its Ready condition is True, failing with its conditions when ctx ends.
func waitReady(ctx context.Context, t *testing.T, c client.Client, obj client.Object, ns, name string, conds func(client.Object) []metav1.Condition) {
	t.Helper()
	for {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		if err == nil && meta.IsStatusConditionTrue(conds(obj), gatewayv1.ConditionReady) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%T %s/%s never became Ready (get error %v); conditions: %+v", obj, ns, name, err, conds(obj))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
