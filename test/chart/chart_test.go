// Package chart checks the modelgate Helm chart without a cluster that can run pods: helm lint, helm template
// for each supported configuration with assertions on what matters in each, a golden file of the default
// render, the refusals of values that cannot work, CRDs and webhooks that agree with what `make manifests`
// generates, and a server-side dry run of every rendered document against a real API server (envtest).
package chart

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/modelgate/modelgate/test/chart/helmtest"
)

var update = flag.Bool("update", false, "rewrite testdata/default.golden.yaml and charts/modelgate/crds from the current sources")

const (
	release   = "modelgate"
	namespace = "modelgate-system"
)

// scenario is one supported configuration of the chart, with what its render must contain.
type scenario struct {
	name   string
	values string // a file under testdata/values, empty for the defaults
	check  func(t *testing.T, objs []*unstructured.Unstructured)
}

func (s scenario) args() []string {
	if s.values == "" {
		return nil
	}
	return []string{"--values", filepath.Join("test", "chart", "testdata", "values", s.values)}
}

var scenarios = []scenario{
	{name: "default", check: checkDefault},
	{name: "redis-replicated", values: "redis-replicated.yaml", check: checkRedisReplicated},
	{name: "redis-cluster", values: "redis-cluster.yaml", check: checkRedisCluster},
	{name: "redis-sentinel", values: "redis-sentinel.yaml", check: checkRedisSentinel},
	{name: "cert-manager", values: "cert-manager.yaml", check: checkCertManager},
	{name: "namespaced", values: "namespaced.yaml", check: checkNamespaced},
	{name: "everything", values: "everything.yaml", check: checkEverything},
}

func TestLint(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "--kube-version", helmtest.KubeVersion, helmtest.ChartDir}, s.args()...)
			stdout, stderr, err := helmtest.RunHelm(t, args...)
			if err != nil {
				t.Fatalf("helm lint failed: %v\n%s%s", err, stdout, stderr)
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace, s.args()...))
			checkCommon(t, objs)
			s.check(t, objs)
		})
	}
}

// TestRefusals renders values that would install something broken and checks that helm refuses them with a
// message naming the value and the rule.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"several replicas on the embedded store", []string{"--set", "gatewayd.replicas=3"},
			"gatewayd.replicas=3 needs store.type=redis"},
		{"redis without a URL", []string{"--set", "store.type=redis"},
			"store.type=redis needs redis.url or redis.existingSecret"},
		{"unknown store", []string{"--set", "store.type=etcd"},
			`store.type must be "embedded" or "redis", got "etcd"`},
		{"unknown secret access", []string{"--set", "gatewayd.secretAccess=all"},
			`gatewayd.secretAccess must be "named" or "namespace", got "all"`},
		{"invalid namespace", []string{"--set", "namespaces={Team_A}"},
			`namespaces: "Team_A" is not a valid namespace name`},
		{"zero replicas", []string{"--set", "gatewayd.replicas=0"},
			"gatewayd.replicas must be at least 1"},
		// values.schema.json: a misspelt value is an error, not a silently ignored setting.
		{"misspelt value", []string{"--set", "gatewayd.replica=3"},
			"at '/gatewayd': additional properties 'replica' not allowed"},
		{"wrong type", []string{"--set", "webhook.certManager.enabled=maybe"},
			"/webhook/certManager/enabled"},
		{"lease duration that is not a duration", []string{"--set", "manager.leaderElection.leaseDuration=15"},
			"/manager/leaderElection/leaseDuration"},
		{"unknown Redis mode", []string{"--set", "store.type=redis,redis.mode=replicated"},
			"/redis/mode"},
		{"Redis address without a port", []string{"--set", "store.type=redis,redis.mode=cluster,redis.addrs={redis-0}"},
			"/redis/addrs/0"},
		{"cluster without addresses", []string{"--set", "store.type=redis,redis.mode=cluster"},
			"redis.mode=cluster needs redis.addrs"},
		{"sentinel without a master name", []string{"--set", "store.type=redis,redis.mode=sentinel,redis.addrs={s:26379}"},
			"redis.mode=sentinel needs redis.masterName"},
		{"cluster with a URL", []string{"--set", "store.type=redis,redis.mode=cluster,redis.addrs={r:6379},redis.url=redis://r:6379"},
			"redis.url is for redis.mode=standalone"},
		{"CA without TLS", []string{"--set", "store.type=redis,redis.mode=cluster,redis.addrs={r:6379},redis.tlsCASecret=ca"},
			"redis.tlsCASecret needs redis.tls=true"},
		{"negative WAIT replicas", []string{"--set", "store.type=redis,redis.url=redis://r:6379,redis.waitReplicas=-1"},
			"/redis/waitReplicas"},
		{"WAIT timeout that is not a duration", []string{"--set", "store.type=redis,redis.url=redis://r:6379,redis.waitTimeout=100"},
			"/redis/waitTimeout"},
		{"standalone with addresses", []string{"--set", "store.type=redis,redis.url=redis://r:6379,redis.addrs={r:6379}"},
			"redis.addrs, redis.masterName and redis.tls are for redis.mode=sentinel or cluster"},
		{"tracing without a collector", []string{"--set", "tracing.enabled=true"},
			"tracing.enabled=true needs tracing.endpoint"},
		{"unknown OTLP protocol", []string{"--set", "tracing.enabled=true,tracing.endpoint=http://c:4317,tracing.protocol=thrift"},
			"/tracing/protocol"},
		{"HTTPRoute without a Gateway", []string{"--set", "gatewayd.httpRoute.enabled=true"},
			"gatewayd.httpRoute.enabled=true needs gatewayd.httpRoute.parentRefs"},
		{"HTTPRoute parentRef without a name", []string{"--set", "gatewayd.httpRoute.enabled=true,gatewayd.httpRoute.parentRefs[0].namespace=gw"},
			"missing property 'name'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := helmtest.Template(t, release, namespace, c.args...)
			if err == nil {
				t.Fatalf("helm template %v rendered, want a refusal containing %q; got:\n%.500s", c.args, c.want, out)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("helm template %v refused with:\n%v\nwant a message containing %q", c.args, err, c.want)
			}
		})
	}

	// Three replicas are fine once the store is shared.
	if _, err := helmtest.Template(t, release, namespace, "--set", "gatewayd.replicas=3,store.type=redis,redis.url=redis://r:6379"); err != nil {
		t.Fatalf("Three replicas with Redis must render: %v", err)
	}
}

