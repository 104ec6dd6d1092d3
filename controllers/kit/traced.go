package kit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/tracing"
)

// Traced gives each reconcile of Kind a span (docs/operations.md "Traces"): the object's namespace and name, the
// reconcile's id, whether it asked to run again, and its error. A propagation that takes long shows which
// reconcile of which object it waited for. With a nil Tracer it is the wrapped reconciler alone.
type Traced struct {
	reconcile.Reconciler
	Tracer *tracing.Tracer
	Kind   string
}

// Reconcile runs the wrapped reconciler under a span.
func (t Traced) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !t.Tracer.On() {
		return t.Reconciler.Reconcile(ctx, req)
	}
	ctx, span := t.Tracer.Start(ctx, "reconcile "+t.Kind, trace.SpanKindInternal, trace.WithAttributes(
		attribute.String("modelgate.kind", t.Kind),
		attribute.String("k8s.namespace.name", req.Namespace),
		attribute.String("modelgate.object.name", req.Name),
		attribute.String("modelgate.reconcile_id", string(controller.ReconcileIDFromContext(ctx))),
	))
	defer span.End()
	res, err := t.Reconciler.Reconcile(ctx, req)
	span.SetAttributes(attribute.Bool("modelgate.requeue", res.RequeueAfter > 0 || res.Requeue)) //nolint:staticcheck // Requeue is still what RequeueOnConflict returns
	if err != nil {
		span.RecordError(err)
		tracing.Fail(span, "the reconcile failed")
	}
	return res, err
}

// Trace wraps r in a span per reconcile of kind when tr traces, and returns r itself otherwise.
func Trace(tr *tracing.Tracer, kind string, r reconcile.Reconciler) reconcile.Reconciler {
	if !tr.On() {
		return r
	}
	return Traced{Reconciler: r, Tracer: tr, Kind: kind}
}
