package inference

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// predict serves the predict routes for workspace keys. The body (JSON, octet-stream or multipart) is streamed
// through unchanged with its Content-Type, and so is the answer. A call to a deployment with no ready address is
// held (hold.go) until one is ready, then forwarded the same way.
func (h *Handler) predict(w http.ResponseWriter, r *http.Request) { h.callDeployment(w, r, false) }

// runRemote serves the run_remote routes, which call the entrypoint chainlet of the chain deployment that the
// route names exactly as predict calls a model deployment.
func (h *Handler) runRemote(w http.ResponseWriter, r *http.Request) { h.callDeployment(w, r, true) }

// callDeployment serves a call to the deployment that r's route names: of a model, or the entrypoint of a chain's.
func (h *Handler) callDeployment(w http.ResponseWriter, r *http.Request, chain bool) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	reqID := stampRequestID(sw, r)
	workspace, model := "", ""
	var caller auth.Caller
	var d *snapshot.Deployment
	// The call's server span, under the client's traceparent; with tracing off it records nothing and allocates
	// nothing (docs/operations.md "Traces").
	tr := h.opts.Tracer
	op := "predict"
	if chain {
		op = "run_remote"
	}
	ctx, span := tr.Start(tr.Extract(r.Context(), r.Header), op, trace.SpanKindServer)
	defer func() {
		code := strconv.Itoa(sw.code())
		h.opts.Metrics.requestDuration.WithLabelValues(r.Pattern, code).Observe(time.Since(start).Seconds())
		if model != "" {
			h.opts.Metrics.requests.WithLabelValues(workspace, "", model, code).Inc()
		}
		if span.IsRecording() {
			endDeploymentCall(span, caller.Namespace, model, caller.Key.Prefix, reqID, d, sw.code())
		}
		span.End()
	}()
	caller, aerr := auth.Workspace(r, h.heldLookup)
	if aerr != nil {
		httperr.WriteModelCallError(sw, aerr)
		return
	}
	sel := route.Of(r)
	var env environmentRoute
	rerr := route.Resolve(r.Context(), h.opts.View(), h.opts.View, caller.Namespace, h.opts.CatchUp, func(v *view.View) (e *httperr.Error) {
		ns := v.Namespace(caller.Namespace)
		if chain {
			_, d, e = route.AuthorizeChainInvoke(caller, ns, r.PathValue("chain_id"), sel)
			return e
		}
		var m *snapshot.ServedModel
		m, d, e = route.AuthorizeInvoke(caller, ns, r.PathValue("model_id"), sel)
		if m != nil {
			// A label value only once the snapshot knows the model and the caller may see it, so callers cannot
			// mint series.
			workspace, model = caller.Namespace, m.ID
			// A held call follows its environment: a promotion while it waits moves it to the deployment promoted.
			env = environmentRoute{modelID: m.ID, environment: sel.Environment}
		}
		return e
	})
	if rerr != nil {
		httperr.WriteModelCallError(sw, rerr)
		return
	}
	h.forwardPredict(ctx, sw, r, reqID, caller, d, env, start)
}

// endDeploymentCall writes what a call of a deployment did on its server span: the caller's workspace, the model
// (its id, as an async request's spans name it) and the deployment once the route resolved them, the caller's key
// prefix, the request id and the status; never the key, a header or the body.
func endDeploymentCall(span trace.Span, workspace, model, prefix, reqID string, d *snapshot.Deployment, status int) {
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", status), attribute.String(tracing.RequestID, reqID)}
	for _, kv := range [][2]string{{tracing.Workspace, workspace}, {tracing.RequestModel, model}, {tracing.KeyPrefix, prefix}} {
		if kv[1] != "" {
			attrs = append(attrs, attribute.String(kv[0], kv[1]))
		}
	}
	if d != nil {
		attrs = append(attrs, attribute.String(tracing.Deployment, d.ID))
	}
	span.SetAttributes(attrs...)
	if status >= http.StatusInternalServerError {
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		tracing.Fail(span, http.StatusText(status))
	}
}

// environmentRoute is the environment of a model that a predict call names; the zero value names none (a route
// that names a deployment id, or a chain's entrypoint).
type environmentRoute struct{ modelID, environment string }

// resolve is the deployment env points at in the view in force, for caller; nil when none or when caller may
// no longer invoke it.
func (h *Handler) resolve(caller auth.Caller, env environmentRoute) *snapshot.Deployment {
	if env.environment == "" {
		return nil
	}
	_, d, rerr := route.AuthorizeInvoke(caller, h.opts.View().Namespace(caller.Namespace), env.modelID, route.Selector{Environment: env.environment})
	if rerr != nil {
		return nil
	}
	return d
}