// TestGolden compares the default render with testdata/default.golden.yaml, so that any template change shows
// up in review. Rewrite it with `go test ./test/chart/ -run TestGolden -update`.
func TestGolden(t *testing.T) {
	got := helmtest.MustTemplate(t, release, namespace)
	path := filepath.Join("testdata", "default.golden.yaml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Failed to read the golden file (create it with -update): %v", err)
	}
	if got != string(want) {
		t.Fatalf("The default render differs from %s; review the change and rerun with -update.\n%s", path, lineDiff(string(want), got))
	}
}

// TestCRDsInSync fails when charts/modelgate/crds differs from config/crd/bases, which `make manifests`
// generates. Helm installs CRDs only from the chart's crds/ directory, so a drift would ship stale schemas.
// Copy them with `go test ./test/chart/ -run TestCRDsInSync -update`.
func TestCRDsInSync(t *testing.T) {
	root := helmtest.Root(t)
	src := filepath.Join(root, "config", "crd", "bases")
	dst := filepath.Join(root, helmtest.ChartDir, "crds")
	generated, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("No generated CRDs in %s (run `make manifests`): %v", src, err)
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join(dst, "*.yaml"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range generated {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	const fix = "run `go test ./test/chart/ -run TestCRDsInSync -update`"
	for _, f := range generated {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dst, filepath.Base(f)))
		if err != nil {
			t.Errorf("The chart lacks CRD %s: %s", filepath.Base(f), fix)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("The chart's CRD %s differs from config/crd/bases: %s", filepath.Base(f), fix)
		}
	}
	shipped, _ := filepath.Glob(filepath.Join(dst, "*.yaml"))
	for _, f := range shipped {
		if _, err := os.Stat(filepath.Join(src, filepath.Base(f))); err != nil {
			t.Errorf("The chart ships CRD %s that is no longer generated: %s", filepath.Base(f), fix)
		}
	}
}

