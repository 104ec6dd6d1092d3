package async

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
)

// requestAttrs are the attributes every span of an async request carries: its id, workspace, model and
// deployment. Never its input, its output or its webhook URL, which may carry a token.
func requestAttrs(r *queue.Request) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(tracing.AsyncRequest, r.ID),
		attribute.String(tracing.Workspace, r.Namespace),
		attribute.String(tracing.RequestModel, r.ModelID),
		attribute.String(tracing.Deployment, r.DeploymentID),
	}
}

// startDispatch records r's wait in the queue as a span that ends now (from its acceptance, or from when a retry
// put it back), and starts the span of the attempt that follows, both under the span that accepted r. With
// tracing off, ctx and a span that records nothing.
func (s *Service) startDispatch(ctx context.Context, r *queue.Request) (context.Context, trace.Span) {
	tr := s.opts.Tracer
	if !tr.On() || r.TraceParent == "" {
		return ctx, tracing.Idle()
	}
	parent := tr.FromTraceParent(ctx, r.TraceParent)
	queued := r.CreatedAt
	if r.Attempts > 0 && !r.NotBefore.IsZero() {
		queued = r.NotBefore
	}
	attrs := append(requestAttrs(r), attribute.Int(tracing.Attempt, r.Attempts+1))
	_, wait := tr.Start(parent, "async queued", trace.SpanKindInternal, trace.WithTimestamp(queued), trace.WithAttributes(attrs...))
	wait.End()
	return tr.Start(parent, "async dispatch", trace.SpanKindClient, trace.WithAttributes(attrs...))
}

// endDispatch ends an attempt's span with the deployment's status, or the error when it gave none.
func endDispatch(span trace.Span, status int, err error) {
	if span.IsRecording() {
		if status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if err != nil || status >= http.StatusInternalServerError {
			span.SetAttributes(attribute.String("error.type", dispatchError(status)))
			tracing.Fail(span, "the attempt failed")
		}
	}
	span.End()
}

// dispatchError is the error.type of a failed attempt: its status, or "unanswered".
func dispatchError(status int) string {
	if status == 0 {
		return "unanswered"
	}
	return strconv.Itoa(status)
}

// startDelivery starts the span of one webhook delivery of r's result, under the span that accepted r: the
// webhook's host is on it, never its path or query.
func (s *Service) startDelivery(ctx context.Context, r *queue.Request) (context.Context, trace.Span) {
	tr := s.opts.Tracer
	if !tr.On() || r.TraceParent == "" {
		return ctx, tracing.Idle()
	}
	attrs := append(requestAttrs(r), attribute.Int(tracing.Attempt, r.WebhookAttempts+1))
	if u, err := url.Parse(r.Webhook); err == nil {
		attrs = append(attrs, attribute.String("server.address", u.Hostname()))
	}
	return tr.Start(tr.FromTraceParent(ctx, r.TraceParent), "async webhook", trace.SpanKindClient, trace.WithAttributes(attrs...))
}

// endDelivery ends a delivery's span with its outcome (delivered, failed, gave_up) and the failure's reason,
// which never holds the URL (reason).
func endDelivery(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("modelgate.webhook.outcome", outcome))
		if err != nil {
			tracing.Fail(span, reason(err))
		}
	}
	span.End()
}
