// Package rest is the /v1 management API that gatewayd serves: gateway groups, federated keys, endpoints, group
// usage and workspace API keys. It stores nothing itself. Every write becomes the same custom resource that
// `kubectl apply` would create, written through the Kubernetes API, so the admission webhooks stay the one place
// where cross-object rules are enforced; apiserver refusals are mapped onto the {error, error_code, detail}
// envelope. Callers authenticate with workspace API keys looked up in the snapshot gatewayd serves from (a
// Directory), and after a successful write a handler waits, within a bound, until that snapshot reflects the
// write, so the gatewayd that answered already enforces it. Management calls are rate limited per key and route.
package rest

import (
	"context"
	_ "embed"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
)

// Directory answers from the snapshot gatewayd has loaded.
type Directory interface {
	// WorkspaceKey authenticates a workspace API key (full plaintext; constant-time hash compare inside).
	WorkspaceKey(apiKey string) (namespace string, key snapshot.WorkspaceAPIKey, ok bool)
	// WaitFor blocks until the snapshot loaded for namespace satisfies pred, or ctx ends.
	WaitFor(ctx context.Context, namespace string, pred func(*snapshot.Snapshot) bool) error
}

// UsageReader reads the live daily usage counters.
type UsageReader interface {
	// DailyUsage is the current DAY-window count of the bucket (namespace, group, slug, type) charged to that group.
	DailyUsage(ctx context.Context, namespace, groupID, slug, limitType string, now time.Time) (int64, error)
}

// Options configures the API.
type Options struct {
	// Client reads and writes the custom resources. It should read from the API server directly (not through
	// an informer cache), so that a read right after a write sees it and uniqueness pre-checks are current.
	Client client.Client
	// Directory authenticates workspace keys and tells when the local snapshot reflects a write.
	Directory Directory
	// Usage reads daily usage counters for GET .../usage.
	Usage UsageReader
	// Clock is the time source of rate limits, usage windows and timestamps. Defaults to time.Now.
	Clock func() time.Time
	// ReadYourWritesTimeout bounds the wait for the snapshot after a write. Defaults to 5 s.
	ReadYourWritesTimeout time.Duration
	// MaxBodyBytes caps request bodies. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Logger is the base logger, put into each request's context. Defaults to the context's logger, if any.
	Logger logr.Logger
}

// API serves the /v1 management routes.
type API struct {
	opts    Options
	limiter *fixedWindowLimiter
}

//go:embed openapi.json
var openAPISpec []byte

// New returns an API with defaults filled in.
func New(opts Options) *API {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.ReadYourWritesTimeout <= 0 {
		opts.ReadYourWritesTimeout = 5 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	return &API{opts: opts, limiter: newFixedWindowLimiter()}
}

// access says which workspace key types may call a route.
type access int

const (
	// accessGateway: groups, federated keys, endpoints, usage. WORKSPACE_MANAGE_ALL and PERSONAL keys of
	// organization admins.
	accessGateway access = iota
	// accessKeys: workspace key management. WORKSPACE_MANAGE_API_KEYS and PERSONAL keys; each handler narrows
	// what a caller may see and do.
	accessKeys
)

// Register adds every route to mux, using Go 1.22 method patterns.
func (a *API) Register(mux *http.ServeMux) {
	gw := func(pattern string, h handlerFunc) { mux.Handle(pattern, a.wrap(accessGateway, h)) }
	keys := func(pattern string, h handlerFunc) { mux.Handle(pattern, a.wrap(accessKeys, h)) }

	gw("POST /v1/gateway/groups", a.createGroup)
	gw("GET /v1/gateway/groups", a.listGroups)
	gw("GET /v1/gateway/groups/{group_id}", a.getGroup)
	gw("PATCH /v1/gateway/groups/{group_id}", a.patchGroup)
	gw("DELETE /v1/gateway/groups/{group_id}", a.deleteGroup)
	gw("GET /v1/gateway/groups/{group_id}/usage", a.groupUsage)

	gw("POST /v1/gateway/groups/{group_id}/api_keys", a.mintKey)
	gw("POST /v1/gateway/groups/{group_id}/api_keys/register", a.registerKey)
	gw("GET /v1/gateway/groups/{group_id}/api_keys", a.listKeys)
	gw("GET /v1/gateway/groups/{group_id}/api_keys/{api_key_prefix}", a.getKey)
	gw("DELETE /v1/gateway/groups/{group_id}/api_keys/{api_key_prefix}", a.deleteKey)

	gw("POST /v1/gateway/endpoints", a.createEndpoint)
	gw("GET /v1/gateway/endpoints", a.listEndpoints)
	gw("GET /v1/gateway/endpoints/{endpoint_id}", a.getEndpoint)
	gw("PATCH /v1/gateway/endpoints/{endpoint_id}", a.patchEndpoint)
	gw("DELETE /v1/gateway/endpoints/{endpoint_id}", a.deleteEndpoint)

	keys("POST /v1/api_keys", a.createWorkspaceKey)
	keys("GET /v1/api_keys", a.listWorkspaceKeys)
	keys("DELETE /v1/api_keys/{prefix}", a.deleteWorkspaceKey)

	// The spec is public: it holds no workspace data, and clients need it before they have a key.
	mux.HandleFunc("GET /v1/spec", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPISpec)
	})
}