// TestDryRun applies every document of every scenario to a real API server with a server-side dry run: the
// API server validates each one against its schema (built-in kinds, the chart's CRDs, and the cert-manager,
// Prometheus Operator and Gateway API CRDs of helmtest.ExternalCRDs) and runs admission, without storing
// anything. A kind is skipped only when its CRD could not be fetched from the Go module proxy, with the reason.
// TestKustomizeMatchesChart dry-runs every document of config/default the same way.
func TestDryRun(t *testing.T) {
	cfg, missing := helmtest.StartEnvWithExternalCRDs(t)
	ctx := context.Background()
	helmtest.CreateNamespaces(ctx, t, cfg, namespace, "team-a", "team-b")
	applier, err := helmtest.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Controls: the dry run must validate (a broken copy of a rendered Deployment is refused) and must not store.
	objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace))
	broken := helmtest.Find(objs, "Deployment", "modelgate-gatewayd").DeepCopy()
	if err := unstructured.SetNestedField(broken.Object, int64(-1), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if err := applier.Apply(ctx, broken, true); err == nil || !strings.Contains(err.Error(), "spec.replicas") {
		t.Fatalf("The dry run accepted a Deployment with replicas -1 (err %v): it does not validate", err)
	}
	if err := applier.Apply(ctx, helmtest.Find(objs, "Deployment", "modelgate-gatewayd"), true); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(namespace).Get(ctx, "modelgate-gatewayd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("After a dry run, getting the Deployment returned %v, want NotFound: the dry run stored it", err)
	}

	// Control: the external CRDs validate too, so that a document of their kinds passing means something.
	everything := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace, "--values", filepath.Join("test", "chart", "testdata", "values", "everything.yaml")))
	for _, c := range []struct {
		kind, field string
		path        []string
	}{
		{"Certificate", "spec.secretName", []string{"spec", "secretName"}},
		{"ServiceMonitor", "spec.selector", []string{"spec", "selector"}},
		{"PrometheusRule", "spec.groups[0].rules[0].for", nil},
		{"HTTPRoute", "spec.parentRefs[0].name", []string{"spec", "parentRefs"}},
	} {
		if missing[c.kind] != nil {
			continue
		}
		objs := helmtest.OfKind(everything, c.kind)
		if len(objs) == 0 {
			t.Fatalf("The everything values render no %s", c.kind)
		}
		broken := objs[0].DeepCopy()
		switch c.kind {
		case "HTTPRoute":
			// A parentRef without the name the CRD requires.
			err = unstructured.SetNestedSlice(broken.Object, []any{map[string]any{"namespace": "gateway-system"}}, c.path...)
		case "PrometheusRule":
			// A rule whose for is not a duration of the CRD's pattern.
			groups, _, _ := unstructured.NestedSlice(broken.Object, "spec", "groups")
			groups[0].(map[string]any)["rules"].([]any)[0].(map[string]any)["for"] = "five minutes"
			err = unstructured.SetNestedSlice(broken.Object, groups, "spec", "groups")
		default:
			unstructured.RemoveNestedField(broken.Object, c.path...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := applier.Apply(ctx, broken, true); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("The dry run accepted a %s without %s (err %v): its CRD does not validate", c.kind, c.field, err)
		}
	}

	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace, s.args()...))
			applied := 0
			for _, obj := range objs {
				err := applier.Apply(ctx, obj, true)
				switch {
				case err == nil:
					applied++
				case errors.Is(err, helmtest.ErrKindNotServed) && missing[obj.GetKind()] != nil:
					t.Logf("SKIPPED %s %s: its CRD could not be installed: %v", obj.GetKind(), obj.GetName(), missing[obj.GetKind()])
				default:
					t.Errorf("Server-side dry run refused a rendered document: %v", err)
				}
			}
			if applied < 10 {
				t.Errorf("Only %d documents passed the dry run, want the whole install (at least 10)", applied)
			}
		})
	}
}

