package inference

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/failover"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// writeCallError answers an Endpoint call that failed: a body or route the target's provider cannot take is the
// client's 400 naming the provider and the route; an upstream failure is writeForwardError's.
func writeCallError(w http.ResponseWriter, r *http.Request, slug string, err error) {
	var us *provider.Unsupported
	var be *failover.BodyError
	var rf *provider.Refused
	switch {
	case errors.As(err, &rf):
		httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError, rf.Error(),
			map[string]any{"provider": rf.Provider, "field": rf.Field})
	case errors.As(err, &us):
		httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError,
			fmt.Sprintf("The %s provider does not serve %s.", us.Provider, us.Route), map[string]any{"provider": us.Provider, "route": us.Route})
	case errors.As(err, &be):
		httperr.WriteModelCall(w, http.StatusBadRequest, httperr.CodeClientError, "The request body must be a JSON object.", be.Err.Error())
	default:
		writeForwardError(w, r, slug, err)
	}
}

// writeForwardError answers a call whose upstream failed before answering, in the model-call errors of
// docs/rest-api.md ("Model-call errors"): 504 timeout, 502 model_unavailable, and a 499 recorded (not sent) when
// the client left.
func writeForwardError(w http.ResponseWriter, r *http.Request, name string, err error) {
	log := logr.FromContextOrDiscard(r.Context())
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		log.Error(err, "Upstream call failed", "target", name)
		httperr.WriteModelCall(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream unreachable")
		return
	}
	switch ue.Kind {
	case upstream.KindTimeout:
		httperr.WriteModelCall(w, http.StatusGatewayTimeout, httperr.CodeTimeout, "The model did not answer in time.", "timeout: "+ue.Timeout.String())
	case upstream.KindCanceled:
		// The client left; nobody reads an answer.
		w.WriteHeader(statusClientClosed)
	case upstream.KindStatus:
		status, code := upstreamStatus(ue.Status)
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			upstream.CopyRetryHeaders(w.Header(), ue.Header)
		}
		httperr.WriteModelCall(w, status, code, fmt.Sprintf("The model answered %d.", ue.Status),
			map[string]any{"upstream_status": ue.Status, "upstream_body": ue.Snippet})
	case upstream.KindCredentials:
		log.Error(ue.Err, "Failed to prepare the upstream call", "target", name)
		httperr.WriteModelCall(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream credentials unavailable")
	default:
		log.Error(ue.Err, "Upstream unreachable", "target", name)
		httperr.WriteModelCall(w, http.StatusBadGateway, httperr.CodeModelUnavailable, "The model is unavailable.", "upstream unreachable")
	}
}

// upstreamStatus maps an upstream's error status onto the model-call errors: a 4xx stays the client's, with its
// code; a 5xx is the model's, 503 and 504 as not ready and timeout, any other as unavailable (502).
func upstreamStatus(status int) (int, string) {
	switch {
	case status == http.StatusNotFound:
		return status, httperr.CodeModelDoesNotExist
	case status == http.StatusRequestEntityTooLarge:
		return status, httperr.CodePayloadTooLarge
	case status == http.StatusTooManyRequests:
		return status, httperr.CodeRateLimited
	case status < 500:
		return status, httperr.CodeClientError
	case status == http.StatusServiceUnavailable:
		return status, httperr.CodeModelNotReady
	case status == http.StatusGatewayTimeout:
		return status, httperr.CodeTimeout
	}
	return http.StatusBadGateway, httperr.CodeModelUnavailable
}
