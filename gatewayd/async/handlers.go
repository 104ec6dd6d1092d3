package async

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/api/netguard"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Routes: async_predict (route.AsyncPredict) and async_queue_status (route.AsyncQueueStatus) under the four
// prefixes of the predict routes, async_run_remote (route.AsyncRunRemote) under those of run_remote; async_request
// is per model or chain.
const (
	RouteRequestStatus      = "GET /models/{model_id}/async_request/{request_id}"
	RouteRequestCancel      = "DELETE /models/{model_id}/async_request/{request_id}"
	RouteChainRequestStatus = "GET /chains/{chain_id}/async_request/{request_id}"
	RouteChainRequestCancel = "DELETE /chains/{chain_id}/async_request/{request_id}"
)

// Register adds the async routes to mux.
func (s *Service) Register(mux ingress.Mux) {
	route.AsyncPredict.Register(mux, s.asyncPredict)
	route.AsyncQueueStatus.Register(mux, s.queueStatus)
	mux.HandleFunc(RouteRequestStatus, s.requestStatus)
	mux.HandleFunc(RouteRequestCancel, s.requestCancel)
}

// RegisterChains adds the chain async routes to mux.
func (s *Service) RegisterChains(mux ingress.Mux) {
	route.AsyncRunRemote.Register(mux, s.asyncRunRemote)
	mux.HandleFunc(RouteChainRequestStatus, s.chainRequestStatus)
	mux.HandleFunc(RouteChainRequestCancel, s.chainRequestCancel)
}

// resolve authenticates r and finds the deployment its route names, as a predict call does; sel is which way
// the route named it.
func (s *Service) resolve(r *http.Request) (caller auth.Caller, sel route.Selector, m *snapshot.ServedModel, d *snapshot.Deployment, e *httperr.Error) {
	caller, e = auth.Workspace(r, s.lookup)
	if e != nil {
		return caller, sel, nil, nil, e
	}
	sel = route.Of(r)
	e = route.Resolve(r.Context(), s.opts.View(), s.opts.View, caller.Namespace, s.opts.CatchUp, func(v *view.View) (e *httperr.Error) {
		m, d, e = route.AuthorizeInvoke(caller, v.Namespace(caller.Namespace), r.PathValue("model_id"), sel)
		return e
	})
	return caller, sel, m, d, e
}

func (s *Service) asyncPredict(w http.ResponseWriter, r *http.Request) {
	caller, sel, m, d, e := s.resolve(r)
	if e != nil {
		httperr.WriteModelCallError(w, e)
		return
	}
	s.accept(w, r, caller, m.ID, d, sel.Environment)
}

