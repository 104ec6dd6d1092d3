package inference

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/failover"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// call is the bookkeeping of one model call, for metrics and billing.
type call struct {
	workspace, entity, model string
	// prefix is the calling key's 16-character prefix.
	prefix string
	// requestID is gatewayd's id of the call: on the answer, at the upstream, in the billing event.
	requestID string
	// refusal names the limit that refused the call with 429, nil when none did.
	refusal *billing.Refusal
	// tries is what the call's tries did: the answering target and how many tries it took.
	tries failover.Result
	// cost is the call's cost in micro-USD (callCost), computed once where the call is settled: from the answering
	// target's pricing and the usage it reported; 0 for an unpriced target, which never trips a COST limit. Settle
	// charges it to the plan's COST limits; the billing event and the cost metric read it.
	cost int64
	// fromClient translates the body of a call in another client API (/v1/messages) into OpenAI's; nil on the
	// OpenAI routes.
	fromClient func(body []byte) ([]byte, error)
}

// openAI serves one OpenAI route for federated and workspace keys: suffix is appended to the Endpoint's base URL.
func (h *Handler) openAI(suffix string) http.Handler {
	pattern, op := "/v1"+suffix, tracing.Operation(suffix)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serveCall(w, r, pattern, op, suffix, &call{}, nil)
	})
}

// serveCall serves a model call on route suffix (serveOpenAI) under its server span, and counts it in the request
// series under pattern once answered; finish, when set, runs first then, before w's status is read.
func (h *Handler) serveCall(w http.ResponseWriter, r *http.Request, pattern, op, suffix string, c *call, finish func()) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	// With tracing off, Extract and Start return r's context and a span that records nothing, allocating nothing.
	// The call's context carries the span; r keeps its own, so tracing costs no copy of the request.
	tr := h.opts.Tracer
	ctx, span := tr.Start(tr.Extract(r.Context(), r.Header), op, trace.SpanKindServer)
	defer func() {
		if finish != nil {
			finish()
		}
		code := strconv.Itoa(sw.code())
		h.opts.Metrics.requests.WithLabelValues(c.workspace, c.entity, c.model, code).Inc()
		h.opts.Metrics.requestDuration.WithLabelValues(pattern, code).Observe(time.Since(start).Seconds())
		if span.IsRecording() {
			endCall(span, op, c, sw.code())
		}
		span.End()
	}()
	h.serveOpenAI(ctx, sw, r, suffix, c)
}