// checkCommon holds for every configuration: hardened pods, namespaced objects in a namespace, and
// admission webhooks for the five kinds.
func checkCommon(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, name := range []string{"modelgate-manager", "modelgate-gatewayd"} {
		d := deployment(t, objs, name)
		pod := d.Spec.Template.Spec
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("Deployment %s: pod securityContext.runAsNonRoot must be true", name)
		}
		for _, c := range pod.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("Deployment %s container %s: want readOnlyRootFilesystem, no privilege escalation, all capabilities dropped", name, c.Name)
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Errorf("Deployment %s container %s: want liveness and readiness probes", name, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("Deployment %s container %s: want CPU and memory requests", name, c.Name)
			}
		}
	}
	if got := container(t, objs, "modelgate-manager").Command; !slices.Equal(got, []string{"/manager"}) {
		t.Errorf("manager command = %v, want [/manager]", got)
	}
	if got := container(t, objs, "modelgate-gatewayd").Command; !slices.Equal(got, []string{"/gatewayd"}) {
		t.Errorf("gatewayd command = %v, want [/gatewayd]", got)
	}
	for _, want := range []string{"--leader-elect=true", "--leader-election-lease-duration=15s",
		"--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s"} {
		if args := container(t, objs, "modelgate-manager").Args; !slices.Contains(args, want) {
			t.Errorf("manager args %v lack %s", args, want)
		}
	}

	vwc := webhookConfiguration(t, objs)
	var paths []string
	for _, w := range vwc.Webhooks {
		paths = append(paths, *w.ClientConfig.Service.Path)
		if w.ClientConfig.Service.Name != "modelgate-webhook" || w.ClientConfig.Service.Namespace != namespace {
			t.Errorf("Webhook %s calls service %s/%s, want %s/modelgate-webhook", w.Name, w.ClientConfig.Service.Namespace, w.ClientConfig.Service.Name, namespace)
		}
	}
	for _, kind := range []string{"apikey", "endpoint", "group", "workspace", "workspaceapikey"} {
		if want := "/validate-gateway-modelgate-io-v1alpha1-" + kind; !slices.Contains(paths, want) {
			t.Errorf("Webhook paths %v lack %s", paths, want)
		}
	}
	if helmtest.Find(objs, "Service", "modelgate-gatewayd") == nil {
		t.Error("No gatewayd Service rendered")
	}
	if helmtest.Find(objs, "PodDisruptionBudget", "modelgate-gatewayd") == nil {
		t.Error("No gatewayd PodDisruptionBudget rendered")
	}
}

func checkDefault(t *testing.T, objs []*unstructured.Unstructured) {
	gw := deployment(t, objs, "modelgate-gatewayd")
	// Tracing is off by default: no OTEL_* variable on either component (docs/operations.md "Traces").
	for _, name := range []string{"modelgate-gatewayd", "modelgate-manager"} {
		if env := otelEnv(deployment(t, objs, name)); len(env) != 0 {
			t.Errorf("%s has %v by default, want tracing off", name, env)
		}
	}
	if *gw.Spec.Replicas != 1 {
		t.Errorf("gatewayd replicas = %d, want 1", *gw.Spec.Replicas)
	}
	if gw.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("gatewayd strategy = %s, want Recreate: two pods must never open the embedded store at once", gw.Spec.Strategy.Type)
	}
	args := container(t, objs, "modelgate-gatewayd").Args
	for _, want := range []string{"--store=embedded", "--state-dir=/var/lib/modelgate"} {
		if !slices.Contains(args, want) {
			t.Errorf("gatewayd args %v lack %s", args, want)
		}
	}
	if v := volume(gw.Spec.Template.Spec, "state"); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "modelgate-gatewayd-state" {
		t.Errorf("gatewayd volume state = %+v, want PVC modelgate-gatewayd-state", v)
	}
	if helmtest.Find(objs, "PersistentVolumeClaim", "modelgate-gatewayd-state") == nil {
		t.Error("No PersistentVolumeClaim for the embedded store")
	}

	// Self-managed certificate: an empty Secret the manager fills, and the flags that tell it so.
	margs := container(t, objs, "modelgate-manager").Args
	for _, want := range []string{"--webhook-cert-mode=self-managed", "--webhook-secret-name=modelgate-webhook-server-cert",
		"--webhook-service-name=modelgate-webhook", "--webhook-configuration-name=modelgate-validating",
		"--mutating-webhook-configuration-name=modelgate-mutating"} {
		if !slices.Contains(margs, want) {
			t.Errorf("manager args %v lack %s", margs, want)
		}
	}
	sec := helmtest.Find(objs, "Secret", "modelgate-webhook-server-cert")
	if sec == nil {
		t.Fatal("No Secret for the self-managed webhook certificate")
	}
	if _, has := sec.Object["data"]; has {
		t.Error("The self-managed certificate Secret carries data; helm upgrade would overwrite what the manager wrote")
	}
	if helmtest.Find(objs, "ClusterRole", "modelgate-manager-webhook-cabundle") == nil {
		t.Error("No ClusterRole letting the self-managing manager write its CA into the webhook configuration")
	}
	if len(webhookConfiguration(t, objs).Annotations) != 0 || len(mutatingConfiguration(t, objs).Annotations) != 0 {
		t.Error("A webhook configuration carries annotations without cert-manager")
	}

	// Every namespace: ClusterRoles, and no Secret access for gatewayd until names are given.
	gwRole := clusterRole(t, objs, "modelgate-gatewayd")
	if rule := secretReadRule(gwRole.Rules); rule != nil {
		t.Errorf("gatewayd may read Secrets (%+v) although gatewayd.upstreamSecretNames is empty", rule)
	}
	if helmtest.Find(objs, "ClusterRoleBinding", "modelgate-manager") == nil || helmtest.Find(objs, "ClusterRoleBinding", "modelgate-gatewayd") == nil {
		t.Error("An all-namespaces install needs ClusterRoleBindings for the manager and gatewayd")
	}
	for _, kind := range []string{"ServiceMonitor", "NetworkPolicy", "Ingress", "HTTPRoute"} {
		if len(helmtest.OfKind(objs, kind)) != 0 {
			t.Errorf("Optional part %s renders by default", kind)
		}
	}
}

