package endpoints

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "POST /v1/gateway/endpoints", kit.AccessGateway, a.createEndpoint)
	k.Handle(mux, "GET /v1/gateway/endpoints", kit.AccessGateway, a.listEndpoints)
	k.Handle(mux, "GET /v1/gateway/endpoints/{endpoint_id}", kit.AccessGateway, a.getEndpoint)
	k.Handle(mux, "PATCH /v1/gateway/endpoints/{endpoint_id}", kit.AccessGateway, a.patchEndpoint)
	k.Handle(mux, "DELETE /v1/gateway/endpoints/{endpoint_id}", kit.AccessGateway, a.deleteEndpoint)
}

type secretRefJSON struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

type targetJSON struct {
	Provider        string         `json:"provider"`
	BaseURL         string         `json:"base_url"`
	APIKeySecretRef *secretRefJSON `json:"api_key_secret_ref,omitempty"`
	TargetModel     string         `json:"target_model,omitempty"`
}

type endpointJSON struct {
	ID        string       `json:"id"`
	Slug      string       `json:"slug"`
	Targets   []targetJSON `json:"targets"`
	TimeoutMS int64        `json:"timeout_ms,omitempty"`
	CreatedAt string       `json:"created_at"`
	UpdatedAt string       `json:"updated_at"`
}

type createEndpointRequest struct {
	Slug      string       `json:"slug"`
	Targets   []targetJSON `json:"targets"`
	TimeoutMS int64        `json:"timeout_ms"`
}

type patchEndpointRequest struct {
	Targets   *[]targetJSON `json:"targets"`
	TimeoutMS *int64        `json:"timeout_ms"`
	// Slug is decoded only to refuse it: the slug is an endpoint's identity for callers.
	Slug *string `json:"slug"`
}

func (a *api) createEndpoint(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req createEndpointRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.Slug == "" {
		kit.BadRequest(w, "slug", "slug is required.")
		return
	}
	targets, ok := targetsFromJSON(w, req.Targets)
	if !ok || !validTimeout(w, req.TimeoutMS) {
		return
	}
	e := &gatewayv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: ids.New(ids.Endpoint), Namespace: c.Namespace},
		Spec:       gatewayv1.EndpointSpec{Slug: req.Slug, Targets: targets, Timeout: timeoutOf(req.TimeoutMS)},
	}
	if err := a.Opts.Client.Create(r.Context(), e); err != nil {
		kit.WriteKubeError(w, r, "create endpoint", err)
		return
	}
	a.awaitEndpoint(r.Context(), c.Namespace, e)
	httperr.WriteJSON(w, http.StatusCreated, toEndpointJSON(e))
}

func (a *api) listEndpoints(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	p, ok := kit.ParsePage(w, r)
	if !ok {
		return
	}
	var list gatewayv1.EndpointList
	if err := a.ListReader().List(r.Context(), &list, client.InNamespace(c.Namespace)); err != nil {
		kit.WriteKubeError(w, r, "list endpoints", err)
		return
	}
	var eps []*gatewayv1.Endpoint
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			eps = append(eps, &list.Items[i])
		}
	}
	slices.SortFunc(eps, func(a, b *gatewayv1.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.Name
	}
	sel, more := p.Slice(ids)
	items := make([]endpointJSON, 0, len(sel))
	for _, i := range sel {
		items = append(items, toEndpointJSON(eps[i]))
	}
	httperr.WriteJSON(w, http.StatusOK, kit.NewPage(items, more, ids, sel))
}

func (a *api) getEndpoint(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	e, ok := a.loadEndpoint(w, r, c)
	if !ok {
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toEndpointJSON(e))
}

func (a *api) patchEndpoint(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req patchEndpointRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.Slug != nil {
		kit.BadRequest(w, "slug", "slug is immutable: create another endpoint instead.")
		return
	}
	if req.Targets == nil && req.TimeoutMS == nil {
		kit.BadRequest(w, "targets", "Give targets and/or timeout_ms: at least one is required.")
		return
	}
	var targets []gatewayv1.EndpointTarget
	if req.Targets != nil {
		var ok bool
		if targets, ok = targetsFromJSON(w, *req.Targets); !ok {
			return
		}
	}
	if req.TimeoutMS != nil && !validTimeout(w, *req.TimeoutMS) {
		return
	}
	e, ok := a.loadEndpoint(w, r, c)
	if !ok {
		return
	}
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(e), e); err != nil {
			return err
		}
		if req.Targets != nil {
			e.Spec.Targets = targets
		}
		if req.TimeoutMS != nil {
			e.Spec.Timeout = timeoutOf(*req.TimeoutMS)
		}
		return a.Opts.Client.Update(r.Context(), e)
	})
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Endpoint", e.Name)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "update endpoint", err)
		return
	}
	a.awaitEndpoint(r.Context(), c.Namespace, e)
	httperr.WriteJSON(w, http.StatusOK, toEndpointJSON(e))
}

