// Package rest is the /v1 management API that gatewayd serves: gateway groups, federated keys, endpoints, group
// usage, workspace API keys, teams, and models with their deployments and environments. It stores nothing itself. Every write becomes the same custom resource that
// `kubectl apply` would create, written through the Kubernetes API, so the admission webhooks stay the one place
// where cross-object rules are enforced; apiserver refusals are mapped onto the {error, error_code, detail}
// envelope. Callers authenticate with workspace API keys looked up in the snapshot gatewayd serves from (a
// Directory), and after a successful write a handler waits, within a bound, until that snapshot reflects the
// write, so the gatewayd that answered already enforces it. Management calls are rate limited per key and route.
//
// The plumbing every route shares is gatewayd/rest/kit; each resource is a package of its own with a Register
// function, and this package assembles them and serves the OpenAPI document.
package rest

import (
	_ "embed"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/apikeys"
	"github.com/modelgate/modelgate/gatewayd/rest/chains"
	"github.com/modelgate/modelgate/gatewayd/rest/endpoints"
	"github.com/modelgate/modelgate/gatewayd/rest/groups"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/gatewayd/rest/models"
	"github.com/modelgate/modelgate/gatewayd/rest/sandboxes"
	"github.com/modelgate/modelgate/gatewayd/rest/teams"
	"github.com/modelgate/modelgate/gatewayd/rest/workspacekeys"
)

// Options configures the API.
type Options = kit.Options

// Directory answers from the snapshot gatewayd has loaded.
type Directory = kit.Directory

// UsageReader reads the live daily usage counters.
type UsageReader = kit.UsageReader

// KeyUseReader reads workspace keys' last uses.
type KeyUseReader = kit.KeyUseReader

// Route is a /v1 route served from outside this package's resources (gatewayd's own parts: billing events, the
// metrics export), mounted behind the same wrapper as every management route (Mount).
type Route = kit.Route

// API serves the /v1 management routes.
type API struct {
	kit       *kit.Kit
	sandboxes sandboxes.Options
}

// SandboxOptions configures the sandbox image routes.
type SandboxOptions = sandboxes.Options

// WithSandboxes sets the sandbox image routes' options (upload signing key, base URL, image guard).
func (a *API) WithSandboxes(opts SandboxOptions) *API {
	a.sandboxes = opts
	return a
}

//go:embed openapi.json
var openAPISpec []byte

// New returns an API with defaults filled in.
func New(opts Options) *API { return &API{kit: kit.New(opts)} }

// Patterns are the patterns of the management routes Register and Mount added ("GET /v1/models").
func (a *API) Patterns() []string { return a.kit.Patterns() }

// Mount adds routes to mux behind the management wrapper: authentication, the management rate limit, the
// route's authz.Decide question, the body cap and panic recovery, as every resource's route. Mount needs only
// Options.Directory, Limits and Clock, so gatewayd mounts its own /v1 routes even with the resources off.
func (a *API) Mount(mux ingress.Mux, routes ...Route) {
	for _, rt := range routes {
		a.kit.Handle(mux, rt.Pattern, rt.Access, rt.Handler)
	}
}

// Register adds every route to mux, using Go 1.22 method patterns.
func (a *API) Register(mux ingress.Mux) {
	groups.Register(mux, a.kit)
	apikeys.Register(mux, a.kit)
	endpoints.Register(mux, a.kit)
	workspacekeys.Register(mux, a.kit)
	models.Register(mux, a.kit)
	teams.Register(mux, a.kit)
	sandboxes.Register(mux, a.kit, a.sandboxes)
	chains.Register(mux, a.kit)

	// The spec is public: it holds no workspace data, and clients need it before they have a key.
	mux.HandleFunc("GET /v1/spec", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPISpec)
	})
}