func checkRedisReplicated(t *testing.T, objs []*unstructured.Unstructured) {
	gw := deployment(t, objs, "modelgate-gatewayd")
	if *gw.Spec.Replicas != 3 {
		t.Errorf("gatewayd replicas = %d, want 3", *gw.Spec.Replicas)
	}
	if gw.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("gatewayd strategy = %s, want RollingUpdate with a shared store", gw.Spec.Strategy.Type)
	}
	c := container(t, objs, "modelgate-gatewayd")
	for _, want := range []string{"--store=redis", "--redis-url=$(MODELGATE_REDIS_URL)"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("gatewayd args %v lack %s", c.Args, want)
		}
	}
	if env := envVar(c, "MODELGATE_REDIS_URL"); env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
		env.ValueFrom.SecretKeyRef.Name != "modelgate-redis" || env.ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("MODELGATE_REDIS_URL = %+v, want it from Secret modelgate-redis key url", env)
	}
	if helmtest.Find(objs, "Secret", "modelgate-redis") == nil {
		t.Error("No Secret holding redis.url")
	}
	if helmtest.Find(objs, "PersistentVolumeClaim", "modelgate-gatewayd-state") != nil || volume(gw.Spec.Template.Spec, "state") != nil {
		t.Error("A Redis install renders the embedded store's volume")
	}
	// The password in the URL must stay in the Secret.
	if b, _ := helmtest.Find(objs, "Deployment", "modelgate-gatewayd").MarshalJSON(); strings.Contains(string(b), "s3cret") {
		t.Error("The Redis password leaks into the gatewayd Deployment")
	}
}

func checkRedisCluster(t *testing.T, objs []*unstructured.Unstructured) {
	c := container(t, objs, "modelgate-gatewayd")
	for _, want := range []string{"--store=redis", "--redis-mode=cluster", "--redis-addrs=redis-0.redis.svc:6379,redis-1.redis.svc:6379",
		"--redis-tls", "--redis-username=modelgate", "--redis-tls-ca-file=/etc/modelgate/redis-ca/ca.crt"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("gatewayd args %v lack %s", c.Args, want)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasPrefix(a, "--redis-url") || strings.HasPrefix(a, "--redis-master-name")
	}) {
		t.Errorf("gatewayd args %v name a URL or a master for a cluster", c.Args)
	}
	checkRedisSecretEnv(t, c, map[string]string{"MODELGATE_REDIS_PASSWORD": "modelgate-redis/password"})
	spec := deployment(t, objs, "modelgate-gatewayd").Spec.Template.Spec
	if v := volume(spec, "redis-ca"); v == nil || v.Secret == nil || v.Secret.SecretName != "redis-ca" ||
		len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.crt" || v.Secret.Items[0].Path != "ca.crt" {
		t.Errorf("volume redis-ca = %+v, want Secret redis-ca's ca.crt", v)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "redis-ca" && m.MountPath == "/etc/modelgate/redis-ca" && m.ReadOnly
	}) {
		t.Errorf("gatewayd mounts %+v, want redis-ca read-only at /etc/modelgate/redis-ca", c.VolumeMounts)
	}
	secret := helmtest.Find(objs, "Secret", "modelgate-redis")
	if pw, _, _ := unstructured.NestedString(secret.Object, "stringData", "password"); pw != "s3cret" {
		t.Errorf("Secret modelgate-redis holds password %q, want the one of the values", pw)
	}
	if b, _ := helmtest.Find(objs, "Deployment", "modelgate-gatewayd").MarshalJSON(); strings.Contains(string(b), "s3cret") {
		t.Error("The Redis password leaks into the gatewayd Deployment")
	}
}

