package gatewayd

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
)

// Workspace key types that may call models (SPEC.md "Authentication").
var invokeTypes = []string{"WORKSPACE_MANAGE_ALL", "WORKSPACE_INVOKE", "PERSONAL"}

// predict serves POST /models/{model_id}/production/predict for workspace keys. Until Model objects with
// environments exist, the minimal mapping is: model_id is the slug of an Endpoint in the key's workspace, and
// the call goes to that Endpoint's target at baseURL + "/predict". The body (JSON, octet-stream or multipart)
// is streamed through unchanged with its Content-Type.
func (g *Gateway) predict(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		g.metrics.requestDuration.WithLabelValues("/models/{model_id}/production/predict", strconv.Itoa(sw.code())).
			Observe(time.Since(start).Seconds())
	}()
	log := logr.FromContextOrDiscard(r.Context())
	v := g.loader.View()
	scheme, cred := credentials(r)
	if scheme != "bearer" && scheme != "api-key" {
		writeError(sw, http.StatusUnauthorized, codeUnauthorized,
			"Missing workspace API key: send 'Authorization: Bearer <key>' or 'Authorization: Api-Key <key>'.", "")
		return
	}
	key := v.LookupWorkspaceKey(cred)
	if key == nil {
		writeError(sw, http.StatusUnauthorized, codeUnauthorized, "Invalid API key.", "")
		return
	}
	if !slices.Contains(invokeTypes, key.Type) {
		writeError(sw, http.StatusForbidden, codeForbidden,
			"This workspace key type cannot call models: use a WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE or PERSONAL key.", "type: "+key.Type)
		return
	}
	modelID := r.PathValue("model_id")
	if len(key.Models) > 0 && !slices.Contains(key.Models, modelID) {
		writeError(sw, http.StatusForbidden, codeForbidden, "This key is not scoped to the model.", "model_id: "+modelID)
		return
	}
	ns := v.Namespace(key.Namespace)
	ep := ns.Endpoints[modelID]
	if ep == nil {
		writeError(sw, http.StatusNotFound, codeModelDoesNotExist, "The model does not exist.", "model_id: "+modelID)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	d := newDeadline(g.timeoutOf(ep), cancel)
	defer d.timer.Stop()
	req, err := g.upstreamRequest(ctx, key.Namespace, ep, "/predict", http.MaxBytesReader(sw, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		log.Error(err, "Failed to prepare the upstream call", "model", modelID)
		writeError(sw, http.StatusBadGateway, codeModelUnavailable, "The model is unavailable.", "upstream credentials unavailable")
		return
	}
	req.ContentLength = r.ContentLength
	for _, h := range []string{"Content-Type", "Accept"} {
		if val := r.Header.Get(h); val != "" {
			req.Header.Set(h, val)
		}
	}
	resp := g.do(sw, r, req, d, ep.Slug)
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		sw.Header().Set("Content-Type", ct)
	}
	sw.WriteHeader(resp.StatusCode)
	_, _ = copyAnswer(sw, resp.Body)
}