// accept reads an async call's body and queues it for deployment d, under modelID (a chain's requests go under
// the modelID of its chainlet deployments), answering 201 {request_id}.
func (s *Service) accept(w http.ResponseWriter, r *http.Request, caller auth.Caller, modelID string, d *snapshot.Deployment, environment string) {
	if e := s.limitPredictCalls(r.Context(), caller); e != nil {
		httperr.WriteModelCallError(w, e)
		return
	}
	if e := ingress.Limit(w, r, MaxBodyBytes); e != nil {
		httperr.WriteModelCallError(w, e)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		httperr.WriteModelCallError(w, ingress.ReadFailed(err))
		return
	}
	body, ferr := ParseBody(b)
	if ferr != nil {
		httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError, "Invalid "+ferr.Field+": it "+ferr.Message+".", []httperr.FieldError{*ferr})
		return
	}
	var secret *snapshot.SecretRef
	if ns := s.opts.View().Namespace(caller.Namespace); ns != nil && ns.Snapshot != nil {
		secret = ns.Snapshot.Workspace.AsyncWebhookSecret
	}
	if body.WebhookEndpoint != "" {
		if err := netguard.CheckURL(body.WebhookEndpoint, s.opts.AllowInternalWebhooks); err != nil {
			fe := []httperr.FieldError{{Field: "webhook_endpoint", Message: err.Error()}}
			httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError, "Invalid webhook_endpoint: it "+err.Error()+".", fe)
			return
		}
		if secret == nil {
			fe := []httperr.FieldError{{Field: "webhook_endpoint", Message: "needs the workspace's signing secret: set Workspace spec.asyncWebhook.secretRef"}}
			httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError,
				"Invalid webhook_endpoint: results are signed with the workspace's asyncWebhook secret, and the Workspace sets none.", fe)
			return
		}
	}
	now := s.opts.Clock.Now().UTC()
	hook := queue.HookNone
	if body.WebhookEndpoint != "" {
		hook = queue.HookPending
	}
	req := &queue.Request{
		ID: ids.New(ids.AsyncRequest), Namespace: caller.Namespace, ModelID: modelID, DeploymentID: d.ID, Environment: environment,
		Input: body.ModelInput, Webhook: body.WebhookEndpoint, Priority: body.Priority,
		MaxTimeInQueueSeconds: body.MaxTimeInQueueSeconds, Retry: body.Retry,
		Status: queue.Queued, WebhookStatus: hook, CreatedAt: now, StatusAt: now, Errors: []queue.Error{},
	}
	req.Key, req.KeyCap = caller.Namespace+"/"+caller.Key.Prefix, s.opts.MaxQueuedPerKey
	if tr := s.opts.Tracer; tr.On() {
		ctx, span := tr.Start(tr.Extract(r.Context(), r.Header), "async accept", trace.SpanKindServer)
		defer span.End()
		span.SetAttributes(requestAttrs(req)...)
		span.SetAttributes(attribute.String(tracing.KeyPrefix, caller.Key.Prefix))
		req.TraceParent = tr.TraceParent(ctx)
	}
	claimed, err := s.enqueue(r.Context(), req, d)
	if errors.Is(err, queue.ErrKeyFull) {
		e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
			fmt.Sprintf("Too many async requests: a key may have at most %d queued or in progress; retry once some end.", s.opts.MaxQueuedPerKey),
			map[string]any{"limit": s.opts.MaxQueuedPerKey, "key_prefix": caller.Key.Prefix})
		e.RetryAfter = 1
		httperr.WriteModelCallError(w, e)
		return
	}
	if err != nil {
		s.opts.Logger.Error(err, "Failed to enqueue an async request", "namespace", caller.Namespace, "model", modelID)
		httperr.WriteModelCall(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The async queue is unavailable; retry shortly.", nil)
		return
	}
	s.metrics.accepted.WithLabelValues(caller.Namespace, d.ID).Inc()
	if !claimed {
		s.wake()
	}
	httperr.WriteJSON(w, http.StatusCreated, map[string]string{"request_id": req.ID})
}

// QueueStatus is the answer of async_queue_status.
type QueueStatus struct {
	ModelID               string `json:"model_id"`
	DeploymentID          string `json:"deployment_id"`
	NumQueuedRequests     int    `json:"num_queued_requests"`
	NumInProgressRequests int    `json:"num_in_progress_requests"`
}

