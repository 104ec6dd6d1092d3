package endpoints

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/routing"
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

type pricingJSON struct {
	InputPerMillionTokens  string `json:"input_per_million_tokens,omitempty"`
	OutputPerMillionTokens string `json:"output_per_million_tokens,omitempty"`
}

// targetJSON is one target, in requests and answers. An answer always names the target (target-<index> when
// its spec has no name) and gives its weight and priority.
type targetJSON struct {
	Name            string         `json:"name,omitempty"`
	Provider        string         `json:"provider"`
	BaseURL         string         `json:"base_url"`
	APIKeySecretRef *secretRefJSON `json:"api_key_secret_ref,omitempty"`
	TargetModel     string         `json:"target_model,omitempty"`
	Weight          *int32         `json:"weight,omitempty"`
	Priority        *int32         `json:"priority,omitempty"`
	Pricing         *pricingJSON   `json:"pricing,omitempty"`
	APIVersion      string         `json:"api_version,omitempty"`
	Region          string         `json:"region,omitempty"`
}

type retryJSON struct {
	Attempts *int32  `json:"attempts,omitempty"`
	OnStatus []int32 `json:"on_status,omitempty"`
}

type cooldownJSON struct {
	Failures   *int32 `json:"failures,omitempty"`
	DurationMS *int64 `json:"duration_ms,omitempty"`
}

type endpointJSON struct {
	ID        string        `json:"id"`
	Slug      string        `json:"slug"`
	Targets   []targetJSON  `json:"targets"`
	Retry     *retryJSON    `json:"retry,omitempty"`
	Cooldown  *cooldownJSON `json:"cooldown,omitempty"`
	TimeoutMS int64         `json:"timeout_ms,omitempty"`
	CreatedAt string        `json:"created_at"`
	UpdatedAt string        `json:"updated_at"`
}

type createEndpointRequest struct {
	Slug      string        `json:"slug"`
	Targets   []targetJSON  `json:"targets"`
	Retry     *retryJSON    `json:"retry"`
	Cooldown  *cooldownJSON `json:"cooldown"`
	TimeoutMS int64         `json:"timeout_ms"`
}