// endCall writes what a model call did on its server span: the GenAI attributes, the caller's group and key
// prefix, and the limit that refused it (docs/operations.md "Traces"). Never the key, a header or the body.
func endCall(span trace.Span, op string, c *call, status int) {
	attrs := []attribute.KeyValue{
		attribute.String(tracing.OperationName, op),
		attribute.Int("http.response.status_code", status),
	}
	str := func(k, v string) {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	str(tracing.Workspace, c.workspace)
	str(tracing.Group, c.entity)
	str(tracing.KeyPrefix, c.prefix)
	str(tracing.RequestID, c.requestID)
	if c.model != "" {
		span.SetName(op + " " + c.model)
		str(tracing.RequestModel, c.model)
	}
	if t := c.tries.Target; t != nil {
		str(tracing.ProviderName, t.Provider)
		model := t.TargetModel
		if model == "" {
			model = c.model
		}
		str(tracing.ResponseModel, model)
		attrs = append(attrs, attribute.Int(tracing.Attempts, c.tries.Attempts),
			attribute.Int64(tracing.InputTokens, c.tries.Usage.PromptTokens), attribute.Int64(tracing.OutputTokens, c.tries.Usage.CompletionTokens))
	}
	if f := c.refusal; f != nil {
		str(tracing.LimitBy, f.By)
		str(tracing.LimitType, f.Type)
		str(tracing.LimitUnit, f.Unit)
		str(tracing.LimitSource, f.SourceGroup)
	}
	span.SetAttributes(attrs...)
	if status >= http.StatusInternalServerError {
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		tracing.Fail(span, http.StatusText(status))
	}
}

// serveOpenAI serves one call of either kind of key. A federated key calls the slugs of its group under its
// group's limits, and also under its own model-API tier on a slug whose Endpoint is a shared model API. A
// workspace key calls any slug an Endpoint serves, as authz.Decide lets it invoke, under its model-API tier
// alone: it has no group. Only federated calls record a billing event (docs/decisions.md "Workspace keys on the
// model API").
func (h *Handler) serveOpenAI(ctx context.Context, w *statusWriter, r *http.Request, suffix string, c *call) {
	log := logr.FromContextOrDiscard(ctx)
	v := h.opts.View()
	key, caller, aerr := auth.ModelAPI(r, v, h.lookup)
	if aerr != nil && h.opts.CatchUp != nil && presented(r) && h.opts.CatchUp(ctx, v, "") {
		// A key minted through another replica a moment ago: look again once this one serves it.
		v = h.opts.View()
		key, caller, aerr = auth.ModelAPI(r, v, h.lookup)
	}
	if aerr != nil {
		httperr.WriteModelCallError(w, aerr)
		return
	}
	var prefix string
	if key != nil {
		c.workspace, c.entity, prefix = key.Group.Namespace, key.Group.ExternalEntityID, key.Prefix
	} else {
		c.workspace, prefix = caller.Namespace, caller.Key.Prefix
	}
	c.prefix = prefix
	// Every call has a request id of gatewayd's own (never the caller's: billing receivers dedupe events by it): on
	// the answer, sent to the upstream (a vLLM server takes it as its own), and in a federated call's billing event.
	c.requestID = newRequestID()
	w.Header().Set(requestlog.Header, c.requestID)
	var u upstream.Usage
	if key != nil && h.opts.Billing != nil {
		defer func() { h.recordBilling(key, c, w, u) }()
	}
	slot, size := c.workspace+"/"+prefix, h.opts.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength
	}
	if !h.inflight.acquire(slot, size) {
		e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
			fmt.Sprintf("Too many request bytes in flight for this key: at most %d at once.", h.opts.MaxInFlightBytesPerKey),
			map[string]any{"max_in_flight_bytes": h.opts.MaxInFlightBytesPerKey})
		e.RetryAfter = 1
		httperr.WriteModelCallError(w, e)
		return
	}
	defer h.inflight.release(slot, size)
	body, berr := h.readBody(w, r)
	if berr != nil {
		httperr.WriteModelCallError(w, berr)
		return
	}
	if c.fromClient != nil {
		var err error
		if body, err = c.fromClient(body); err != nil {
			writeCallError(w, r, "", err)
			return
		}
	}
	req, err := openai.ParseRequest(body)
	if err != nil {
		httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError, "The request body must be a JSON object.", err.Error())
		return
	}
	var plan *limits.Plan
	var ep *view.Endpoint
	rerr := route.Resolve(ctx, v, h.opts.View, c.workspace, h.opts.CatchUp, func(nv *view.View) *httperr.Error {
		if nv != v && key != nil {
			// A second look, in a newer view: the key's group as that view serves it.
			if k := nv.LookupKey(credential(r)); k != nil {
				key = k
			}
		}
		ns := nv.Namespace(c.workspace)
		var e *httperr.Error
		if key != nil {
			plan, e = federatedPlan(key, req.Model)
		} else {
			plan, e = workspacePlan(ns, caller, req.Model)
		}
		if e != nil {
			return e
		}
		// A label value only once the snapshot knows the slug, so callers cannot mint series.
		c.model = req.Model
		ep, e = route.Slug(ns, req.Model)
		return e
	})
	if rerr != nil {
		httperr.WriteModelCallError(w, rerr)
		return
	}
	if lerr := h.admit(ctx, plan, c); lerr != nil {
		httperr.WriteModelCallError(w, lerr)
		return
	}
	header := http.Header{"Content-Type": {"application/json"}, requestlog.Header: {c.requestID}}
	if a := r.Header.Get("Accept"); a != "" {
		header.Set("Accept", a)
	}
	// The limits admitted the client's call once; the tries of its targets are failover's, and what the answering
	// try reported is settled once below (docs/routing.md, rule 1).
	res, err := h.opts.Endpoints.Call(ctx, &failover.Call{
		Call:      provider.Call{Route: suffix, Body: body, Stream: req.Stream},
		Namespace: c.workspace, Endpoint: ep, Header: header, StreamUsage: req.WantsUsage(),
	}, w)
	c.tries = res
	if err != nil {
		writeCallError(w, r, ep.Slug, err)
		return
	}
	h.opts.Metrics.upstream.WithLabelValues(c.workspace, ep.Slug).Observe(res.Duration.Seconds())
	h.opts.Metrics.genAI.observe(c.workspace, ep.Slug, res.Target, res.Result, req.Stream)
	if !res.Complete {
		log.V(1).Info("Upstream answer cut short", "slug", ep.Slug, "target", res.Target.Name)
	}
	// Whatever usage the upstream reported is charged, even when the relay to the client was cut short.
	u = res.Usage
	var inputCost int64
	c.cost, inputCost = callCost(&res)
	h.settle(ctx, plan, c, limits.Charge{Tokens: u.Total(), Cost: c.cost})
	h.opts.Metrics.tokens.WithLabelValues(c.workspace, c.entity, c.model, "input").Add(float64(u.PromptTokens))
	h.opts.Metrics.tokens.WithLabelValues(c.workspace, c.entity, c.model, "output").Add(float64(u.CompletionTokens))
	if c.cost > 0 {
		h.opts.Metrics.cost.WithLabelValues(c.workspace, c.entity, c.model, "input").Add(float64(inputCost))
		h.opts.Metrics.cost.WithLabelValues(c.workspace, c.entity, c.model, "output").Add(float64(c.cost - inputCost))
	}
}

