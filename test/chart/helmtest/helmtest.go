// Package helmtest renders the modelgate Helm chart with the helm binary pinned in bin/ and applies what it
// renders to a real API server (envtest), so that the chart tests (test/chart) and the RBAC tests (test/rbac)
// check the same documents that `helm install` would send to a cluster.
package helmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelgate/modelgate/test/kubetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ChartDir is the chart's path relative to the repository root.
const ChartDir = "charts/modelgate"

// KubeVersion is the Kubernetes version renders target: the envtest API server's. A helm built with `go install`
// lacks the ldflags that set its default (it would claim v1.20, below the chart's kubeVersion).
const KubeVersion = "v1.37.1"

// Root returns the repository root: the closest parent directory of the working directory holding go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("Failed to get the working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("Failed to find the repository root (no go.mod above the working directory)")
		}
		dir = parent
	}
}

var (
	helmOnce       sync.Once
	helmInstallErr error
)

// Helm returns the path of bin/helm, installing it with `make helm` (go install from the Go module proxy, at the
// version the Makefile pins) when it is missing, so that later runs reuse it.
func Helm(t testing.TB) string {
	t.Helper()
	root := Root(t)
	path := filepath.Join(root, "bin", "helm")
	helmOnce.Do(func() {
		if _, err := os.Stat(path); err == nil {
			return
		}
		t.Logf("Installing helm into bin/ with `make helm` (first run only)")
		cmd := exec.Command("make", "helm")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			helmInstallErr = fmt.Errorf("make helm: %w\n%s", err, out)
		}
	})
	if helmInstallErr != nil {
		t.Fatalf("Failed to install helm: %v", helmInstallErr)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("helm is not in bin/ after `make helm`: %v", err)
	}
	return path
}

// RunHelm runs bin/helm with args from the repository root and returns stdout, stderr and the error.
func RunHelm(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	helm := Helm(t)
	cmd := exec.Command(helm, args...)
	cmd.Dir = Root(t)
	// An empty home keeps the developer's repositories and plugins out of the render.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// Template runs `helm template release chart --namespace namespace args...` and returns the rendered YAML.
func Template(t testing.TB, release, namespace string, args ...string) (string, error) {
	t.Helper()
	full := append([]string{"template", release, ChartDir, "--namespace", namespace, "--kube-version", KubeVersion}, args...)
	stdout, stderr, err := RunHelm(t, full...)
	if err != nil {
		return stdout, fmt.Errorf("helm %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// MustTemplate is Template that fails the test on error.
func MustTemplate(t testing.TB, release, namespace string, args ...string) string {
	t.Helper()
	out, err := Template(t, release, namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Documents splits a multi-document YAML stream into objects, dropping empty documents.
func Documents(t testing.TB, rendered string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("Failed to decode rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Find returns the rendered object of kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns the rendered objects of one kind.
func OfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// StartEnv starts a real kube-apiserver and etcd (envtest) with the chart's CRDs installed, and stops them when
// the test ends. It fails, rather than skips, without KUBEBUILDER_ASSETS: `make test` always sets it.
func StartEnv(t testing.TB) *rest.Config {
	t.Helper()
	return startEnv(t, nil)
}

// StartEnvWithExternalCRDs is StartEnv with the CRDs of ExternalCRDs installed too (cert-manager, Prometheus
// Operator, Gateway API), so that every kind the chart renders can be validated. missing holds the kinds whose
// CRD could not be fetched, with the reason.
func StartEnvWithExternalCRDs(t testing.TB) (cfg *rest.Config, missing map[string]error) {
	t.Helper()
	files, missing := ExternalCRDFiles(t)
	return startEnv(t, files), missing
}

func startEnv(t testing.TB, extraCRDs []string) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-binaries.sh)")
	}
	return kubetest.StartTest(t, kubetest.Options{CRDPaths: append([]string{filepath.Join(Root(t), ChartDir, "crds")}, extraCRDs...)}).Config
}

// CreateNamespaces creates each namespace, tolerating ones that exist.
func CreateNamespaces(ctx context.Context, t testing.TB, cfg *rest.Config, names ...string) {
	t.Helper()
	if err := createNamespace(ctx, cfg, names...); err != nil {
		t.Fatal(err)
	}
}

func createNamespace(ctx context.Context, cfg *rest.Config, names ...string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, name := range names {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create namespace %s: %w", name, err)
		}
	}
	return nil
}

// Applier applies objects with server-side apply, for real or as a server-side dry run (every admission step,
// validation and defaulting runs, nothing is stored).
type Applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewApplier returns an Applier that discovers kinds from the API server behind cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to build an HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("failed to build a REST mapper: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("failed to build a dynamic client: %w", err)
	}
	return &Applier{dyn: dyn, mapper: mapper}, nil
}

// ErrKindNotServed is returned by Apply for an object whose kind the API server does not serve (for example a
// cert-manager Certificate when cert-manager's CRDs are not installed).
var ErrKindNotServed = errors.New("kind not served by the API server")

// Apply server-side applies obj. dryRun makes it a server-side dry run.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	_, err := a.apply(ctx, obj, dryRun)
	return err
}

// DryRun server-side applies obj as a dry run and returns the object the API server would store: validated,
// defaulted and admitted, but not persisted.
func (a *Applier) DryRun(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return a.apply(ctx, obj, true)
}

func (a *Applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("%s: %w", gvk, ErrKindNotServed)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to map %s: %w", gvk, err)
	}
	var res dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s is namespaced but the chart rendered no metadata.namespace", gvk.Kind, obj.GetName())
		}
		res = a.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	} else if obj.GetNamespace() != "" {
		return nil, fmt.Errorf("%s %s is cluster-scoped but the chart rendered metadata.namespace %q", gvk.Kind, obj.GetName(), obj.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: "modelgate-chart-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	got, err := res.Apply(ctx, obj.GetName(), obj, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return got, nil
}

// Kustomize builds a kustomization directory (relative to the repository root) with the kustomize built into
// the envtest kubectl, the same one `kubectl apply -k` uses, and returns the YAML.
func Kustomize(t testing.TB, dir string) string {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: its kubectl builds the kustomizations")
	}
	cmd := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(Root(t), dir))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String()
}