func checkRedisSentinel(t *testing.T, objs []*unstructured.Unstructured) {
	c := container(t, objs, "modelgate-gatewayd")
	for _, want := range []string{"--redis-mode=sentinel", "--redis-master-name=mymaster",
		"--redis-addrs=sentinel-0.redis.svc:26379,sentinel-1.redis.svc:26379,sentinel-2.redis.svc:26379"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("gatewayd args %v lack %s", c.Args, want)
		}
	}
	checkRedisSecretEnv(t, c, map[string]string{"MODELGATE_REDIS_PASSWORD": "redis-auth/redis-password",
		"MODELGATE_REDIS_SENTINEL_PASSWORD": "redis-auth/sentinel-password"})
	if helmtest.Find(objs, "Secret", "modelgate-redis") != nil {
		t.Error("A Redis Secret renders although redis.existingSecret names one")
	}
}

// checkRedisSecretEnv checks that gatewayd reads each variable of want from its "secret/key", and no Redis URL.
func checkRedisSecretEnv(t *testing.T, c corev1.Container, want map[string]string) {
	t.Helper()
	if envVar(c, "MODELGATE_REDIS_URL") != nil {
		t.Error("gatewayd reads a Redis URL in sentinel or cluster mode")
	}
	for name, ref := range want {
		env := envVar(c, name)
		if env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
			env.ValueFrom.SecretKeyRef.Name+"/"+env.ValueFrom.SecretKeyRef.Key != ref {
			t.Errorf("%s = %+v, want it from Secret %s", name, env, ref)
		}
	}
}

