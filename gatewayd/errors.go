package gatewayd

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/view"
)

// Error codes of model calls (DESIGN.md "REST API decisions").
const (
	codeClientError        = "client_error"
	codeUnauthorized       = "unauthorized"
	codeForbidden          = "forbidden"
	codeModelDoesNotExist  = "model_does_not_exist"
	codeRateLimited        = "rate_limited"
	codeUsageLimitExceeded = "usage_limit_exceeded"
	codeModelUnavailable   = "model_unavailable"
	codeModelNotReady      = "model_not_ready"
	codeTimeout            = "timeout"
	codeTooLarge           = "request_too_large"
	codeInternal           = "internal_error"
)

// errorBody is the error envelope of every gatewayd answer.
type errorBody struct {
	Error     string `json:"error"`
	ErrorCode string `json:"error_code"`
	Detail    any    `json:"detail"`
}

func writeError(w http.ResponseWriter, status int, code, msg string, detail any) {
	if detail == nil {
		detail = ""
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: msg, ErrorCode: code, Detail: detail})
}

// credentials splits the Authorization header into its scheme (lowercased) and credential.
func credentials(r *http.Request) (scheme, cred string) {
	h := r.Header.Get("Authorization")
	scheme, cred, _ = strings.Cut(strings.TrimSpace(h), " ")
	return strings.ToLower(scheme), strings.TrimSpace(cred)
}

const apiKeyHint = "send 'Authorization: Api-Key <key>'"

// federatedKey authenticates a federated key, or writes the 401 and returns nil.
func federatedKey(w http.ResponseWriter, r *http.Request, v *view.View) *view.Key {
	scheme, cred := credentials(r)
	switch {
	case scheme == "":
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "Missing API key: "+apiKeyHint+".", "")
	case scheme == "bearer":
		writeError(w, http.StatusUnauthorized, codeUnauthorized,
			"Federated API keys use the Api-Key scheme, not Bearer: "+apiKeyHint+".", "")
	case scheme != "api-key":
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "Unsupported authorization scheme: "+apiKeyHint+".", "")
	default:
		if k := v.LookupKey(cred); k != nil {
			return k
		}
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "Invalid API key.", "")
	}
	return nil
}
