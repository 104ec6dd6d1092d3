package inference

import (
	"net/http"
	"strconv"
	"time"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// predict serves POST /models/{model_id}/production/predict for workspace keys. The body (JSON, octet-stream or
// multipart) is streamed through unchanged with its Content-Type, and so is the answer.
func (h *Handler) predict(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		h.opts.Metrics.requestDuration.WithLabelValues("/models/{model_id}/production/predict", strconv.Itoa(sw.code())).
			Observe(time.Since(start).Seconds())
	}()
	caller, aerr := auth.Workspace(r, h.workspaceLookup())
	if aerr != nil {
		httperr.WriteError(sw, aerr)
		return
	}
	if !caller.MayInvoke() {
		httperr.Write(sw, http.StatusForbidden, httperr.CodeForbidden,
			"This workspace key type cannot call models: use a WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE or PERSONAL key.", "type: "+caller.Key.Type)
		return
	}
	modelID := r.PathValue("model_id")
	if !caller.MayCallModel(modelID) {
		httperr.Write(sw, http.StatusForbidden, httperr.CodeForbidden, "This key is not scoped to the model.", "model_id: "+modelID)
		return
	}
	target, rerr := routePredict(h.opts.View().Namespace(caller.Namespace), modelID)
	if rerr != nil {
		httperr.WriteError(sw, rerr)
		return
	}
	header := http.Header{}
	for _, name := range []string{"Content-Type", "Accept"} {
		if val := r.Header.Get(name); val != "" {
			header.Set(name, val)
		}
	}
	// The body streams to the model as it arrives; bound how long that may take.
	_ = http.NewResponseController(sw).SetReadDeadline(time.Now().Add(h.opts.BodyReadTimeout))
	_, err := h.opts.Upstream.Forward(r.Context(), upstream.Request{
		Target: target, Body: http.MaxBytesReader(sw, r.Body, h.opts.MaxBodyBytes), ContentLength: r.ContentLength, Header: header,
	}, sw)
	if err != nil {
		writeForwardError(sw, r, target.Name, err)
	}
}