// patchEndpointRequest replaces what it gives: targets as a whole list; retry and cooldown as a whole, where {}
// returns to gatewayd's defaults.
type patchEndpointRequest struct {
	Targets   *[]targetJSON `json:"targets"`
	Retry     *retryJSON    `json:"retry"`
	Cooldown  *cooldownJSON `json:"cooldown"`
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
	retry, cooldown, ok := policiesFromJSON(w, req.Retry, req.Cooldown)
	if !ok {
		return
	}
	e := &gatewayv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: ids.New(ids.Endpoint), Namespace: c.Namespace},
		Spec: gatewayv1.EndpointSpec{Slug: req.Slug, Targets: targets, Retry: retry, Cooldown: cooldown,
			Timeout: timeoutOf(req.TimeoutMS)},
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
	if req.Targets == nil && req.Retry == nil && req.Cooldown == nil && req.TimeoutMS == nil {
		kit.BadRequest(w, "targets", "Give targets, retry, cooldown or timeout_ms: at least one is required.")
		return
	}
	var targets []gatewayv1.EndpointTarget
	if req.Targets != nil {
		var ok bool
		if targets, ok = targetsFromJSON(w, *req.Targets); !ok {
			return
		}
	}
	retry, cooldown, ok := policiesFromJSON(w, req.Retry, req.Cooldown)
	if !ok {
		return
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
		if req.Retry != nil {
			e.Spec.Retry = retry
		}
		if req.Cooldown != nil {
			e.Spec.Cooldown = cooldown
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

// awaitEndpoint waits until the snapshot routes the endpoint's slug as e now says (every target, retry,
// cooldown and timeout, in the snapshot's form), then until the list routes' cache holds e as written.
func (a *api) awaitEndpoint(ctx context.Context, ns string, e *gatewayv1.Endpoint) {
	want, err := json.Marshal(routing.Snapshot(e))
	if err != nil {
		return
	}
	a.AwaitSnapshot(ctx, ns, "endpoint "+e.Name, func(s *snapshot.Snapshot) bool {
		for i := range s.Endpoints {
			if s.Endpoints[i].ID == e.Name {
				got, err := json.Marshal(&s.Endpoints[i])
				return err == nil && bytes.Equal(got, want)
			}
		}
		return false
	})
	a.AwaitListed(ctx, e)
}

// targetsFromJSON checks each target against the rules the CRD states (docs/rest-api.md "Endpoints"), so a
// refusal names the field a client sent, and converts them.
func targetsFromJSON(w http.ResponseWriter, in []targetJSON) ([]gatewayv1.EndpointTarget, bool) {
	if len(in) < 1 || len(in) > gatewayv1.MaxEndpointTargets {
		kit.BadRequest(w, "targets", fmt.Sprintf("targets must hold 1 to %d targets, not %d.", gatewayv1.MaxEndpointTargets, len(in)))
		return nil, false
	}
	out := make([]gatewayv1.EndpointTarget, len(in))
	names := make([]string, len(in))
	for i, t := range in {
		f := fmt.Sprintf("targets[%d]", i)
		if field, msg := targetRule(f, t); field != "" {
			kit.BadRequest(w, field, msg)
			return nil, false
		}
		names[i] = t.Name
		out[i] = gatewayv1.EndpointTarget{Name: t.Name, Provider: gatewayv1.Provider(t.Provider), BaseURL: t.BaseURL,
			TargetModel: t.TargetModel, Weight: 1, APIVersion: t.APIVersion, Region: t.Region}
		if t.Weight != nil {
			out[i].Weight = *t.Weight
		}
		if t.Priority != nil {
			out[i].Priority = *t.Priority
		}
		if ref := t.APIKeySecretRef; ref != nil {
			out[i].APIKeySecretRef = &gatewayv1.SecretKeySelector{Name: ref.Name, Key: ref.Key}
		}
		if p := t.Pricing; p != nil && (p.InputPerMillionTokens != "" || p.OutputPerMillionTokens != "") {
			out[i].Pricing = &gatewayv1.EndpointPricing{InputPerMillionTokens: p.InputPerMillionTokens, OutputPerMillionTokens: p.OutputPerMillionTokens}
		}
	}
	if i := gatewayv1.DuplicateTargetName(names); i >= 0 {
		kit.BadRequest(w, fmt.Sprintf("targets[%d].name", i), fmt.Sprintf(
			"targets[%d].name must be unique: an earlier target is already called %q (a target without a name is called target-<index>).",
			i, gatewayv1.TargetName(i, names[i])))
		return nil, false
	}
	return out, true
}

// targetRule is the first rule target t, at field path f, breaks: the field it names and the message; "" when
// it breaks none.
func targetRule(f string, t targetJSON) (field, msg string) {
	providers := make([]string, len(gatewayv1.Providers))
	for i, p := range gatewayv1.Providers {
		providers[i] = string(p)
	}
	broke := func(name, rule string) (string, string) { return f + "." + name, f + "." + name + " " + rule }
	switch {
	case t.Name != "" && (len(t.Name) > gatewayv1.MaxTargetNameLength || !gatewayv1.TargetNamePattern.MatchString(t.Name)):
		return broke("name", fmt.Sprintf("must be a DNS-1123 label: at most %d lower-case letters, digits and '-', beginning and ending with a letter or digit.", gatewayv1.MaxTargetNameLength))
	case !slices.Contains(providers, t.Provider):
		return broke("provider", fmt.Sprintf("must be one of %s (the other providers are not served yet).", strings.Join(providers, ", ")))
	case t.BaseURL == "":
		return broke("base_url", "is required.")
	case t.APIKeySecretRef != nil && t.APIKeySecretRef.Name == "":
		return broke("api_key_secret_ref.name", "is required.")
	case t.Weight != nil && (*t.Weight < 1 || *t.Weight > gatewayv1.MaxTargetWeight):
		return broke("weight", fmt.Sprintf("must be from 1 to %d.", gatewayv1.MaxTargetWeight))
	case t.Priority != nil && (*t.Priority < 0 || *t.Priority > gatewayv1.MaxTargetPriority):
		return broke("priority", fmt.Sprintf("must be from 0 to %d.", gatewayv1.MaxTargetPriority))
	case t.APIVersion == "" && t.Provider == string(gatewayv1.ProviderAzureOpenAI):
		return broke("api_version", `is required on an AZURE_OPENAI target: the api-version of its calls, for example "2024-10-21".`)
	case len(t.APIVersion) > gatewayv1.MaxTargetFieldLength:
		return broke("api_version", fmt.Sprintf("must be at most %d characters.", gatewayv1.MaxTargetFieldLength))
	case t.APIVersion != "" && t.Provider != string(gatewayv1.ProviderAzureOpenAI):
		return broke("api_version", "is taken only by an AZURE_OPENAI target; remove it from this target.")
	case t.Region != "" && t.Provider != string(gatewayv1.ProviderBedrock):
		return broke("region", "is taken only by a BEDROCK target; remove it from this target.")
	case t.Region == "" && t.Provider == string(gatewayv1.ProviderBedrock):
		return broke("region", "is required on a BEDROCK target: the AWS region its calls are signed for.")
	case t.Pricing != nil && !validPrice(t.Pricing.InputPerMillionTokens):
		return broke("pricing.input_per_million_tokens", priceRule)
	case t.Pricing != nil && !validPrice(t.Pricing.OutputPerMillionTokens):
		return broke("pricing.output_per_million_tokens", priceRule)
	}
	return "", ""
}

const priceRule = `must be a non-negative decimal string of US dollars with at most 6 places after the point, for example "0.60".`

func validPrice(s string) bool { return s == "" || gatewayv1.PricePattern.MatchString(s) }

// policiesFromJSON checks and converts an endpoint's retry and cooldown.
func policiesFromJSON(w http.ResponseWriter, r *retryJSON, c *cooldownJSON) (*gatewayv1.EndpointRetry, *gatewayv1.EndpointCooldown, bool) {
	retry, ok := retryFromJSON(w, r)
	if !ok {
		return nil, nil, false
	}
	cooldown, ok := cooldownFromJSON(w, c)
	return retry, cooldown, ok
}

// retryFromJSON checks and converts a retry policy; {} is no policy (gatewayd's defaults).
func retryFromJSON(w http.ResponseWriter, in *retryJSON) (*gatewayv1.EndpointRetry, bool) {
	if in == nil || (in.Attempts == nil && len(in.OnStatus) == 0) {
		return nil, true
	}
	if a := in.Attempts; a != nil && (*a < 0 || *a > gatewayv1.MaxRetryAttempts) {
		kit.BadRequest(w, "retry.attempts", fmt.Sprintf("retry.attempts must be from 0 to %d: the tries after the first.", gatewayv1.MaxRetryAttempts))
		return nil, false
	}
	for i, st := range in.OnStatus {
		f := fmt.Sprintf("retry.on_status[%d]", i)
		if st < gatewayv1.MinRetryStatus || st > gatewayv1.MaxRetryStatus {
			kit.BadRequest(w, f, fmt.Sprintf("%s must be an HTTP status from %d to %d, not %d.", f, gatewayv1.MinRetryStatus, gatewayv1.MaxRetryStatus, st))
			return nil, false
		}
		if slices.Contains(in.OnStatus[:i], st) {
			kit.BadRequest(w, f, fmt.Sprintf("%s repeats the status %d.", f, st))
			return nil, false
		}
	}
	return &gatewayv1.EndpointRetry{Attempts: in.Attempts, OnStatus: in.OnStatus}, true
}

// cooldownFromJSON checks and converts a cooldown; {} is no cooldown of the Endpoint's own (gatewayd's defaults).
func cooldownFromJSON(w http.ResponseWriter, in *cooldownJSON) (*gatewayv1.EndpointCooldown, bool) {
	if in == nil || (in.Failures == nil && in.DurationMS == nil) {
		return nil, true
	}
	out := &gatewayv1.EndpointCooldown{}
	if f := in.Failures; f != nil {
		if *f < 1 || *f > gatewayv1.MaxCooldownFailures {
			kit.BadRequest(w, "cooldown.failures", fmt.Sprintf("cooldown.failures must be from 1 to %d consecutive failed tries.", gatewayv1.MaxCooldownFailures))
			return nil, false
		}
		out.Failures = *f
	}
	if d := in.DurationMS; d != nil {
		if *d < gatewayv1.MinCooldownMillis || *d > gatewayv1.MaxCooldownMillis {
			kit.BadRequest(w, "cooldown.duration_ms", fmt.Sprintf("cooldown.duration_ms must be from %d (1s) to %d (1h).", gatewayv1.MinCooldownMillis, gatewayv1.MaxCooldownMillis))
			return nil, false
		}
		out.Duration = &metav1.Duration{Duration: time.Duration(*d) * time.Millisecond}
	}
	return out, true
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
	for i, t := range e.Spec.Targets {
		tj := targetJSON{Name: gatewayv1.TargetName(i, t.Name), Provider: string(t.Provider), BaseURL: t.BaseURL,
			TargetModel: t.TargetModel, Weight: ptr.To(max(t.Weight, 1)), Priority: ptr.To(t.Priority),
			APIVersion: t.APIVersion, Region: t.Region}
		if t.APIKeySecretRef != nil {
			tj.APIKeySecretRef = &secretRefJSON{Name: t.APIKeySecretRef.Name, Key: t.APIKeySecretRef.Key}
		}
		if p := t.Pricing; p != nil {
			tj.Pricing = &pricingJSON{InputPerMillionTokens: p.InputPerMillionTokens, OutputPerMillionTokens: p.OutputPerMillionTokens}
		}
		out.Targets = append(out.Targets, tj)
	}
	if r := e.Spec.Retry; r != nil {
		out.Retry = &retryJSON{Attempts: r.Attempts, OnStatus: r.OnStatus}
	}
	if c := e.Spec.Cooldown; c != nil {
		out.Cooldown = &cooldownJSON{}
		if c.Failures != 0 {
			out.Cooldown.Failures = ptr.To(c.Failures)
		}
		if c.Duration != nil {
			out.Cooldown.DurationMS = ptr.To(c.Duration.Milliseconds())
		}
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
