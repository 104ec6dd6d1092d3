// Package kit is the plumbing every /v1 management route shares: the request wrapper (authenticate, rate limit,
// check the key type, cap the body), strict JSON decoding, the mapping of API-server refusals onto the error
// envelope, paging, the management rate limiter and the read-your-writes wait. Each resource lives in a
// package of its own under gatewayd/rest that registers its routes with a Kit; gatewayd/rest assembles them.
package kit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/podlogs"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
)

// Directory answers from the snapshot gatewayd has loaded.
type Directory interface {
	// WorkspaceKey authenticates a workspace API key (full plaintext; constant-time hash compare inside) and returns
	// its caller, with the principal computed from the snapshot in force (auth.NewCaller).
	WorkspaceKey(apiKey string) (c auth.Caller, ok bool)
	// WaitFor blocks until the snapshot loaded for namespace satisfies pred, or ctx ends.
	WaitFor(ctx context.Context, namespace string, pred func(*snapshot.Snapshot) bool) error
	// HasAPIKey reports whether the snapshot loaded for namespace serves the federated key of prefix. The
	// snapshot WaitFor hands to pred has no APIKeys: gatewayd holds a million of them in its key index only.
	HasAPIKey(namespace, prefix string) bool
}

// UsageReader reads the live usage counters.
type UsageReader interface {
	// Usage is the current count of the usage-limit bucket (namespace, group, slug, type, unit) charged to that
	// group, in the DAY or MONTH that holds now.
	Usage(ctx context.Context, namespace, groupID, slug, limitType, unit string, now time.Time) (int64, error)
}

// KeyUseReader reads when workspace keys were last used (gatewayd/keyuse).
type KeyUseReader interface {
	// LastUsed returns the last use of the namespace's keys, by prefix; a key never used is absent.
	LastUsed(ctx context.Context, namespace string) (map[string]time.Time, error)
}

// Options configures the API.
type Options struct {
	// Client reads and writes the custom resources. It should read from the API server directly (not through
	// an informer cache), so that a read right after a write sees it and uniqueness pre-checks are current.
	Client client.Client
	// Lister serves the namespace-wide lists of the list routes, from an informer cache, so a client paging
	// through thousands of groups costs the API server nothing. Client when nil.
	Lister client.Reader
	// Directory authenticates workspace keys and tells when the local snapshot reflects a write.
	Directory Directory
	// Usage reads daily usage counters for GET .../usage.
	Usage UsageReader
	// KeyUse reads workspace keys' last uses for GET /v1/api_keys; last_used_at is null for every key when nil.
	KeyUse KeyUseReader
	// Limits counts the management rate limits (ManagementRow): shared by every replica when gatewayd runs on
	// Redis; this process's memory when nil.
	Limits limits.Windows
	// Clock is the time source of rate limits, usage windows and timestamps. Defaults to time.Now.
	Clock func() time.Time
	// ReadYourWritesTimeout bounds the wait for the snapshot after a write. Defaults to 5 s.
	ReadYourWritesTimeout time.Duration
	// MaxBodyBytes caps request bodies. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Logger is the base logger, put into each request's context. Defaults to the context's logger, if any.
	Logger logr.Logger
	// RequestLogs reads the logs of the calls gatewayd made to each deployment (predict calls, async attempts),
	// this replica's and every other's it lists, a source of the logs route; none when nil.
	RequestLogs *requestlog.Cluster
	// PodLogs reads what a deployment's pods print, a source of the logs route; none when nil.
	PodLogs podlogs.Reader
}

// Kit is the shared state of the management routes.
type Kit struct {
	Opts Options
	// patterns are the route patterns registered through Handle, in order.
	patterns []string
}

