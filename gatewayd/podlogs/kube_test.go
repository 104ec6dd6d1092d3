package podlogs_test

import (
	"context"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/podlogs"
	"github.com/modelgate/modelgate/test/kubetest"
)

// TestKubeFindsThePods runs the client-go Reader against a real API server (envtest). envtest has no kubelet, so
// no pod prints anything: the API server answers pods/log of a pod on no node with an empty log. What this test
// shows is which pods the Reader asks for, by watching the requests its real client sends: those of the
// deployment's own Deployment (by its controller reference and its selector), and none for a Deployment of that
// name that another owner controls, a missing Deployment, or a source without pods. That a log stream is parsed
// and filtered is TestScan's part.
func TestKubeFindsThePods(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: this test needs the envtest binaries (make envtest)")
	}
	env, err := kubetest.Start(kubetest.Options{CRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c := env.Client
	ns, err := kubetest.NewNamespace(ctx, c, "podlogs-")
	if err != nil {
		t.Fatal(err)
	}
	model := func(name string, src gatewayv1.DeploymentSource) *gatewayv1.ModelDeployment {
		md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "m", Source: src}}
		if err := c.Create(ctx, md); err != nil {
			t.Fatal(err)
		}
		return md
	}
	container := gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "registry.example/model:1", Port: 8080}}
	owned, foreign, missing := model("owned", container), model("foreign", container), model("missing", container)
	url := model("url", gatewayv1.DeploymentSource{URL: "http://model.example"})

	// The Deployments the manager would make (envtest runs no manager): md-owned controlled by its
	// ModelDeployment, md-foreign by nobody.
	deployment := func(md *gatewayv1.ModelDeployment, selector string, own bool) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: md.WorkloadName(), Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": selector}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": selector}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "model", Image: "registry.example/model:1"}}}},
			}}
		if own {
			if err := controllerutil.SetControllerReference(md, d, c.Scheme()); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	deployment(owned, "owned", true)
	deployment(foreign, "foreign", false)
	// Pods as the ReplicaSet controller would make them: two of owned's selector, one of foreign's, one of none.
	for _, p := range []struct{ name, app string }{{"owned-a", "owned"}, {"owned-b", "owned"}, {"foreign-a", "foreign"}, {"stray", "other"}} {
		if err := c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: map[string]string{"app": p.app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "model", Image: "registry.example/model:1"}}}}); err != nil {
			t.Fatal(err)
		}
	}

	cfg := rest.CopyConfig(env.Config)
	var mu sync.Mutex
	var asked []string
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if strings.HasSuffix(req.URL.Path, "/log") {
				mu.Lock()
				asked = append(asked, path.Base(path.Dir(req.URL.Path))+"?"+req.URL.RawQuery)
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	r := podlogs.New(kubernetes.NewForConfigOrDie(cfg))
	since := time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)
	q := podlogs.Query{Since: since, Until: since.Add(time.Hour), Limit: 10}
	if lines, err := r.Read(ctx, owned, q); err != nil || len(lines) != 0 {
		t.Fatalf("owned: lines %v, error %v; want none (envtest serves empty logs) and no error", lines, err)
	}
	slices.Sort(asked)
	want := "container=model&limitBytes=4194304&sinceTime=2026-03-16T10%3A00%3A00Z&timestamps=true"
	if len(asked) != 2 || asked[0] != "owned-a?"+want || asked[1] != "owned-b?"+want {
		t.Errorf("owned: pods/log asked for %q, want owned-a and owned-b with %s", asked, want)
	}
	// Newest first, the read takes each pod's last lines rather than its first bytes.
	asked = nil
	q.Newest = true
	if _, err := r.Read(ctx, owned, q); err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	want = "container=model&sinceTime=2026-03-16T10%3A00%3A00Z&tailLines=5000&timestamps=true"
	if len(asked) != 2 || asked[0] != "owned-a?"+want || asked[1] != "owned-b?"+want {
		t.Errorf("owned, newest first: pods/log asked for %q, want owned-a and owned-b with %s", asked, want)
	}
	for _, md := range []*gatewayv1.ModelDeployment{foreign, missing, url} {
		asked = nil
		if lines, err := r.Read(ctx, md, q); err != nil || len(lines) != 0 || len(asked) != 0 {
			t.Errorf("%s: lines %v, error %v, pods/log asked for %q; want nothing", md.Name, lines, err, asked)
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