// caller is the authenticated workspace key of a request.
type caller struct {
	namespace string
	key       snapshot.WorkspaceAPIKey
}

// isAdmin is true for a PERSONAL key whose owner is an organization admin.
func (c caller) isAdmin() bool {
	return c.key.Type == "PERSONAL" && c.key.Owner != nil && c.key.Owner.Role == "ADMIN"
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller)

// wrap authenticates, rate limits, checks the key type and caps the body, in that order: a caller learns that
// its key is of the wrong type only once it has proven it holds one, and every authenticated call, even a
// refused one, counts against its key's rate limit.
func (a *API) wrap(acc access, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := a.opts.Logger
		if log.GetSink() == nil {
			log = logr.FromContextOrDiscard(r.Context())
		}
		log = log.WithValues("method", r.Method, "route", r.Pattern)
		r = r.WithContext(logr.NewContext(r.Context(), log))

		defer func() {
			// A handler bug must not take the process down or leak a stack to the client.
			if p := recover(); p != nil {
				log.Error(nil, "Handler panicked", "panic", p)
				writeError(w, http.StatusInternalServerError, "internal_error", "Internal error.", nil)
			}
		}()

		if a.opts.Directory == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "The key directory is not loaded yet; retry shortly.", nil)
			return
		}
		raw, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			writeError(w, http.StatusUnauthorized, "unauthorized",
				"Missing API key: send the header Authorization: Bearer <API_KEY> (or Api-Key <API_KEY>).", nil)
			return
		}
		ns, key, ok := a.opts.Directory.WorkspaceKey(raw)
		if !ok {
			writeError(w, http.StatusUnauthorized, "unauthorized", "Unknown or revoked API key.", nil)
			return
		}
		c := caller{namespace: ns, key: key}
		if retry, limited := a.limiter.allow(ns+"/"+key.Prefix, r.Pattern, a.opts.Clock()); limited {
			writeRateLimited(w, retry)
			return
		}
		if !mayCall(acc, c) {
			writeError(w, http.StatusForbidden, "forbidden",
				"API keys of type "+key.Type+" may not call "+r.Pattern+"; see docs/rest-api.md for which key types may call which route.",
				map[string]any{"key_type": key.Type})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes)
		log.V(1).Info("Serving management call", "namespace", ns, "keyPrefix", key.Prefix)
		h(w, r, c)
	})
}

func mayCall(acc access, c caller) bool {
	switch acc {
	case accessGateway:
		return c.key.Type == "WORKSPACE_MANAGE_ALL" || c.isAdmin()
	case accessKeys:
		return c.key.Type == "WORKSPACE_MANAGE_API_KEYS" || c.key.Type == "PERSONAL"
	}
	return false
}

// bearer extracts the key of "Bearer <key>" or the legacy "Api-Key <key>"; the scheme is case-insensitive.
func bearer(h string) (string, bool) {
	scheme, key, ok := strings.Cut(strings.TrimSpace(h), " ")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return "", false
	}
	if !strings.EqualFold(scheme, "Bearer") && !strings.EqualFold(scheme, "Api-Key") {
		return "", false
	}
	return key, true
}

// awaitSnapshot waits until the namespace's snapshot satisfies pred, so that the gatewayd that answers a write
// already enforces it. On timeout the write still succeeded: it is logged and the caller gets its answer.
func (a *API) awaitSnapshot(ctx context.Context, ns, what string, pred func(*snapshot.Snapshot) bool) {
	start := a.opts.Clock()
	wctx, cancel := context.WithTimeout(ctx, a.opts.ReadYourWritesTimeout)
	defer cancel()
	if err := a.opts.Directory.WaitFor(wctx, ns, pred); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Snapshot did not reflect the write in time; answering anyway",
			"namespace", ns, "write", what, "timeout", a.opts.ReadYourWritesTimeout, "error", err.Error())
		return
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("Snapshot reflects the write", "namespace", ns, "write", what,
		"waited", a.opts.Clock().Sub(start))
}
