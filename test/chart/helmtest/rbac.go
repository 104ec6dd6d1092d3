package helmtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// ReleaseNamespace is the namespace RenderRBAC installs into, where the ServiceAccounts live.
const ReleaseNamespace = "modelgate-system"

// IsRBAC reports whether obj is a ServiceAccount, a Role, a ClusterRole or a binding: an install's permissions.
func IsRBAC(obj *unstructured.Unstructured) bool {
	switch obj.GetKind() {
	case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		return true
	}
	return false
}

// RBAC is the permissions of one rendered install: its ServiceAccounts, Roles, ClusterRoles and bindings, ready to
// be applied to any API server.
type RBAC struct {
	// Objects are the rendered documents, in the order helm renders them.
	Objects []*unstructured.Unstructured
}

// RenderRBAC renders the chart as the release "modelgate" of ReleaseNamespace with args (--set ...) and keeps its
// permissions. Without namespaces in args the served-namespace rules are one ClusterRole per component, so they
// hold in every namespace a test creates.
func RenderRBAC(t testing.TB, args ...string) RBAC {
	t.Helper()
	var out RBAC
	for _, obj := range Documents(t, MustTemplate(t, "modelgate", ReleaseNamespace, args...)) {
		if IsRBAC(obj) {
			out.Objects = append(out.Objects, obj)
		}
	}
	return out
}

// ServiceAccount names the rendered ServiceAccount of component ("gatewayd", "manager").
func (r RBAC) ServiceAccount(component string) (string, error) {
	for _, obj := range r.Objects {
		if obj.GetKind() == "ServiceAccount" && obj.GetLabels()["app.kubernetes.io/component"] == component {
			return obj.GetName(), nil
		}
	}
	return "", fmt.Errorf("the chart rendered no ServiceAccount of component %s", component)
}

// Apply creates the release namespace and applies every object for real to the API server behind cfg.
func (r RBAC) Apply(ctx context.Context, cfg *rest.Config) error {
	if err := createNamespace(ctx, cfg, ReleaseNamespace); err != nil {
		return err
	}
	applier, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	for _, obj := range r.Objects {
		if err := applier.Apply(ctx, obj, false); err != nil {
			return err
		}
	}
	return nil
}

// As applies the permissions (Apply) and returns cfg acting as component's ServiceAccount: a client built on it
// holds exactly what the chart grants that component, so a call it makes that the chart does not allow is
// refused by the API server with Forbidden, as on a real install.
func (r RBAC) As(ctx context.Context, cfg *rest.Config, component string) (*rest.Config, error) {
	sa, err := r.ServiceAccount(component)
	if err != nil {
		return nil, err
	}
	if err := r.Apply(ctx, cfg); err != nil {
		return nil, fmt.Errorf("failed to apply the chart's RBAC: %w", err)
	}
	return Impersonate(cfg, ReleaseNamespace, sa), nil
}

// Impersonate returns a copy of cfg that acts as ServiceAccount sa of namespace ns, with the groups the API
// server gives every ServiceAccount.
func Impersonate(cfg *rest.Config, ns, sa string) *rest.Config {
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return as
}

// Once is a component's client configuration made once per test binary, for suites whose API server starts
// lazily: the chart rendered with Args, its RBAC applied to that API server, and its admin configuration acting as
// Component's ServiceAccount (RBAC.As).
type Once struct {
	// Component is the ServiceAccount's component: "gatewayd" or "manager".
	Component string
	// Args are helm's (--set ...), for example the upstream Secrets gatewayd may read by name.
	Args []string

	once sync.Once
	cfg  *rest.Config
	err  error
}

// Config returns the configuration, made by the first call from admin, the API server's admin configuration.
func (o *Once) Config(t testing.TB, admin *rest.Config) *rest.Config {
	t.Helper()
	o.once.Do(func() {
		// Left in place when the render fails the test that made the first call.
		o.err = errors.New("the chart's RBAC was not rendered")
		o.cfg, o.err = RenderRBAC(t, o.Args...).As(context.Background(), admin, o.Component)
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.cfg
}
