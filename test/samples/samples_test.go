// Package samples checks that every manifest in config/samples is accepted by `kubectl apply` against a real
// API server running the product's CRDs and admission webhooks, and that the objects it creates become Ready.
package samples

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// s is the stack every test of the package shares: starting a control plane takes a while.
var s *stack.Stack

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-binaries.sh)")
		os.Exit(1)
	}
	os.Exit(stack.RunSuite(m, "samples", stack.Options{}, func(_ context.Context, st *stack.Stack) error {
		s = st
		return nil
	}))
}

func TestSamplesApply(t *testing.T) {
	ctx := context.Background()
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "config", "samples")

	// The README tour: the kustomization applied on top of what `make run` seeds, in its namespace.
	t.Run("kustomization into the seeded namespace", func(t *testing.T) {
		kubectl(t, "apply", "-n", s.Namespace, "-k", dir)
		// A second apply must be a no-op, not a refusal: defaults and immutable fields must round-trip.
		kubectl(t, "apply", "-n", s.Namespace, "-k", dir)
		waitReady(t, s.Namespace)
	})

	// Every file on its own, in a namespace without a Workspace, in file-name order: keys before their groups,
	// children before their parents are all admitted.
	t.Run("every file into a fresh namespace", func(t *testing.T) {
		const ns = "samples"
		if err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("Failed to create namespace %s: %v", ns, err)
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var applied int
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			kubectl(t, "apply", "-n", ns, "-f", f)
			applied++
		}
		if applied < 5 {
			t.Fatalf("Applied %d sample files, want at least 5 (groups, keys, endpoint, workspace)", applied)
		}
		waitReady(t, ns)

		var ws gatewayv1.WorkspaceList
		if err := s.Client.List(ctx, &ws, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(ws.Items) != 1 {
			t.Errorf("Namespace %s has %d Workspaces after applying workspace.yaml, want 1", ns, len(ws.Items))
		}
		// models-url.yaml and models-container.yaml: one Model and one ModelDeployment each, admitted by the
		// webhooks. Neither serves here (nothing listens at the url, no kubelet runs the container).
		var models gatewayv1.ModelList
		var deployments gatewayv1.ModelDeploymentList
		if err := s.Client.List(ctx, &models, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if err := s.Client.List(ctx, &deployments, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(models.Items) != 2 || len(deployments.Items) != 2 {
			t.Errorf("Namespace %s has %d Models and %d ModelDeployments after applying the model samples, want 2 and 2",
				ns, len(models.Items), len(deployments.Items))
		}
		// endpoint-targets.yaml: an Endpoint of two targets with its retry and cooldown, as written.
		var chat gatewayv1.Endpoint
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-chat"}, &chat); err != nil {
			t.Fatal(err)
		}
		if len(chat.Spec.Targets) != 2 || chat.Spec.Targets[0].Weight != 3 || chat.Spec.Targets[0].Priority != 0 ||
			chat.Spec.Targets[1].Priority != 1 || chat.Spec.Retry == nil || chat.Spec.Cooldown == nil {
			t.Errorf("Endpoint demo-chat of endpoint-targets.yaml reads back as %+v", chat.Spec)
		}
	})
}

// kubectl runs the kubectl that matches the API server, returns its standard output, and fails the test with
// both outputs on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.KubectlPath, append([]string{"--kubeconfig", s.KubeconfigPath}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s failed: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// waitReady waits for the sample Groups (three CASCADING, two INDEPENDENT) and APIKeys of ns to report Ready,
// and fails with the conditions of those that do not.
func waitReady(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pending []string
	for {
		pending = pending[:0]
		var groups gatewayv1.GroupList
		var keys gatewayv1.APIKeyList
		if err := s.Client.List(ctx, &groups, client.InNamespace(ns)); err != nil {
			t.Fatalf("Failed to list groups: %v", err)
		}
		if err := s.Client.List(ctx, &keys, client.InNamespace(ns)); err != nil {
			t.Fatalf("Failed to list keys: %v", err)
		}
		if len(groups.Items) != 5 {
			t.Fatalf("Namespace %s has %d groups, want the 5 of the samples", ns, len(groups.Items))
		}
		if len(keys.Items) != 2 {
			t.Fatalf("Namespace %s has %d API keys, want the 2 of the samples", ns, len(keys.Items))
		}
		for _, g := range groups.Items {
			if !meta.IsStatusConditionTrue(g.Status.Conditions, gatewayv1.ConditionReady) {
				pending = append(pending, "Group "+g.Name+": "+describe(g.Status.Conditions))
			}
		}
		for _, k := range keys.Items {
			if !meta.IsStatusConditionTrue(k.Status.Conditions, gatewayv1.ConditionReady) {
				pending = append(pending, "APIKey "+k.Name+": "+describe(k.Status.Conditions))
			}
		}
		if len(pending) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Samples in %s never became Ready:\n%s", ns, strings.Join(pending, "\n"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func describe(conds []metav1.Condition) string {
	c := meta.FindStatusCondition(conds, gatewayv1.ConditionReady)
	if c == nil {
		return "no Ready condition yet"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}
