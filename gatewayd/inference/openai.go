package inference

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// call is the bookkeeping of one model call, for metrics and billing.
type call struct {
	workspace, entity, model string
}

// openAI serves one OpenAI route for federated keys: suffix is appended to the Endpoint's base URL.
func (h *Handler) openAI(suffix string) http.Handler {
	route := "/v1" + suffix
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		c := &call{}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := strconv.Itoa(sw.code())
			h.opts.Metrics.requests.WithLabelValues(c.workspace, c.entity, c.model, code).Inc()
			h.opts.Metrics.requestDuration.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
		}()
		h.serveOpenAI(sw, r, suffix, c)
	})
}

func (h *Handler) serveOpenAI(w *statusWriter, r *http.Request, suffix string, c *call) {
	ctx := r.Context()
	log := logr.FromContextOrDiscard(ctx)
	v := h.opts.View()
	key, aerr := auth.Federated(r, v)
	if aerr != nil {
		httperr.WriteError(w, aerr)
		return
	}
	c.workspace, c.entity = key.Group.Namespace, key.Group.ExternalEntityID
	var u upstream.Usage
	if h.opts.Billing != nil {
		w.Header().Set("X-Request-Id", billingRequestID())
		defer func() { h.recordBilling(key, c, w, u) }()
	}
	slot, size := key.Group.Namespace+"/"+key.Prefix, h.opts.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength
	}
	if !h.inflight.acquire(slot, size) {
		e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
			fmt.Sprintf("Too many request bytes in flight for this key: at most %d at once.", h.opts.MaxInFlightBytesPerKey),
			map[string]any{"max_in_flight_bytes": h.opts.MaxInFlightBytesPerKey})
		e.RetryAfter = 1
		httperr.WriteError(w, e)
		return
	}
	defer h.inflight.release(slot, size)
	body, berr := h.readBody(w, r)
	if berr != nil {
		httperr.WriteError(w, berr)
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		httperr.Write(w, http.StatusBadRequest, httperr.CodeClientError, "The request body must be a JSON object.", err.Error())
		return
	}
	model := key.Group.Models[req.Model]
	if model == nil {
		httperr.Write(w, http.StatusNotFound, httperr.CodeModelDoesNotExist,
			"The model does not exist or this key may not call it.", "model: not in the key's group's models")
		return
	}
	c.model = model.Slug
	route, rerr := routeSlug(v.Namespace(key.Group.Namespace), model.Slug, suffix)
	if rerr != nil {
		httperr.WriteError(w, rerr)
		return
	}
	target := route.target
	out, err := rewriteBody(body, route.targetModel, req.Stream)
	if err != nil {
		httperr.Write(w, http.StatusBadRequest, httperr.CodeClientError, "The request body must be a JSON object.", err.Error())
		return
	}
	if lerr := h.admit(ctx, model); lerr != nil {
		httperr.WriteError(w, lerr)
		return
	}
	header := http.Header{"Content-Type": {"application/json"}}
	if a := r.Header.Get("Accept"); a != "" {
		header.Set("Accept", a)
	}
	res, err := h.opts.Upstream.Forward(ctx, upstream.Request{
		Target: target, Body: bytes.NewReader(out), ContentLength: int64(len(out)), Header: header,
		Stream: req.Stream, StreamUsage: req.wantsUsage(), Usage: true,
	}, w)
	if err != nil {
		writeForwardError(w, r, target.Name, err)
		return
	}
	h.opts.Metrics.upstream.WithLabelValues(c.workspace, target.Name).Observe(res.Duration.Seconds())
	if !res.Complete {
		log.V(1).Info("Upstream answer cut short", "slug", target.Name)
	}
	// Whatever usage the upstream reported is charged, even when the relay to the client was cut short.
	u = res.Usage
	if n := u.Total(); n > 0 {
		if err := h.opts.Limits.Settle(context.WithoutCancel(ctx), model.Plan, n, h.opts.Clock.Now()); err != nil {
			log.Error(err, "Failed to charge tokens", "group", key.Group.ID, "slug", model.Slug, "prefix", key.Prefix)
		}
	}
	h.opts.Metrics.tokens.WithLabelValues(c.workspace, c.entity, c.model, "input").Add(float64(u.PromptTokens))
	h.opts.Metrics.tokens.WithLabelValues(c.workspace, c.entity, c.model, "output").Add(float64(u.CompletionTokens))
}
