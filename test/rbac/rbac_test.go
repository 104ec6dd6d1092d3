// Package rbac proves the chart's least-privilege RBAC on a real API server: it applies the ServiceAccounts,
// Roles and bindings that `helm template` renders, then acts as each component's ServiceAccount (impersonation)
// and checks that every call the component makes is allowed and that reads of other Secrets, other namespaces
// and other webhook configurations are refused. docs/rbac.md is the table these checks follow. The RBAC of the
// kustomize install (config/default) is checked the same way.
package rbac

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/wake"
	"github.com/modelgate/modelgate/test/chart/helmtest"
)

const (
	releaseNS      = helmtest.ReleaseNamespace
	served         = "team-a"
	other          = "team-b"
	upstreamSecret = "openai-upstream"
	otherSecret    = "other-secret"
	snapshotLabel  = "gateway.modelgate.io/snapshot"
)

// check is one API call made as a component, and whether RBAC must allow it.
type check struct {
	name    string
	allowed bool
	do      func(ctx context.Context, c client.WithWatch) error
}

func TestChartRBAC(t *testing.T) {
	cfg := helmtest.StartEnv(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gatewayv1.AddToScheme(scheme))
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	helmtest.CreateNamespaces(ctx, t, cfg, releaseNS, served, other)

	// Two releases side by side: "mg" serves team-a only (namespaced Roles), "mgall" serves every namespace.
	applyRBAC(ctx, t, cfg, "mg", "--set", "namespaces={"+served+"}", "--set", "gatewayd.upstreamSecretNames={"+upstreamSecret+"}")
	applyRBAC(ctx, t, cfg, "mgall", "--set", "gatewayd.upstreamSecretNames={"+upstreamSecret+"}")
	applyRBAC(ctx, t, cfg, "mgns", "--set", "namespaces={"+served+"}", "--set", "gatewayd.secretAccess=namespace")
	applyKustomizeRBAC(ctx, t, cfg)
	seed(ctx, t, admin)

	t.Run("gatewayd, namespaced", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "mg-modelgate-gatewayd")
		run(ctx, t, as, append(gatewaydChecks(served),
			check{"get an upstream Secret in another namespace", false, getSecret(other, upstreamSecret)},
			check{"list ConfigMaps in another namespace", false, list(&corev1.ConfigMapList{}, other)},
			check{"watch ConfigMaps in another namespace", false, watch(&corev1.ConfigMapList{}, other)},
			check{"list ConfigMaps in every namespace", false, list(&corev1.ConfigMapList{}, "")},
			check{"create a Group in another namespace", false, createDeleteGroup(other)},
			check{"request a wake in another namespace", false, patchWake(other)},
		))
	})

	t.Run("gatewayd, every namespace", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "mgall-modelgate-gatewayd")
		run(ctx, t, as, append(gatewaydChecks(other),
			check{"list ConfigMaps in every namespace", true, list(&corev1.ConfigMapList{}, "")},
			check{"list Secrets in every namespace", false, list(&corev1.SecretList{}, "")},
		))
	})

	// The documented alternative to Secrets by name: every Secret of the served namespaces, and no further.
	t.Run("gatewayd, secretAccess=namespace", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "mgns-modelgate-gatewayd")
		run(ctx, t, as, []check{
			{"get any Secret of a served namespace", true, getSecret(served, otherSecret)},
			{"list and watch Secrets of a served namespace", true, func(ctx context.Context, c client.WithWatch) error {
				if err := list(&corev1.SecretList{}, served)(ctx, c); err != nil {
					return err
				}
				return watch(&corev1.SecretList{}, served)(ctx, c)
			}},
			{"get a Secret in another namespace", false, getSecret(other, upstreamSecret)},
			{"create a Secret in another namespace", false, func(ctx context.Context, c client.WithWatch) error {
				return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, GenerateName: "x-"}})
			}},
		})
	})

	t.Run("manager, namespaced", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "mg-modelgate-manager")
		run(ctx, t, as, append(managerChecks(served, "mg-modelgate"),
			check{"list ConfigMaps in another namespace", false, list(&corev1.ConfigMapList{}, other)},
			check{"create a ConfigMap in another namespace", false, createDeleteConfigMap(other, false)},
			check{"list Secrets in another namespace", false, list(&corev1.SecretList{}, other)},
			check{"list Groups in another namespace", false, list(&gatewayv1.GroupList{}, other)},
			// Only the namespaced install can keep the manager out of the release namespace's other Secrets: an
			// every-namespace install reads Secrets everywhere (docs/rbac.md).
			check{"get another Secret of the release namespace", false, getSecret(releaseNS, otherSecret)},
		))
	})

	t.Run("manager, every namespace", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "mgall-modelgate-manager")
		run(ctx, t, as, append(managerChecks(other, "mgall-modelgate"),
			check{"list Groups in every namespace", true, list(&gatewayv1.GroupList{}, "")},
		))
	})

	// config/default equals the chart's every-namespace defaults with cert-manager certificates (test/chart
	// checks that): no Secret names granted to gatewayd, and no certificate or webhook configuration writes for
	// the manager, since cert-manager issues and injects.
	t.Run("gatewayd, config/default", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "modelgate-gatewayd")
		run(ctx, t, as, append(overrideChecks(t, gatewaydChecks(other), map[string]bool{"get an allowed upstream Secret": false}),
			check{"list ConfigMaps in every namespace", true, list(&corev1.ConfigMapList{}, "")},
			check{"list Secrets in every namespace", false, list(&corev1.SecretList{}, "")},
		))
	})

	t.Run("manager, config/default", func(t *testing.T) {
		as := impersonate(t, cfg, scheme, "modelgate-manager")
		run(ctx, t, as, append(overrideChecks(t, managerChecks(other, "modelgate"), map[string]bool{
			"rotate its webhook certificate Secret":                 false,
			"inject its CA into its webhook configuration":          false,
			"inject its CA into its mutating webhook configuration": false,
		}),
			check{"list Groups in every namespace", true, list(&gatewayv1.GroupList{}, "")},
			check{"list webhook configurations", false, list(&admissionregistrationv1.ValidatingWebhookConfigurationList{}, "")},
		))
	})
}