func checkCertManager(t *testing.T, objs []*unstructured.Unstructured) {
	cert := helmtest.Find(objs, "Certificate", "modelgate-serving-cert")
	if cert == nil {
		t.Fatal("No cert-manager Certificate")
	}
	if helmtest.Find(objs, "Issuer", "modelgate-selfsigned") == nil {
		t.Error("No cert-manager Issuer")
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dns, "modelgate-webhook.modelgate-system.svc") {
		t.Errorf("Certificate dnsNames %v lack the webhook Service's name", dns)
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	mgr := deployment(t, objs, "modelgate-manager")
	if v := volume(mgr.Spec.Template.Spec, "webhook-cert"); v == nil || v.Secret == nil || v.Secret.SecretName != secretName {
		t.Errorf("manager mounts %+v, want the Certificate's Secret %s", v, secretName)
	}
	if got := webhookConfiguration(t, objs).Annotations["cert-manager.io/inject-ca-from"]; got != "modelgate-system/modelgate-serving-cert" {
		t.Errorf("cainjector annotation = %q, want modelgate-system/modelgate-serving-cert", got)
	}
	if got := mutatingConfiguration(t, objs).Annotations["cert-manager.io/inject-ca-from"]; got != "modelgate-system/modelgate-serving-cert" {
		t.Errorf("cainjector annotation of the mutating webhooks = %q, want modelgate-system/modelgate-serving-cert", got)
	}
	if !slices.Contains(container(t, objs, "modelgate-manager").Args, "--webhook-cert-mode=cert-manager") {
		t.Error("manager args lack --webhook-cert-mode=cert-manager")
	}
	if helmtest.Find(objs, "Secret", "modelgate-webhook-server-cert") != nil {
		t.Error("cert-manager owns the serving certificate Secret, but the chart renders it too")
	}
	if helmtest.Find(objs, "ClusterRole", "modelgate-manager-webhook-cabundle") != nil {
		t.Error("With cert-manager the manager needs no access to webhook configurations")
	}
}

func checkNamespaced(t *testing.T, objs []*unstructured.Unstructured) {
	// Nothing cluster-wide but the one webhook configuration the self-managing manager patches.
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		for _, o := range helmtest.OfKind(objs, kind) {
			if o.GetName() != "modelgate-manager-webhook-cabundle" {
				t.Errorf("A namespaced install renders %s %s", kind, o.GetName())
			}
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		for _, name := range []string{"modelgate-manager", "modelgate-gatewayd"} {
			if !hasNamespacedObject(objs, "Role", name, ns) || !hasNamespacedObject(objs, "RoleBinding", name, ns) {
				t.Errorf("No Role and RoleBinding %s in namespace %s", name, ns)
			}
		}
	}
	var role rbacv1.Role
	fromUnstructured(t, helmtest.Find(objs, "Role", "modelgate-gatewayd"), &role)
	rule := secretReadRule(role.Rules)
	if rule == nil || !slices.Equal(rule.ResourceNames, []string{"openai-upstream", "billing-webhook"}) || !slices.Equal(rule.Verbs, []string{"get"}) {
		t.Errorf("gatewayd Secret rule = %+v, want get on resourceNames [openai-upstream billing-webhook]", rule)
	}
	for _, w := range webhookConfiguration(t, objs).Webhooks {
		sel := w.NamespaceSelector
		if sel == nil || len(sel.MatchExpressions) != 1 || !slices.Equal(sel.MatchExpressions[0].Values, []string{"team-a", "team-b"}) {
			t.Errorf("Webhook %s namespaceSelector = %+v, want the served namespaces", w.Name, sel)
		}
	}
	for _, w := range mutatingConfiguration(t, objs).Webhooks {
		sel := w.NamespaceSelector
		if sel == nil || len(sel.MatchExpressions) != 1 || !slices.Equal(sel.MatchExpressions[0].Values, []string{"team-a", "team-b"}) {
			t.Errorf("Webhook %s namespaceSelector = %+v, want the served namespaces", w.Name, sel)
		}
	}
	for _, name := range []string{"modelgate-manager", "modelgate-gatewayd"} {
		if args := container(t, objs, name).Args; !slices.Contains(args, "--namespaces=team-a,team-b") {
			t.Errorf("%s args %v lack --namespaces=team-a,team-b", name, args)
		}
	}
}

func checkEverything(t *testing.T, objs []*unstructured.Unstructured) {
	for _, want := range []struct{ kind, name string }{
		{"ServiceMonitor", "modelgate-manager"}, {"ServiceMonitor", "modelgate-gatewayd"},
		{"NetworkPolicy", "modelgate-manager"}, {"NetworkPolicy", "modelgate-gatewayd"},
		{"Ingress", "modelgate-gatewayd"}, {"HTTPRoute", "modelgate-gatewayd"},
		{"PodDisruptionBudget", "modelgate-manager"}, {"Service", "modelgate-manager-metrics"},
		{"Secret", "modelgate-dashboard-session"}, {"PrometheusRule", "modelgate"}, {"ConfigMap", "modelgate-grafana-dashboard"},
	} {
		if helmtest.Find(objs, want.kind, want.name) == nil {
			t.Errorf("No %s %s", want.kind, want.name)
		}
	}
	if ring, _, _ := unstructured.NestedString(helmtest.Find(objs, "Secret", "modelgate-dashboard-session").Object, "stringData", "secrets"); !strings.HasPrefix(ring, "0123456789abcdef0123456789abcdef-chart-test-new\n") {
		t.Errorf("The dashboard session key ring = %q, want the values' secrets one a line, newest first", ring)
	}
	checkMonitoring(t, objs)
	for name, service := range map[string]string{"modelgate-gatewayd": "gatewayd", "modelgate-manager": "modelgate-manager"} {
		want := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": service,
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.05"}
		if got := otelEnv(deployment(t, objs, name)); !maps.Equal(got, want) {
			t.Errorf("%s's OTEL_* variables = %v, want %v", name, got, want)
		}
	}
	gw := deployment(t, objs, "modelgate-gatewayd").Spec.Template.Spec
	if !slices.Contains(gw.Containers[0].Args, "--dashboard-session-secrets-file=/etc/modelgate/dashboard/secrets") ||
		!slices.ContainsFunc(gw.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "modelgate-dashboard-session"
		}) {
		t.Errorf("gatewayd does not read the dashboard session key ring from its Secret: args %v", gw.Containers[0].Args)
	}
	if route := helmtest.Find(objs, "HTTPRoute", "modelgate-gatewayd"); route != nil {
		parents, _, _ := unstructured.NestedSlice(route.Object, "spec", "parentRefs")
		if len(parents) != 1 || parents[0].(map[string]any)["name"] != "shared-gateway" || parents[0].(map[string]any)["sectionName"] != "https" {
			t.Errorf("HTTPRoute parentRefs = %v, want the shared-gateway https listener from the values", parents)
		}
		hosts, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames")
		if !slices.Equal(hosts, []string{"gateway.example.com"}) {
			t.Errorf("HTTPRoute hostnames = %v, want [gateway.example.com]", hosts)
		}
		rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
		var backend map[string]any
		if len(rules) == 1 {
			if refs, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "backendRefs"); len(refs) == 1 {
				backend = refs[0].(map[string]any)
			}
		}
		if backend["name"] != "modelgate-gatewayd" || fmt.Sprint(backend["port"]) != "80" {
			t.Errorf("HTTPRoute backend = %v, want Service modelgate-gatewayd port 80", backend)
		}
	}
	if helmtest.Find(objs, "Issuer", "modelgate-selfsigned") != nil {
		t.Error("An Issuer renders although webhook.certManager.issuerRef names one")
	}
	if helmtest.Find(objs, "Secret", "modelgate-redis") != nil {
		t.Error("A Redis Secret renders although redis.existingSecret names one")
	}
	env := envVar(container(t, objs, "modelgate-gatewayd"), "MODELGATE_REDIS_URL")
	if env == nil || env.ValueFrom.SecretKeyRef.Name != "redis-credentials" || env.ValueFrom.SecretKeyRef.Key != "uri" {
		t.Errorf("MODELGATE_REDIS_URL = %+v, want Secret redis-credentials key uri", env)
	}
	var role rbacv1.Role
	fromUnstructured(t, helmtest.Find(objs, "Role", "modelgate-gatewayd"), &role)
	if rule := secretReadRule(role.Rules); rule == nil || len(rule.ResourceNames) != 0 || !slices.Contains(rule.Verbs, "watch") {
		t.Errorf("gatewayd Secret rule with secretAccess=namespace = %+v, want get/list/watch of every Secret", rule)
	}
}