func (a *api) deleteEndpoint(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	e, ok := a.loadEndpoint(w, r, c)
	if !ok {
		return
	}
	if err := a.Opts.Client.Delete(r.Context(), e, client.Preconditions{UID: &e.UID}); err != nil && !apierrors.IsNotFound(err) {
		kit.WriteKubeError(w, r, "delete endpoint", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "delete endpoint "+e.Name, func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.Endpoints, func(se snapshot.Endpoint) bool { return se.ID == e.Name })
	})
	a.AwaitUnlisted(r.Context(), e)
	httperr.WriteJSON(w, http.StatusOK, map[string]string{"id": e.Name, "deleted_at": a.Opts.Clock().UTC().Format(time.RFC3339)})
}

func (a *api) loadEndpoint(w http.ResponseWriter, r *http.Request, c auth.Caller) (*gatewayv1.Endpoint, bool) {
	var e gatewayv1.Endpoint
	return &e, a.LoadObject(w, r, c, "endpoint_id", "Endpoint", &e)
}

// awaitEndpoint waits until the snapshot routes the endpoint's slug to its current first target, then until the
// list routes' cache holds e as written.
func (a *api) awaitEndpoint(ctx context.Context, ns string, e *gatewayv1.Endpoint) {
	want := e.Spec.Targets[0].BaseURL
	a.AwaitSnapshot(ctx, ns, "endpoint "+e.Name, func(s *snapshot.Snapshot) bool {
		for _, se := range s.Endpoints {
			if se.ID == e.Name {
				return len(se.Targets) > 0 && se.Targets[0].BaseURL == want
			}
		}
		return false
	})
	a.AwaitListed(ctx, e)
}

func targetsFromJSON(w http.ResponseWriter, in []targetJSON) ([]gatewayv1.EndpointTarget, bool) {
	if len(in) != 1 {
		kit.BadRequest(w, "targets", "targets must hold exactly one target.")
		return nil, false
	}
	t := in[0]
	if t.Provider != string(gatewayv1.ProviderOpenAI) {
		kit.BadRequest(w, "targets[0].provider", "targets[0].provider must be OPENAI.")
		return nil, false
	}
	if t.BaseURL == "" {
		kit.BadRequest(w, "targets[0].base_url", "targets[0].base_url is required.")
		return nil, false
	}
	out := gatewayv1.EndpointTarget{Provider: gatewayv1.ProviderOpenAI, BaseURL: t.BaseURL, TargetModel: t.TargetModel}
	if ref := t.APIKeySecretRef; ref != nil {
		if ref.Name == "" {
			kit.BadRequest(w, "targets[0].api_key_secret_ref.name", "targets[0].api_key_secret_ref.name is required.")
			return nil, false
		}
		out.APIKeySecretRef = &gatewayv1.SecretKeySelector{Name: ref.Name, Key: ref.Key}
	}
	return []gatewayv1.EndpointTarget{out}, true
}

func validTimeout(w http.ResponseWriter, ms int64) bool {
	if ms < 0 || ms > 3_600_000 {
		kit.BadRequest(w, "timeout_ms", "timeout_ms must be from 0 (gatewayd's default) to 3600000.")
		return false
	}
	return true
}

func timeoutOf(ms int64) *metav1.Duration {
	if ms == 0 {
		return nil
	}
	return &metav1.Duration{Duration: time.Duration(ms) * time.Millisecond}
}

func toEndpointJSON(e *gatewayv1.Endpoint) endpointJSON {
	out := endpointJSON{
		ID:        e.Name,
		Slug:      e.Spec.Slug,
		Targets:   make([]targetJSON, 0, len(e.Spec.Targets)),
		CreatedAt: e.CreationTimestamp.UTC().Format(time.RFC3339),
		UpdatedAt: updatedAt(e.ObjectMeta).UTC().Format(time.RFC3339),
	}
	if e.Spec.Timeout != nil {
		out.TimeoutMS = e.Spec.Timeout.Milliseconds()
	}
	for _, t := range e.Spec.Targets {
		tj := targetJSON{Provider: string(t.Provider), BaseURL: t.BaseURL, TargetModel: t.TargetModel}
		if t.APIKeySecretRef != nil {
			tj.APIKeySecretRef = &secretRefJSON{Name: t.APIKeySecretRef.Name, Key: t.APIKeySecretRef.Key}
		}
		out.Targets = append(out.Targets, tj)
	}
	return out
}

// updatedAt is the last write of the object's spec that the API server recorded, or its creation.
func updatedAt(m metav1.ObjectMeta) time.Time {
	t := m.CreationTimestamp.Time
	for _, f := range m.ManagedFields {
		if f.Subresource == "" && f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}