func (s *Service) queueStatus(w http.ResponseWriter, r *http.Request) {
	caller, _, m, d, e := s.resolve(r)
	if e != nil {
		httperr.WriteModelCallError(w, e)
		return
	}
	queued, running, err := s.opts.Store.Depth(r.Context(), queue.QueueOf(caller.Namespace, d.ID))
	if err != nil {
		httperr.WriteModelCall(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The async queue is unavailable; retry shortly.", nil)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, QueueStatus{ModelID: m.ID, DeploymentID: d.ID, NumQueuedRequests: queued, NumInProgressRequests: running})
}

// Status is the async request status object (docs/rest-api.md "Async inference"): a model's request names its
// model_id; a chain's its chain_id instead, and the chain deployment as deployment_id.
type Status struct {
	RequestID     string        `json:"request_id"`
	ModelID       string        `json:"model_id,omitempty"`
	ChainID       string        `json:"chain_id,omitempty"`
	DeploymentID  string        `json:"deployment_id"`
	Status        string        `json:"status"`
	WebhookStatus string        `json:"webhook_status"`
	CreatedAt     time.Time     `json:"created_at"`
	StatusAt      time.Time     `json:"status_at"`
	Errors        []queue.Error `json:"errors"`
}

func statusOf(q *queue.Request) Status {
	errs := q.Errors
	if errs == nil {
		errs = []queue.Error{}
	}
	return Status{RequestID: q.ID, ModelID: q.ModelID, DeploymentID: q.DeploymentID, Status: q.Status,
		WebhookStatus: q.WebhookStatus, CreatedAt: q.CreatedAt.UTC(), StatusAt: q.StatusAt.UTC(), Errors: errs}
}

// request authenticates a status or cancel call, applies the per-key limit, and finds the request: 404 when
// it does not exist, belongs to another workspace or model, or the caller may not see that model; 403 when the
// caller may not invoke it.
func (s *Service) request(w http.ResponseWriter, r *http.Request) (*queue.Request, bool) {
	modelID := r.PathValue("model_id")
	return s.requestOf(w, r, modelID, "No async request of this model has this id.", func(caller auth.Caller, q *queue.Request) *httperr.Error {
		if _, chain := gatewayv1.ChainOfModelID(modelID); chain {
			// A chain's requests are read at the chain's route, which names the chain in its answer.
			return httperr.New(http.StatusNotFound, httperr.CodeNotFound, "No async request of this model has this id.", "request_id: "+q.ID)
		}
		teamID := ""
		if ns := s.opts.View().Namespace(caller.Namespace); ns != nil && ns.Models[modelID] != nil {
			teamID = ns.Models[modelID].TeamID
		}
		return route.MayInvoke(caller, modelID, teamID, q.Environment)
	})
}

// requestOf is request for the requests queued under modelID, which authorize lets the caller read or cancel.
func (s *Service) requestOf(w http.ResponseWriter, r *http.Request, modelID, notFoundMessage string,
	authorize func(auth.Caller, *queue.Request) *httperr.Error) (*queue.Request, bool) {
	caller, aerr := auth.Workspace(r, s.lookup)
	if aerr != nil {
		httperr.WriteModelCallError(w, aerr)
		return nil, false
	}
	if e := s.limitRequestCalls(r.Context(), caller, r.Method); e != nil {
		httperr.WriteModelCallError(w, e)
		return nil, false
	}
	id := r.PathValue("request_id")
	notFound := httperr.New(http.StatusNotFound, httperr.CodeNotFound, notFoundMessage, "request_id: "+id)
	q, err := s.opts.Store.Get(r.Context(), id)
	switch {
	case errors.Is(err, queue.ErrNotFound):
		httperr.WriteModelCallError(w, notFound)
		return nil, false
	case err != nil:
		httperr.WriteModelCall(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The async queue is unavailable; retry shortly.", nil)
		return nil, false
	}
	if q.Namespace != caller.Namespace || q.ModelID != modelID {
		httperr.WriteModelCallError(w, notFound)
		return nil, false
	}
	if e := authorize(caller, q); e != nil {
		httperr.WriteModelCallError(w, e)
		return nil, false
	}
	return q, true
}

// limitRequestCalls charges one call of the caller's key to the budget of its method, each over a rolling second
// and counted apart, so a burst of status polls never blocks a cancel: GET (status) to StatusCallsPerSecond,
// DELETE (cancel) to CancelCallsPerSecond.
func (s *Service) limitRequestCalls(ctx context.Context, c auth.Caller, method string) *httperr.Error {
	if method == http.MethodDelete {
		return s.limitKey(ctx, c, "async_request_cancel", CancelCallsPerSecond,
			fmt.Sprintf("Rate limit exceeded: at most %d async request cancel calls per second per key.", CancelCallsPerSecond))
	}
	return s.limitKey(ctx, c, "async_request", StatusCallsPerSecond,
		fmt.Sprintf("Rate limit exceeded: at most %d async request status calls per second per key.", StatusCallsPerSecond))
}

// limitPredictCalls charges one async_predict call of the caller's key to its budget: PredictPerSecond over a
// rolling second.
func (s *Service) limitPredictCalls(ctx context.Context, c auth.Caller) *httperr.Error {
	return s.limitKey(ctx, c, "async_predict", s.opts.PredictPerSecond,
		fmt.Sprintf("Rate limit exceeded: at most %d async_predict calls per second per key.", s.opts.PredictPerSecond))
}

// limitKey charges one call of the caller's key to the budget of route: perSecond over a rolling second, in the
// limit store, so every replica shares it when the store is Redis. Past it, 429 with Retry-After and message.
func (s *Service) limitKey(ctx context.Context, c auth.Caller, route string, perSecond int, message string) *httperr.Error {
	key := c.Namespace + "/" + c.Key.Prefix + "/" + route
	p, ok := s.plans.Load(key)
	if !ok {
		plan := &limits.Plan{Limits: []limits.Limit{{
			Key:       limits.BucketKey{Namespace: c.Namespace, Group: "workspace-key:" + c.Key.Prefix, Slug: route, Type: limits.Request, Unit: limits.Second},
			Threshold: int64(perSecond), SourceGroup: "",
		}}}
		if err := s.opts.Limits.Bind(plan); err != nil {
			return httperr.New(http.StatusServiceUnavailable, httperr.CodeLimitsUnavailable, "Limits could not be checked; retry shortly.", nil)
		}
		p, _ = s.plans.LoadOrStore(key, plan)
	}
	res, err := s.opts.Limits.Admit(ctx, p.(*limits.Plan), s.opts.Clock.Now())
	if err != nil {
		return httperr.New(http.StatusServiceUnavailable, httperr.CodeLimitsUnavailable, "Limits could not be checked; retry shortly.", nil)
	}
	if res.Allowed {
		return nil
	}
	e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited, message,
		map[string]any{"limit": perSecond, "unit": "SECOND", "key_prefix": c.Key.Prefix})
	e.RetryAfter = int64(math.Max(1, math.Ceil(res.RetryAfter.Seconds())))
	return e
}

func (s *Service) requestStatus(w http.ResponseWriter, r *http.Request) {
	q, ok := s.request(w, r)
	if !ok {
		return
	}
	httperr.WriteJSON(w, http.StatusOK, statusOf(q))
}

// CancelResult is the answer of DELETE async_request.
type CancelResult struct {
	RequestID string `json:"request_id"`
	Canceled  bool   `json:"canceled"`
	Message   string `json:"message"`
}

func (s *Service) requestCancel(w http.ResponseWriter, r *http.Request) {
	q, ok := s.request(w, r)
	if !ok {
		return
	}
	s.cancel(w, r, q)
}

// cancel cancels q if it is still QUEUED, and answers {request_id, canceled, message}.
func (s *Service) cancel(w http.ResponseWriter, r *http.Request, q *queue.Request) {
	got, canceled, err := s.opts.Store.Cancel(r.Context(), q.ID, s.opts.Clock.Now().UTC())
	if err != nil {
		httperr.WriteModelCall(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The async queue is unavailable; retry shortly.", nil)
		return
	}
	res := CancelResult{RequestID: q.ID, Canceled: canceled, Message: "The request was canceled."}
	if canceled {
		s.metrics.canceled.Inc()
	} else {
		res.Message = "Only a QUEUED request can be canceled; this one is " + got.Status + "."
	}
	httperr.WriteJSON(w, http.StatusOK, res)
}