// otelEnv is the OTEL_* variables of d's first container, by name.
func otelEnv(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			out[e.Name] = e.Value
		}
	}
	return out
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	fromUnstructured(t, helmtest.Find(objs, "Deployment", name), &d)
	return &d
}

func container(t *testing.T, objs []*unstructured.Unstructured, deploymentName string) corev1.Container {
	t.Helper()
	d := deployment(t, objs, deploymentName)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1", deploymentName, len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

func webhookConfiguration(t *testing.T, objs []*unstructured.Unstructured) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	fromUnstructured(t, helmtest.Find(objs, "ValidatingWebhookConfiguration", "modelgate-validating"), &v)
	return &v
}

func mutatingConfiguration(t *testing.T, objs []*unstructured.Unstructured) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	fromUnstructured(t, helmtest.Find(objs, "MutatingWebhookConfiguration", "modelgate-mutating"), &m)
	return &m
}

func clusterRole(t *testing.T, objs []*unstructured.Unstructured, name string) *rbacv1.ClusterRole {
	t.Helper()
	var r rbacv1.ClusterRole
	fromUnstructured(t, helmtest.Find(objs, "ClusterRole", name), &r)
	return &r
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if u == nil {
		t.Fatalf("The render lacks the %T the test looks for", into)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("Failed to convert %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func hasNamespacedObject(objs []*unstructured.Unstructured, kind, name, ns string) bool {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name && o.GetNamespace() == ns {
			return true
		}
	}
	return false
}

// secretReadRule is gatewayd's rule that reads Secrets, leaving out the create-only rule of sandbox pushes (a
// push's docker_config becomes a Secret; creating one reads nothing).
func secretReadRule(rules []rbacv1.PolicyRule) *rbacv1.PolicyRule {
	return ruleFor(slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Verbs, []string{"create"})
	}), "", "secrets")
}

func ruleFor(rules []rbacv1.PolicyRule, group, resource string) *rbacv1.PolicyRule {
	for i, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			return &rules[i]
		}
	}
	return nil
}

func volume(pod corev1.PodSpec, name string) *corev1.Volume {
	for i, v := range pod.Volumes {
		if v.Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i, e := range c.Env {
		if e.Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// lineDiff shows the changed region between the common leading and trailing lines, which is what a template
// change usually is, without a diff tool.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	pre := 0
	for pre < len(w) && pre < len(g) && w[pre] == g[pre] {
		pre++
	}
	suf := 0
	for suf < len(w)-pre && suf < len(g)-pre && w[len(w)-1-suf] == g[len(g)-1-suf] {
		suf++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@@ from line %d @@\n", pre+1)
	const most = 30
	for i, l := range w[pre : len(w)-suf] {
		if i == most {
			b.WriteString("- ...\n")
			break
		}
		b.WriteString("- " + l + "\n")
	}
	for i, l := range g[pre : len(g)-suf] {
		if i == most {
			b.WriteString("+ ...\n")
			break
		}
		b.WriteString("+ " + l + "\n")
	}
	return b.String()
}