// overrideChecks returns checks with the verdicts of the named ones replaced; a name that matches no check
// fails the test, so that renaming a check cannot silently drop an override.
func overrideChecks(t *testing.T, checks []check, verdicts map[string]bool) []check {
	t.Helper()
	found := 0
	for i, c := range checks {
		if v, ok := verdicts[c.name]; ok {
			checks[i].allowed = v
			found++
		}
	}
	if found != len(verdicts) {
		t.Fatalf("Overrides %v name checks that do not exist", verdicts)
	}
	return checks
}

// gatewaydChecks are what gatewayd does in a namespace it serves, and what it must not do there.
func gatewaydChecks(ns string) []check {
	return []check{
		{"list snapshot ConfigMaps", true, list(&corev1.ConfigMapList{}, ns, client.HasLabels{snapshotLabel})},
		{"watch snapshot ConfigMaps", true, watch(&corev1.ConfigMapList{}, ns, client.HasLabels{snapshotLabel})},
		{"get the snapshot ConfigMap", true, get(&corev1.ConfigMap{}, ns, "modelgate-snapshot")},
		{"create, update and delete a Group (REST API)", true, createDeleteGroup(ns)},
		{"list APIKeys, Endpoints and WorkspaceAPIKeys", true, func(ctx context.Context, c client.WithWatch) error {
			for _, l := range []client.ObjectList{&gatewayv1.APIKeyList{}, &gatewayv1.EndpointList{}, &gatewayv1.WorkspaceAPIKeyList{}} {
				if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"read the Workspace", true, get(&gatewayv1.Workspace{}, ns, "default")},
		{"get an allowed upstream Secret", true, getSecret(ns, upstreamSecret)},
		{"list pods (logs route)", true, list(&corev1.PodList{}, ns)},
		{"get a Deployment (logs route: the selector of md-<name>)", true, may(ns, "get", "apps", "deployments", "")},
		{"get pods/log (logs route)", true, may(ns, "get", "", "pods", "log")},
		{"list gatewayd's EndpointSlices in the release namespace (logs route: every replica)", true, list(&discoveryv1.EndpointSliceList{}, releaseNS)},
		{"update a Deployment", false, may(ns, "update", "apps", "deployments", "")},
		{"delete a pod", false, may(ns, "delete", "", "pods", "")},
		{"exec into a pod", false, may(ns, "create", "", "pods", "exec")},
		{"get another Secret", false, getSecret(ns, otherSecret)},
		{"list Secrets", false, list(&corev1.SecretList{}, ns)},
		{"update the Workspace", false, func(ctx context.Context, c client.WithWatch) error {
			var ws gatewayv1.Workspace
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &ws); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			ws.Labels = map[string]string{"touched": "true"}
			return c.Update(ctx, &ws)
		}},
		{"push a sandbox image: create its record and build, record the upload, delete the record", true, sandboxPush(ns)},
		{"create a Secret (a push's docker_config, owned by its build)", true, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "sib-docker-config-"}})
		}},
		{"write a SandboxImage's tags (the manager's)", false, func(ctx context.Context, c client.WithWatch) error {
			img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "img-"},
				Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "tags"}}
			if err := c.Create(ctx, img); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			img.Status.LastVersion = 1
			return c.Status().Update(ctx, img)
		}},
		{"write a snapshot ConfigMap", false, createDeleteConfigMap(ns, false)},
		{"delete the snapshot ConfigMap", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "modelgate-snapshot"}})
		}},
		{"create, update and delete a Model (REST API)", true, func(ctx context.Context, c client.WithWatch) error {
			m := &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rest-created"},
				Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: gatewayv1.EnvironmentProduction}}}}
			if err := c.Create(ctx, m); err != nil {
				return err
			}
			m.Spec.DisplayName = "Updated through the REST API"
			if err := c.Update(ctx, m); err != nil {
				return err
			}
			return c.Delete(ctx, m)
		}},
		{"create a ModelDeployment (users and the manager's chains create them)", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "md-"},
				Spec: gatewayv1.ModelDeploymentSpec{ModelID: "m", Source: gatewayv1.DeploymentSource{URL: "http://model.example"}}})
		}},
		{"request a wake (the wake annotation of a ModelDeployment)", true, patchWake(ns)},
		{"write ModelDeployment status", false, func(ctx context.Context, c client.WithWatch) error {
			md := &gatewayv1.ModelDeployment{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "seeded"}, md); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			md.Status.ObservedGeneration = md.Generation
			return c.Status().Update(ctx, md)
		}},
		{"scale a Deployment (the manager's half of a wake)", false, func(ctx context.Context, c client.WithWatch) error {
			return c.SubResource("scale").Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seeded"}},
				client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`)))
		}},
		{"write Group status", false, func(ctx context.Context, c client.WithWatch) error {
			g := &gatewayv1.Group{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "seeded"}, g); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			g.Status.ObservedGeneration = g.Generation
			return c.Status().Update(ctx, g)
		}},
	}
}

// sandboxPush is what gatewayd's sandbox routes write: the SandboxImage, a SandboxImageBuild, the build's status
// (the upload's context digest), and the SandboxImage's deletion.
func sandboxPush(ns string) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "img-"},
			Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "agent"}}
		if err := c.Create(ctx, img); err != nil {
			return err
		}
		b := &gatewayv1.SandboxImageBuild{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "sib-"},
			Spec: gatewayv1.SandboxImageBuildSpec{ImageRef: img.Name, TeamID: "red", Source: gatewayv1.SandboxSource{Upload: &gatewayv1.SandboxUpload{}}}}
		if err := c.Create(ctx, b); err != nil {
			return err
		}
		b.Status.ContextDigest, b.Status.Status = "sha256:0", gatewayv1.SandboxBuilding
		if err := c.Status().Update(ctx, b); err != nil {
			return err
		}
		return c.Delete(ctx, img)
	}
}

// managerChecks are what the reconcilers, the admission webhooks, leader election and the self-managed
// webhook certificate need, and the nearest things they must not get.
func managerChecks(ns, fullname string) []check {
	return []check{
		{"create and delete a BuildKit Job (the sandbox build backend)", true, func(ctx context.Context, c client.WithWatch) error {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "sib-"},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "buildkit", Image: "moby/buildkit:rootless"}}}}}}
			if err := c.Create(ctx, job); err != nil {
				return err
			}
			return c.Delete(ctx, job)
		}},
		{"create a SandboxImageBuild (only gatewayd and users push)", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &gatewayv1.SandboxImageBuild{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "sib-"},
				Spec: gatewayv1.SandboxImageBuildSpec{ImageRef: "img-x", TeamID: "red", Source: gatewayv1.SandboxSource{Upload: &gatewayv1.SandboxUpload{}}}})
		}},
		{"list and watch every kind", true, func(ctx context.Context, c client.WithWatch) error {
			for _, l := range []client.ObjectList{&gatewayv1.GroupList{}, &gatewayv1.APIKeyList{}, &gatewayv1.EndpointList{},
				&gatewayv1.WorkspaceList{}, &gatewayv1.WorkspaceAPIKeyList{}} {
				if err := list(l, ns)(ctx, c); err != nil {
					return err
				}
				if err := watch(l, ns)(ctx, c); err != nil {
					return err
				}
			}
			return nil
		}},
		{"add a finalizer and write status on a Group", true, func(ctx context.Context, c client.WithWatch) error {
			g := &gatewayv1.Group{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "seeded"}, g); err != nil {
				return err
			}
			g.Finalizers = []string{"gateway.modelgate.io/test"}
			if err := c.Update(ctx, g); err != nil {
				return err
			}
			g.Status.ObservedGeneration = g.Generation
			if err := c.Status().Update(ctx, g); err != nil {
				return err
			}
			g.Finalizers = nil
			return c.Update(ctx, g)
		}},
		{"write Workspace status", true, func(ctx context.Context, c client.WithWatch) error {
			ws := &gatewayv1.Workspace{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, ws); err != nil {
				return err
			}
			ws.Status.SnapshotVersion++
			return c.Status().Update(ctx, ws)
		}},
		{"publish, update and delete a snapshot ConfigMap", true, createDeleteConfigMap(ns, true)},
		{"read and create key Secrets", true, func(ctx context.Context, c client.WithWatch) error {
			if err := list(&corev1.SecretList{}, ns)(ctx, c); err != nil {
				return err
			}
			if err := getSecret(ns, otherSecret)(ctx, c); err != nil {
				return err
			}
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "minted-"},
				StringData: map[string]string{"api_key": "not-a-real-key"}})
		}},
		{"record an Event", true, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Namespace: ns, GenerateName: "seeded."},
				InvolvedObject: corev1.ObjectReference{Kind: "Group", Namespace: ns, Name: "seeded", APIVersion: gatewayv1.GroupVersion.String()},
				Reason:         "Test", Message: "RBAC test event.", Type: corev1.EventTypeNormal,
			})
		}},
		{"delete a Secret", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: otherSecret}})
		}},
		{"create a Group", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, group(ns, "by-manager"))
		}},
		{"take the leader-election Lease", true, func(ctx context.Context, c client.WithWatch) error {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: fullname + "-lease"}}
			if err := c.Create(ctx, lease); err != nil {
				return err
			}
			lease.Spec.HolderIdentity = ptr.To("manager-0")
			if err := c.Update(ctx, lease); err != nil {
				return err
			}
			return c.Delete(ctx, lease)
		}},
		{"list gatewayd's EndpointSlices in the release namespace (the autoscaler)", true, list(&discoveryv1.EndpointSliceList{}, releaseNS)},
		{"create a Lease in a served namespace", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "lease-"}})
		}},
		{"rotate its webhook certificate Secret", true, func(ctx context.Context, c client.WithWatch) error {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: fullname + "-webhook-server-cert"}, s); err != nil {
				return err
			}
			s.Data = map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y"), "ca.crt": []byte("z")}
			return c.Update(ctx, s)
		}},
		{"inject its CA into its webhook configuration", true, func(ctx context.Context, c client.WithWatch) error {
			return patchWebhookConfiguration(ctx, c, &admissionregistrationv1.ValidatingWebhookConfiguration{}, fullname+"-validating")
		}},
		{"inject its CA into its mutating webhook configuration", true, func(ctx context.Context, c client.WithWatch) error {
			return patchWebhookConfiguration(ctx, c, &admissionregistrationv1.MutatingWebhookConfiguration{}, fullname+"-mutating")
		}},
		{"patch another webhook configuration", false, func(ctx context.Context, c client.WithWatch) error {
			return patchWebhookConfiguration(ctx, c, &admissionregistrationv1.ValidatingWebhookConfiguration{}, "someone-elses-webhooks")
		}},
		{"patch another mutating webhook configuration", false, func(ctx context.Context, c client.WithWatch) error {
			return patchWebhookConfiguration(ctx, c, &admissionregistrationv1.MutatingWebhookConfiguration{}, "someone-elses-webhooks")
		}},
		{"create a ClusterRole", false, func(ctx context.Context, c client.WithWatch) error {
			return c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "escalate-"}})
		}},
	}
}

// applyRBAC renders a release and creates its ServiceAccounts, Roles and bindings for real.
func applyRBAC(ctx context.Context, t *testing.T, cfg *rest.Config, release string, args ...string) {
	t.Helper()
	applier, err := helmtest.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]int{}
	for _, obj := range helmtest.Documents(t, helmtest.MustTemplate(t, release, releaseNS, args...)) {
		if !helmtest.IsRBAC(obj) {
			continue
		}
		if err := applier.Apply(ctx, obj, false); err != nil {
			t.Fatal(err)
		}
		applied[obj.GetKind()]++
	}
	if applied["ServiceAccount"] != 2 || applied["RoleBinding"]+applied["ClusterRoleBinding"] < 3 {
		t.Fatalf("Release %s rendered too little RBAC to test: %v", release, applied)
	}
	t.Logf("Applied RBAC of release %s: %v", release, applied)
}

// applyKustomizeRBAC creates the ServiceAccounts, Roles and bindings of config/default for real.
func applyKustomizeRBAC(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	applier, err := helmtest.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]int{}
	for _, obj := range helmtest.Documents(t, helmtest.Kustomize(t, "config/default")) {
		if !helmtest.IsRBAC(obj) {
			continue
		}
		if obj.GetNamespace() != "" && obj.GetNamespace() != releaseNS {
			t.Fatalf("config/default puts %s %s in namespace %s, want %s", obj.GetKind(), obj.GetName(), obj.GetNamespace(), releaseNS)
		}
		if err := applier.Apply(ctx, obj, false); err != nil {
			t.Fatal(err)
		}
		applied[obj.GetKind()]++
	}
	if applied["ServiceAccount"] != 2 || applied["RoleBinding"]+applied["ClusterRoleBinding"] < 3 {
		t.Fatalf("config/default rendered too little RBAC to test: %v", applied)
	}
	t.Logf("Applied RBAC of config/default: %v", applied)
}

// seed creates, as the admin, the objects the checks read: Secrets, snapshot ConfigMaps, a Workspace and a
// Group in both namespaces, the releases' webhook certificate Secrets and webhook configurations.
func seed(ctx context.Context, t *testing.T, admin client.Client) {
	t.Helper()
	must := func(obj client.Object) {
		t.Helper()
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatalf("Failed to seed %T %s: %v", obj, obj.GetName(), err)
		}
	}
	for _, ns := range []string{served, other} {
		for _, name := range []string{upstreamSecret, otherSecret} {
			must(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"api_key": "sk-test"}})
		}
		must(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "modelgate-snapshot", Labels: map[string]string{snapshotLabel: "index"}}})
		must(&gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})
		must(group(ns, "seeded"))
		must(&gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seeded"},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "m", Source: gatewayv1.DeploymentSource{URL: "http://model.example"}}})
	}
	must(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: otherSecret}})
	for _, fullname := range []string{"mg-modelgate", "mgall-modelgate", "mgns-modelgate", "modelgate"} {
		// The chart renders this Secret empty; the manager fills it.
		must(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: fullname + "-webhook-server-cert"}})
		// Without webhooks, so that nothing calls a webhook server that this test does not run.
		must(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: fullname + "-validating"}})
		must(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: fullname + "-mutating"}})
	}
	must(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-webhooks"}})
	must(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-webhooks"}})
}

// impersonate returns a client that acts as a ServiceAccount of the release namespace, with the groups the
// API server gives every ServiceAccount.
func impersonate(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, sa string) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(helmtest.Impersonate(cfg, releaseNS, sa), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run makes each call and checks RBAC's verdict: allowed calls succeed, refused ones fail with Forbidden, and
// nothing fails for another reason (which would make a refusal prove nothing).
func run(ctx context.Context, t *testing.T, c client.WithWatch, checks []check) {
	t.Helper()
	for _, ch := range checks {
		err := ch.do(ctx, c)
		switch {
		case ch.allowed && err != nil:
			t.Errorf("%s: want allowed, got %v", ch.name, err)
		case !ch.allowed && err == nil:
			t.Errorf("%s: want Forbidden, but it was allowed", ch.name)
		case !ch.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: want Forbidden, got %v", ch.name, err)
		}
	}
}

func group(ns, name string) *gatewayv1.Group {
	return &gatewayv1.Group{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.GroupSpec{
			ExternalEntityID: "ext-" + name,
			Models:           []gatewayv1.ModelConfig{{Slug: "demo/echo"}},
		},
	}
}

func list(l client.ObjectList, ns string, opts ...client.ListOption) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		return c.List(ctx, l, append(opts, client.InNamespace(ns))...)
	}
}

func watch(l client.ObjectList, ns string, opts ...client.ListOption) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		w, err := c.Watch(ctx, l, append(opts, client.InNamespace(ns))...)
		if err != nil {
			return err
		}
		w.Stop()
		return nil
	}
}

func get(obj client.Object, ns, name string) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	}
}

// may asks the API server's authorizer, as the impersonated component (SelfSubjectAccessReview), whether it may
// do verb on the resource in ns, for calls this test cannot make without a kubelet (pods/log) or without objects
// it would have to seed; a refusal comes back as Forbidden, like a refused call.
func may(ns, verb, group, resource, subresource string) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: subresource}}}
		if err := c.Create(ctx, r); err != nil {
			return err
		}
		if !r.Status.Allowed {
			return apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, subresource, errors.New(r.Status.Reason))
		}
		return nil
	}
}

func getSecret(ns, name string) func(context.Context, client.WithWatch) error {
	return get(&corev1.Secret{}, ns, name)
}

func createDeleteGroup(ns string) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		g := group(ns, "rest-created")
		if err := c.Create(ctx, g); err != nil {
			return err
		}
		g.Spec.DisplayName = "Updated through the REST API"
		if err := c.Update(ctx, g); err != nil {
			return err
		}
		return c.Delete(ctx, g)
	}
}

func createDeleteConfigMap(ns string, update bool) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "modelgate-snapshot-1",
			Labels: map[string]string{snapshotLabel: "chunk"}}}
		if err := c.Create(ctx, cm); err != nil {
			return err
		}
		if update {
			cm.BinaryData = map[string][]byte{"data": []byte("gzip")}
			if err := c.Update(ctx, cm); err != nil {
				return err
			}
		}
		return c.Delete(ctx, cm)
	}
}

// patchWake is gatewayd's wake request (gatewayd/wake.Patch): a merge patch of the wake annotation of a
// ModelDeployment, and nothing else.
func patchWake(ns string) func(context.Context, client.WithWatch) error {
	return func(ctx context.Context, c client.WithWatch) error {
		return wake.Patch(ctx, c, ns, "seeded", time.Now())
	}
}

// patchWebhookConfiguration patches the webhook configuration of obj's kind named name, as the CA rotator does.
func patchWebhookConfiguration(ctx context.Context, c client.WithWatch, obj client.Object, name string) error {
	obj.SetName(name)
	patch := []byte(`{"metadata":{"annotations":{"modelgate.io/ca-rotated":"now"}}}`)
	return c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch))
}