// forwardPredict forwards r to the predict path of deployment d and streams the answer through sw, for every route
// that calls a deployment (predict, run_remote): a call to a deployment with no ready address is held (hold.go)
// until one is ready, then forwarded the same way. A held call whose route names an environment moves when a new
// view points that environment elsewhere. A body that does not arrive whole is answered by ingress.ReadFailed
// (413 past the cap, 408 past its deadline), never by the model's answer: a small body is read before the model
// is called, a larger one fails the model call it streams into.
func (h *Handler) forwardPredict(ctx context.Context, sw *statusWriter, r *http.Request, reqID string, caller auth.Caller, d *snapshot.Deployment, env environmentRoute, start time.Time) {
	if e := ingress.Limit(sw, r, h.opts.MaxBodyBytes); e != nil {
		httperr.WriteModelCallError(sw, e)
		return
	}
	// Demand for the autoscaler at once, held calls included; a held call that moves counts for its new
	// deployment. The call takes one of the deployment's async slots only once its body is in hand.
	var mu sync.Mutex
	call, inHand := h.opts.Concurrency.BeginCall(caller.Namespace, d.ID), false
	defer func() { mu.Lock(); call.Done(); mu.Unlock() }()
	defer func() { h.logPredict(sw, r, reqID, caller.Namespace, d.ID, start) }()
	rc := http.NewResponseController(sw)
	client := &clientBody{r: r.Body, left: r.ContentLength, whole: func() { mu.Lock(); inHand = true; call.InHand(); mu.Unlock() }}
	var body io.Reader = client
	target, release, rerr := route.Deployment(caller.Namespace, d, h.opts.Addresses)
	if rerr != nil && h.holds(d) {
		var held *heldBody
		moved := func(to *snapshot.Deployment) {
			mu.Lock()
			defer mu.Unlock()
			call.Done()
			d, call = to, h.opts.Concurrency.BeginCall(caller.Namespace, to.ID)
			if inHand {
				call.InHand()
			}
		}
		target, release, held, rerr = h.hold(sw, r, caller, d, body, env, moved)
		if held != nil {
			defer held.stop(rc)
			body = held
		}
	}
	if err := client.failed(); rerr != nil && err != nil {
		// The body's read failed (past its deadline, a read cancels the call's context too): that is the answer.
		rerr = ingress.ReadFailed(err)
	}
	if rerr == errClientGone {
		// Nobody reads an answer: record 499, send nothing.
		sw.WriteHeader(statusClientClosed)
		return
	}
	if rerr != nil {
		httperr.WriteModelCallError(sw, rerr)
		return
	}
	defer release()
	header := http.Header{}
	for _, name := range []string{"Content-Type", "Accept"} {
		if val := r.Header.Get(name); val != "" {
			header.Set(name, val)
		}
	}
	header.Set(requestlog.Header, reqID)
	// The model server joins the call's trace.
	h.opts.Tracer.Inject(ctx, header)
	fwd, err := predictBody(body, r.ContentLength)
	if err != nil {
		httperr.WriteModelCallError(sw, ingress.ReadFailed(err))
		return
	}
	_, err = h.opts.Upstream.Forward(ctx, upstream.Request{
		Target: target, Body: fwd, ContentLength: r.ContentLength, Header: header,
	}, sw)
	if ferr := client.failed(); ferr != nil && (err != nil || sw.status == 0) {
		// The model call failed, or sent nothing, because the body did not arrive: the body's failure is the answer.
		httperr.WriteModelCallError(sw, ingress.ReadFailed(ferr))
		return
	}
	if err != nil {
		writeForwardError(sw, r, target.Name, err)
	}
}

// clientBody is a predict call's body as the client sends it: it remembers the first read failure, and calls
// whole once the body has arrived to its end (EOF, or its declared length).
type clientBody struct {
	r     io.Reader
	left  int64
	whole func()
	mu    sync.Mutex
	err   error
	done  bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.mu.Lock()
	if b.left >= 0 {
		b.left -= int64(n)
	}
	end := !b.done && (err == io.EOF || (b.left == 0 && err == nil))
	b.done = b.done || end
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	if end {
		b.whole()
	}
	return n, err
}

// failed is the first read failure of the body, nil when none.
func (b *clientBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
