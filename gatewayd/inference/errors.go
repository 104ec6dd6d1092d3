package inference

import (
	"errors"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// writeForwardError answers a call whose upstream failed before answering, in the model-call errors of
// DESIGN.md: 504 timeout, 502 model_unavailable, and a 499 recorded (not sent) when the client left.
func writeForwardError(w http.ResponseWriter, r *http.Request, name string, err error) {
	log := logr.FromContextOrDiscard(r.Context())
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		log.Error(err, "Upstream call failed", "target", name)
		httperr.Write(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream unreachable")
		return
	}
	switch ue.Kind {
	case upstream.KindTimeout:
		httperr.Write(w, http.StatusGatewayTimeout, httperr.CodeTimeout, "The model did not answer in time.", "timeout: "+ue.Timeout.String())
	case upstream.KindCanceled:
		// The client left; nobody reads an answer.
		w.WriteHeader(statusClientClosed)
	case upstream.KindCredentials:
		log.Error(ue.Err, "Failed to prepare the upstream call", "target", name)
		httperr.Write(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream credentials unavailable")
	default:
		log.Error(ue.Err, "Upstream unreachable", "target", name)
		httperr.Write(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream unreachable")
	}
}
