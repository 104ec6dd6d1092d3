package inference

import (
	"net/http"
	"strconv"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// callLabels are the workspace and model of a model call's series.
type callLabels struct{ workspace, model string }

// wake serves the wake routes: the caller must be allowed to invoke the model, as for predict. It answers 202
// with {} once the wake is asked (the manager then scales the deployment to at least one replica), also when the
// deployment is running already. A url deployment has no replicas to start: its wake is a no-op, still 202.
// Any body is ignored.
func (h *Handler) wake(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	// A label value only once the caller may see the model, so callers cannot mint series.
	var lbl callLabels
	defer func() {
		code := strconv.Itoa(sw.code())
		h.opts.Metrics.requestDuration.WithLabelValues(r.Pattern, code).Observe(time.Since(start).Seconds())
		if lbl.model != "" {
			h.opts.Metrics.requests.WithLabelValues(lbl.workspace, "", lbl.model, code).Inc()
		}
	}()
	caller, aerr := auth.Workspace(r, h.heldLookup)
	if aerr != nil {
		httperr.WriteModelCallError(sw, aerr)
		return
	}
	var m *snapshot.ServedModel
	var d *snapshot.Deployment
	rerr := route.Resolve(r.Context(), h.opts.View(), h.opts.View, caller.Namespace, h.opts.CatchUp, func(v *view.View) (e *httperr.Error) {
		m, d, e = route.AuthorizeInvoke(caller, v.Namespace(caller.Namespace), r.PathValue("model_id"), route.Of(r))
		return e
	})
	if rerr != nil {
		httperr.WriteModelCallError(sw, rerr)
		return
	}
	lbl = callLabels{workspace: caller.Namespace, model: m.ID}
	if d.Kind == snapshot.DeploymentService && h.opts.Waker != nil {
		// The Waker logs a failed patch once for every caller that shares it.
		if err := h.opts.Waker.Wake(r.Context(), route.WakeTarget(caller.Namespace, d)); err != nil {
			if r.Context().Err() != nil {
				sw.WriteHeader(statusClientClosed)
				return
			}
			e := httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady, "The wake could not be requested; retry shortly.", "deployment_id: "+d.ID)
			e.RetryAfter = 1
			httperr.WriteModelCallError(sw, e)
			return
		}
	}
	sw.Header().Set("Content-Type", "application/json")
	sw.WriteHeader(http.StatusAccepted)
	_, _ = sw.Write([]byte("{}"))
}