// federatedPlan is the limit plan of a federated key's call of slug: its group's, with the key's tier limits on
// a shared model API. A slug outside the group's models is 404, as if it did not exist.
func federatedPlan(key *view.Key, slug string) (*limits.Plan, *httperr.Error) {
	model := key.Group.Models[slug]
	if model == nil {
		return nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist,
			"The model does not exist or this key may not call it.", "model: not in the key's group's models")
	}
	return key.PlanFor(model), nil
}

// workspacePlan decides whether a workspace key may call slug (authz.Decide, ActionInvoke; a model scope applies
// to the slug) and returns its model-API tier plan, nil when the Workspace sets no modelAPILimits. Endpoints
// belong to no team: they are the workspace's shared model API, which every team calls, so the resource is the
// key's own team and a team key is not hidden from it. A slug no Endpoint serves is 404, after the permission
// check, so a key scoped to some models learns nothing of the others.
func workspacePlan(ns *view.Namespace, caller *auth.Caller, slug string) (*limits.Plan, *httperr.Error) {
	p := caller.Principal()
	dec := authz.Decide(p, authz.ActionInvoke, authz.Resource{TeamID: p.KeyTeamID, ModelID: slug})
	if !dec.Allowed {
		if dec.Hidden {
			return nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist, "The model does not exist.", "model: "+slug)
		}
		return nil, httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason, map[string]any{"key_type": caller.Key.Type, "model": slug})
	}
	if ns == nil || ns.Endpoints[slug] == nil {
		return nil, httperr.New(http.StatusNotFound, httperr.CodeModelDoesNotExist,
			"The model does not exist or this key may not call it.", "model: no Endpoint serves this slug")
	}
	return ns.TierPlan(caller.Key.Prefix), nil
}

// presented reports whether r carries a credential long enough to be a key: only then is a miss worth holding.
func presented(r *http.Request) bool { return len(credential(r)) >= view.PrefixLen }

// credential is the credential r presents, whatever its scheme.
func credential(r *http.Request) string {
	_, cred := auth.Credentials(r)
	return cred
}
