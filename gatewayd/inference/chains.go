package inference

import (
	"net/http"
	"strconv"
	"time"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/route"
)

// runRemote serves the run_remote routes, which call the entrypoint chainlet of the chain deployment that the
// route names exactly as a predict call calls a model deployment: the body streams to the entrypoint's predict
// path unchanged, and so does the answer, with the callers, limits on body size and errors of a predict call.
func (h *Handler) runRemote(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	reqID := stampRequestID(sw, r)
	defer func() {
		h.opts.Metrics.requestDuration.WithLabelValues(r.Pattern, strconv.Itoa(sw.code())).Observe(time.Since(start).Seconds())
	}()
	caller, aerr := auth.Workspace(r, h.lookup)
	if aerr != nil {
		httperr.WriteModelCallError(sw, aerr)
		return
	}
	_, d, rerr := route.AuthorizeChainInvoke(caller, h.opts.View().Namespace(caller.Namespace), r.PathValue("chain_id"), route.Of(r))
	if rerr != nil {
		httperr.WriteModelCallError(sw, rerr)
		return
	}
	h.forwardPredict(sw, r, reqID, caller, d, environmentRoute{}, start)
}