// New returns a Kit with defaults filled in.
func New(opts Options) *Kit {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.ReadYourWritesTimeout <= 0 {
		opts.ReadYourWritesTimeout = 5 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.Limits == nil {
		opts.Limits = limits.NewMemoryWindows()
	}
	return &Kit{Opts: opts}
}

// Access is the question a route asks gatewayd/authz.Decide before its handler runs: the action, on no particular
// resource (the route itself). Handlers then ask about each object they read or change.
type Access authz.Action

const (
	// AccessGateway: groups, federated keys, endpoints, usage (authz.ActionManageGateway).
	AccessGateway = Access(authz.ActionManageGateway)
	// AccessKeys: the workspace key routes (authz.ActionKeySee on no key); each handler asks about the key it
	// creates, lists, renames or revokes.
	AccessKeys = Access(authz.ActionKeySee)
	// AccessModels: the model routes (authz.ActionListModels on no model); each handler asks about the model it
	// reads (ActionListModels) or changes (ActionManageModels).
	AccessModels = Access(authz.ActionListModels)
	// AccessTeams: the team routes (authz.ActionListTeams on no team).
	AccessTeams = Access(authz.ActionListTeams)
	// AccessMetrics: the workspace's metrics export (authz.ActionExportMetrics).
	AccessMetrics = Access(authz.ActionExportMetrics)
	// AccessSandbox: the sandbox image routes. There is no question about the route itself, because the route
	// acts for a team that each call selects: the handler asks authz.ActionSandbox about that team.
	AccessSandbox = Access(authz.ActionSandbox)
)

// HandlerFunc serves one authenticated management call.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, c auth.Caller)

// Route is one management route: its pattern, the question it asks authz.Decide, and its handler.
type Route struct {
	Pattern string
	Access  Access
	Handler HandlerFunc
}

// Handle registers h at pattern on mux behind Wrap.
func (k *Kit) Handle(mux ingress.Mux, pattern string, acc Access, h HandlerFunc) {
	mux.Handle(pattern, k.Wrap(acc, h))
	k.patterns = append(k.patterns, pattern)
}

// Patterns are the route patterns registered through Handle ("GET /v1/models"), in order, for the OpenAPI
// document's test: a pattern composed at run time (gatewayd/rest/envroutes) is listed as the mux has it.
func (k *Kit) Patterns() []string { return slices.Clone(k.patterns) }

// Wrap authenticates, rate limits, checks the key type and caps the body (ingress.Limit: a declared length over
// MaxBodyBytes is 413 before a byte is read), in that order: a caller learns that its key is of the wrong type
// only once it has proven it holds one, and every authenticated call, even a refused one, counts against its
// key's rate limit. No body is read before the body cap.
func (k *Kit) Wrap(acc Access, h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := k.Opts.Logger
		if log.GetSink() == nil {
			log = logr.FromContextOrDiscard(r.Context())
		}
		log = log.WithValues("method", r.Method, "route", r.Pattern)
		r = r.WithContext(logr.NewContext(r.Context(), log))

		defer func() {
			// A handler bug must not take the process down or leak a stack to the client.
			if p := recover(); p != nil {
				log.Error(nil, "Handler panicked", "panic", p)
				httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "Internal error.", nil)
			}
		}()

		if k.Opts.Directory == nil {
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The key directory is not loaded yet; retry shortly.", nil)
			return
		}
		c, refusal := auth.Workspace(r, k.Opts.Directory.WorkspaceKey)
		if refusal != nil {
			httperr.WriteError(w, refusal)
			return
		}
		if k.rateLimited(w, r, c) {
			return
		}
		if dec := c.Decide(authz.Action(acc), authz.Resource{}); acc != AccessSandbox && !dec.Allowed {
			Forbidden(w, c, dec)
			return
		}
		if e := ingress.Limit(w, r, k.Opts.MaxBodyBytes); e != nil {
			httperr.WriteError(w, e)
			return
		}
		log.V(1).Info("Serving management call", "namespace", c.Namespace, "keyPrefix", c.Key.Prefix)
		h(w, r, c)
	})
}

// Forbidden answers a refusal by authz.Decide: 403 with the rule's sentence, naming the caller's key type. A Hidden
// decision is the handler's to answer as a 404 of the thing it looked for (NotFound), never through here.
func Forbidden(w http.ResponseWriter, c auth.Caller, dec authz.Decision) {
	httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": c.Key.Type})
}

