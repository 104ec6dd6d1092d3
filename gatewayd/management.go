package gatewayd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/reload"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/events"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/gatewayd/rest/throttles"
	"github.com/modelgate/modelgate/gatewayd/rest/usage"
)

// mountV1 serves the /v1 routes a workspace key calls, every one behind the management wrapper (authenticate,
// the management rate limit, the route's authz question, the body cap, panic recovery): the management API's
// resources, unless DisableManagementAPI, and always the routes gatewayd serves from its own parts (v1Routes).
func (g *Gateway) mountV1() error {
	opts := rest.Options{
		Directory:             directory{g.loader, g.heldKeys},
		KeyUse:                g.keyUse,
		Usage:                 usageReader{g.opts.Store},
		Limits:                g.opts.ManagementLimits,
		Clock:                 g.opts.Clock.Now,
		ReadYourWritesTimeout: g.opts.ReadYourWritesTimeout,
		RequestLogs:           g.requestLogs,
		PodLogs:               g.pods,
	}
	if !g.opts.DisableManagementAPI {
		var err error
		if opts.Client, err = g.managementClients(); err != nil {
			return err
		}
		opts.Lister = g.lists
	}
	api := rest.New(opts).WithSandboxes(g.opts.Sandboxes)
	if !g.opts.DisableManagementAPI {
		api.Register(federatedModels{Mux: g.mux, list: g.inference.ModelList})
	}
	api.Mount(g.mux, g.v1Routes()...)
	g.managementRoutes = api.Patterns()
	return nil
}

// federatedModels is the mux the management API registers on: its GET /v1/models answers a federated key
// with the OpenAI list of the slugs the key may call (inference.Handler.ModelList) and any other caller with the
// model platform's list, as before (docs/rest-api.md "Models list").
type federatedModels struct {
	ingress.Mux
	list func(http.ResponseWriter, *http.Request) bool
}

func (m federatedModels) Handle(pattern string, h http.Handler) {
	if pattern == "GET /v1/models" {
		platform := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !m.list(w, r) {
				platform.ServeHTTP(w, r)
			}
		})
	}
	m.Mux.Handle(pattern, h)
}

func (m federatedModels) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// ManagementRoutes are the patterns of the routes served behind the management wrapper, in order of registration.
func (g *Gateway) ManagementRoutes() []string { return slices.Clone(g.managementRoutes) }

// v1Routes are the /v1 routes gatewayd serves from its own parts (the metrics registry, the billing store and its
// rollups, the cooldown state of Endpoint targets) rather than from the management API's resources; mountV1 puts
// them behind the same wrapper. A new route of this kind is one more entry here (and in rest/openapi.json, which
// TestEveryV1RouteIsWrapped checks).
func (g *Gateway) v1Routes() []rest.Route {
	routes := []rest.Route{
		{Pattern: "GET /v1/metrics", Access: kit.AccessMetrics, Handler: g.workspaceMetrics},
		{Pattern: "GET /v1/gateway/endpoints/{endpoint_id}/targets", Access: kit.AccessGateway, Handler: inNamespace(g.targets.Handler)},
	}
	if b := g.opts.Billing; b != nil {
		routes = append(routes,
			rest.Route{Pattern: "GET /v1/gateway/events", Access: kit.AccessGateway, Handler: inNamespace(events.Handler(b))},
			rest.Route{Pattern: "GET /v1/gateway/throttles", Access: kit.AccessGateway, Handler: inNamespace(throttles.Handler(b, g.opts.Clock.Now))},
			rest.Route{Pattern: "GET /v1/gateway/usage", Access: kit.AccessGateway, Handler: inNamespace(usage.Handler(b, g.loader.View, g.opts.Clock.Now))},
		)
	}
	return routes
}

// inNamespace serves h, which answers for one workspace, with the namespace of the caller the wrapper admitted.
func inNamespace(h func(w http.ResponseWriter, r *http.Request, ns string)) kit.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c auth.Caller) { h(w, r, c.Namespace) }
}

// managementClients builds what the management API's resources read and write through. They write the custom
// resources through the API server directly, so the admission webhooks judge every write, and read single objects
// the same way, so a read right after a write sees it. The namespace-wide lists of the list routes come from an
// informer cache of the served namespaces (g.lists, started by Serve), so paging through a large workspace costs
// the API server nothing.
func (g *Gateway) managementClients() (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("failed to build the management API scheme: %w", err)
	}
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("failed to build the management API scheme: %w", err)
	}
	c, err := client.New(g.opts.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to build the management API client: %w", err)
	}
	opts := cache.Options{Scheme: scheme}
	if len(g.opts.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range g.opts.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if g.lists, err = cache.New(g.opts.RESTConfig, opts); err != nil {
		return nil, fmt.Errorf("failed to build the management API's list cache: %w", err)
	}
	// The same field the CRD declares selectable, so a list reads alike from the cache and the API server.
	if err := g.lists.IndexField(context.Background(), &gatewayv1.ModelDeployment{}, gatewayv1.FieldDeploymentModel,
		func(o client.Object) []string { return []string{o.(*gatewayv1.ModelDeployment).Spec.ModelID} }); err != nil {
		return nil, fmt.Errorf("failed to index the management API's list cache: %w", err)
	}
	if err := g.lists.IndexField(context.Background(), &gatewayv1.ChainDeployment{}, gatewayv1.FieldChainDeploymentChain,
		func(o client.Object) []string { return []string{o.(*gatewayv1.ChainDeployment).Spec.ChainID} }); err != nil {
		return nil, fmt.Errorf("failed to index the management API's list cache: %w", err)
	}
	return c, nil
}

// directory answers the management API from the loaded snapshots.
type directory struct {
	loader *reload.Loader
	keys   auth.Lookup
}

// WorkspaceKey authenticates a workspace key against the view in force, recording its use.
func (d directory) WorkspaceKey(apiKey string) (auth.Caller, bool) { return d.keys(apiKey) }

// HasAPIKey reports whether the view in force serves the federated key of prefix in namespace.
func (d directory) HasAPIKey(namespace, prefix string) bool {
	return d.loader.View().HasKey(namespace, prefix)
}

// WaitFor blocks until the loaded snapshot of namespace satisfies pred. It takes the change signal before
// reading the view, so a swap between the read and the wait is never missed.
func (d directory) WaitFor(ctx context.Context, namespace string, pred func(*snapshot.Snapshot) bool) error {
	for {
		changed := d.loader.Changed()
		if ns := d.loader.View().Namespace(namespace); ns != nil && ns.Snapshot != nil && pred(ns.Snapshot) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// usageReader reads the usage limits' counters (DAY and MONTH) from the limit store.
type usageReader struct{ store limits.Store }

func (u usageReader) Usage(ctx context.Context, namespace, groupID, slug, limitType, unit string, now time.Time) (int64, error) {
	t, err := limits.ParseType(limitType)
	if err != nil {
		return 0, err
	}
	un, err := limits.ParseUnit(unit)
	if err != nil {
		return 0, err
	}
	return u.store.Count(ctx, limits.BucketKey{Namespace: namespace, Group: groupID, Slug: slug, Type: t, Unit: un}, now)
}

// hostname names this replica in the request log: the pod's name in a cluster.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "gatewayd"
	}
	return h
}
