package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// errorBody is the envelope of every error but the management 429.
type errorBody struct {
	Error     string `json:"error"`
	ErrorCode string `json:"error_code"`
	Detail    any    `json:"detail"`
}

// fieldError names one refused field and the rule.
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// MsgRateLimited is the exact error of a management 429.
const MsgRateLimited = "Rate limit exceeded. Please try again later."

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"Internal error.","error_code":"internal_error","detail":null}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string, detail any) {
	writeJSON(w, status, errorBody{Error: msg, ErrorCode: code, Detail: detail})
}

func writeRateLimited(w http.ResponseWriter, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	writeJSON(w, http.StatusTooManyRequests, struct {
		Error      string `json:"error"`
		RetryAfter int    `json:"retry_after"`
	}{MsgRateLimited, retryAfter})
}

func badRequest(w http.ResponseWriter, field, msg string) {
	writeError(w, http.StatusBadRequest, "invalid_request", msg, []fieldError{{Field: field, Message: msg}})
}

func notFound(w http.ResponseWriter, what, id string) {
	writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %q not found.", what, id), map[string]string{"id": id})
}

// decodeBody parses the request body strictly into v: one JSON value, no unknown fields, the right types. It
// writes the 4xx itself and returns false on any problem. An empty body is allowed only when allowEmpty.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	raw, ok := readBody(w, r)
	if !ok {
		return false
	}
	return decodeBytes(w, raw, v, allowEmpty)
}

// readBody reads the capped body, answering 413 when it is too large.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("The request body exceeds %d bytes.", tooBig.Limit), map[string]int64{"max_bytes": tooBig.Limit})
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "invalid_request", "Could not read the request body.", nil)
		return nil, false
	}
	return raw, true
}

func decodeBytes(w http.ResponseWriter, raw []byte, v any, allowEmpty bool) bool {
	if len(bytes.TrimSpace(raw)) == 0 {
		if allowEmpty {
			return true
		}
		writeError(w, http.StatusBadRequest, "malformed_json", "The request body must be a JSON object.", nil)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	if err == nil {
		if _, tokErr := dec.Token(); tokErr != io.EOF {
			err = errors.New("unexpected data after the JSON value")
		}
	}
	if err == nil {
		return true
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		f := typeErr.Field
		if f == "" {
			f = "(body)"
		}
		msg := fmt.Sprintf("%s must be of type %s, not %s.", f, jsonType(typeErr.Type.Kind().String()), typeErr.Value)
		writeError(w, http.StatusBadRequest, "invalid_type", msg, []fieldError{{Field: f, Message: msg}})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		msg := fmt.Sprintf("Unknown field %q.", f)
		writeError(w, http.StatusBadRequest, "unknown_field", msg, []fieldError{{Field: f, Message: "unknown field"}})
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, "malformed_json", "The request body is not valid JSON: "+err.Error()+".", nil)
	default:
		writeError(w, http.StatusBadRequest, "malformed_json", "The request body is not valid JSON: "+err.Error()+".", nil)
	}
	return false
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	case "bool":
		return "boolean"
	default:
		return "number"
	}
}

// apiPaths renames CR field paths in apiserver messages to the REST API's names, so a refusal points at the
// field the client sent. Longer names come first: the replacer tries its pairs in order.
var apiPaths = strings.NewReplacer(
	"spec.hierarchy.parentGroupID", "hierarchy.parent_group_id",
	"spec.hierarchy.limitEnforcement", "hierarchy.limit_enforcement",
	"spec.hierarchy", "hierarchy",
	"spec.externalEntityID", "metadata.external_entity_id",
	"spec.displayName", "metadata.name",
	"spec.models", "models",
	"rateLimits", "rate_limits",
	"usageLimits", "usage_limits",
	"spec.prefix", "prefix",
	"spec.slug", "slug",
	"spec.targets", "targets",
	"baseURL", "base_url",
	"targetModel", "target_model",
	"apiKeySecretRef", "api_key_secret_ref",
	"spec.teamID", "team_id",
	"spec.environments", "environments",
	"spec.type", "type",
)

// writeKubeError maps a refusal or failure of the API server onto the envelope:
//   - Invalid, BadRequest, or a webhook's Forbidden: 400 with each field message (renamed to API paths); a
//     cascading-threshold refusal carries exactly hierarchy.MsgChildExceedsParent as its error;
//   - a Duplicate cause, AlreadyExists or Conflict: 409;
//   - NotFound: 404;
//   - anything else (unreachable, timeouts, internal errors, RBAC): 503, because the control plane, not the
//     request, is at fault.
func writeKubeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	log := logr.FromContextOrDiscard(r.Context())
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		log.Error(err, "Kubernetes API call failed", "op", what)
		writeError(w, http.StatusServiceUnavailable, "control_plane_unavailable",
			"The control plane is unavailable; retry shortly.", nil)
		return
	}
	status := st.Status()
	fromWebhook := strings.Contains(status.Message, "admission webhook")
	switch {
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		writeError(w, http.StatusConflict, "conflict", apiPaths.Replace(status.Message), nil)
	case apierrors.IsNotFound(err):
		writeError(w, http.StatusNotFound, "not_found", apiPaths.Replace(status.Message), nil)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err) && fromWebhook:
		writeRefusal(w, status)
	default:
		log.Error(err, "Kubernetes API call failed", "op", what)
		writeError(w, http.StatusServiceUnavailable, "control_plane_unavailable",
			"The control plane is unavailable; retry shortly.", nil)
	}
}

func writeRefusal(w http.ResponseWriter, status metav1.Status) {
	var fields []fieldError
	duplicate, cascading := false, strings.Contains(status.Message, hierarchy.MsgChildExceedsParent)
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			fields = append(fields, fieldError{Field: apiPaths.Replace(c.Field), Message: apiPaths.Replace(c.Message)})
			duplicate = duplicate || c.Type == metav1.CauseTypeFieldValueDuplicate
			cascading = cascading || strings.Contains(c.Message, hierarchy.MsgChildExceedsParent)
		}
	}
	msg := apiPaths.Replace(status.Message)
	if len(fields) > 0 {
		msg = fields[0].Field + ": " + fields[0].Message
	}
	switch {
	case duplicate:
		writeError(w, http.StatusConflict, "conflict", msg, fields)
	case cascading:
		writeError(w, http.StatusBadRequest, "child_exceeds_parent_limit", hierarchy.MsgChildExceedsParent, fields)
	default:
		writeError(w, http.StatusBadRequest, "invalid_request", msg, fields)
	}
}