// AwaitSnapshot waits until the namespace's snapshot satisfies pred, so that the gatewayd that answers a write
// already enforces it. On timeout the write still succeeded: it is logged and the caller gets its answer.
func (k *Kit) AwaitSnapshot(ctx context.Context, ns, what string, pred func(*snapshot.Snapshot) bool) {
	start := k.Opts.Clock()
	wctx, cancel := context.WithTimeout(ctx, k.Opts.ReadYourWritesTimeout)
	defer cancel()
	if err := k.Opts.Directory.WaitFor(wctx, ns, pred); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Snapshot did not reflect the write in time; answering anyway",
			"namespace", ns, "write", what, "timeout", k.Opts.ReadYourWritesTimeout, "error", err.Error())
		return
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("Snapshot reflects the write", "namespace", ns, "write", what,
		"waited", k.Opts.Clock().Sub(start))
}

// LoadObject reads the object named by path parameter param into obj, answering 400 for an invalid id and 404
// for a missing one or one being deleted.
func (k *Kit) LoadObject(w http.ResponseWriter, r *http.Request, c auth.Caller, param, kind string, obj client.Object) bool {
	id := r.PathValue(param)
	noun := strings.ToLower(kind)
	if !ValidName(id) {
		BadRequest(w, param, fmt.Sprintf("%q is not a valid %s id.", id, noun))
		return false
	}
	err := k.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: id}, obj)
	if apierrors.IsNotFound(err) || (err == nil && obj.GetDeletionTimestamp() != nil) {
		NotFound(w, kind, id)
		return false
	}
	if err != nil {
		WriteKubeError(w, r, "get "+noun, err)
		return false
	}
	return true
}

// LoadDecided is LoadObject for an object that belongs to a team (a Model, a Chain), then authz.Decide's answer
// for c doing action to it through environment env: a hidden object is 404 as a missing one is, a refused
// action 403 with the rule's sentence. teamID reads the object's team once it is loaded.
func (k *Kit) LoadDecided(w http.ResponseWriter, r *http.Request, c auth.Caller, param, kind string, obj client.Object,
	teamID func() string, action authz.Action, env string) bool {
	if !k.LoadObject(w, r, c, param, kind, obj) {
		return false
	}
	dec := authz.Decide(c.Principal(), action, authz.Resource{TeamID: teamID(), ModelID: obj.GetName(), Environment: env})
	switch {
	case dec.Hidden:
		NotFound(w, kind, obj.GetName())
		return false
	case !dec.Allowed:
		httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": c.Key.Type, param: obj.GetName()})
		return false
	}
	return true
}

// ListReader is what the list routes read whole namespaces from: Options.Lister, or Client.
func (k *Kit) ListReader() client.Reader {
	if k.Opts.Lister != nil {
		return k.Opts.Lister
	}
	return k.Opts.Client
}

// LoadGroup reads the Group of path parameter group_id, as LoadObject does.
func (k *Kit) LoadGroup(w http.ResponseWriter, r *http.Request, c auth.Caller) (*gatewayv1.Group, bool) {
	var g gatewayv1.Group
	return &g, k.LoadObject(w, r, c, "group_id", "Group", &g)
}

// Teams lists the live Teams of namespace ns from rd (ListReader for a list route), sorted by id.
func Teams(ctx context.Context, rd client.Reader, ns string) ([]gatewayv1.Team, error) {
	var list gatewayv1.TeamList
	if err := rd.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(list.Items, func(t gatewayv1.Team) bool { return t.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b gatewayv1.Team) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// updateBackoff spreads concurrent writers of one object: each round one of them wins, so it allows about as
// many rounds as concurrent callers a route should absorb (tens, twice over for a loaded API server, where a round
// can go by with no winner), with jitter so the losers do not collide again.
var updateBackoff = wait.Backoff{Steps: 60, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 1, Cap: 500 * time.Millisecond}

// UpdateOnConflict runs update (read the object, change it, write it) again on a resourceVersion conflict, with
// the fresh object each time, so concurrent PATCHes of one object each apply and answer 200. Only a writer that
// still loses after every round gets ErrBusy, which WriteKubeError answers as a 409 in the API's own words.
func UpdateOnConflict(update func() error) error {
	err := retry.RetryOnConflict(updateBackoff, update)
	if apierrors.IsConflict(err) {
		return ErrBusy
	}
	return err
}

// ErrBusy is an update that lost every round to concurrent writers of the same object.
var ErrBusy = errors.New("the object kept changing while this update was applied")
