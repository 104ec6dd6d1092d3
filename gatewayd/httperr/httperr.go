// Package httperr is the one error envelope of every gatewayd answer, {"error", "error_code", "detail"}, with the
// codes and the writers that send it: the model calls, the management API, billing events, the health probes,
// the dashboard's files and the replicas' internal routes all answer through it, so a client parses one shape
// whatever route refused it. When fields are at fault, detail is a list of FieldError, whichever route refused.
// The management 429 is the one exception the API fixes: {"error", "retry_after"}, written by RateLimited. The
// model routes keep detail a string and any structure in fields (WriteModelCall, docs/rest-api.md).
package httperr

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Error codes. The model-call codes are those of docs/rest-api.md "Model-call errors"; the management codes name
// the rule a request broke.
const (
	CodeClientError        = "client_error"
	CodeUnauthorized       = "unauthorized"
	CodeForbidden          = "forbidden"
	CodeModelDoesNotExist  = "model_does_not_exist"
	CodeRateLimited        = "rate_limited"
	CodeUsageLimitExceeded = "usage_limit_exceeded"
	CodeModelUnavailable   = "model_unavailable"
	CodeModelNotReady      = "model_not_ready"
	CodeTimeout            = "timeout"
	CodeLimitsUnavailable  = "limits_unavailable"
	CodeInternal           = "internal_error"

	CodeInvalidRequest          = "invalid_request"
	CodeInvalidType             = "invalid_type"
	CodeUnknownField            = "unknown_field"
	CodeMalformedJSON           = "malformed_json"
	CodeNotFound                = "not_found"
	CodeConflict                = "conflict"
	CodeChildExceedsParentLimit = "child_exceeds_parent_limit"
	CodeUnavailable             = "unavailable"
	CodeControlPlaneUnavailable = "control_plane_unavailable"
	CodeMethodNotAllowed        = "method_not_allowed"
)

// CodePayloadTooLarge answers a body over its cap (413), on every route.
const CodePayloadTooLarge = "payload_too_large"

// MsgRateLimited is the exact error of a management 429 (docs/rest-api.md "Management rate limits").
const MsgRateLimited = "Rate limit exceeded. Please try again later."

// Body is the error envelope. Detail is a []FieldError when fields are at fault, else nil or what the route
// documents (the allowed methods of a 405, the key type of a 403).
type Body struct {
	Error     string `json:"error"`
	ErrorCode string `json:"error_code"`
	Detail    any    `json:"detail"`
}

// FieldError names one refused field and the rule it broke. An envelope always carries them as a list
// ([]FieldError), even for one field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// FieldPath is a JSON pointer in the API's field notation, which a FieldError names: "/models/0/slug" is
// "models[0].slug".
func FieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// Error is a refusal that a lower layer decides and the handler writes: the status, the code, the sentence and
// the detail of the envelope.
type Error struct {
	Status  int
	Code    string
	Message string
	Detail  any
	// RetryAfter, when positive, is sent as the Retry-After header, in seconds.
	RetryAfter int64
}

func (e *Error) Error() string { return e.Message }

// New returns an Error.
func New(status int, code, msg string, detail any) *Error {
	return &Error{Status: status, Code: code, Message: msg, Detail: detail}
}

// NoRoute is the 404 of a path no route serves.
func NoRoute(r *http.Request) *Error {
	return New(http.StatusNotFound, CodeNotFound, "No route for "+r.Method+" "+r.URL.Path+".", nil)
}

// MethodNotAllowed is the 405 of a path whose routes take only the methods allow; the caller sets the Allow
// header to the same list.
func MethodNotAllowed(r *http.Request, allow []string) *Error {
	return New(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "Method "+r.Method+" is not allowed on "+r.URL.Path+".",
		map[string][]string{"allow": allow})
}

// WriteJSON writes v as the JSON answer with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"Internal error.","error_code":"internal_error","detail":null}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteOK writes 200 {"ok": true}, the answer of a call that has nothing else to say (a health probe, a key's
// registration).
func WriteOK(w http.ResponseWriter) { WriteJSON(w, http.StatusOK, map[string]bool{"ok": true}) }

// Write writes the envelope with status.
func Write(w http.ResponseWriter, status int, code, msg string, detail any) {
	WriteJSON(w, status, Body{Error: msg, ErrorCode: code, Detail: detail})
}

// RequiredQuery reads the query parameters names of r, each required: when any is empty it writes 400
// invalid_request naming every missing one (msg the sentence) and reports false.
func RequiredQuery(w http.ResponseWriter, r *http.Request, msg string, names ...string) ([]string, bool) {
	vals := make([]string, len(names))
	var missing []FieldError
	for i, name := range names {
		if vals[i] = r.URL.Query().Get(name); vals[i] == "" {
			missing = append(missing, FieldError{Field: name, Message: "is a required query parameter"})
		}
	}
	if len(missing) > 0 {
		Write(w, http.StatusBadRequest, CodeInvalidRequest, msg, missing)
		return nil, false
	}
	return vals, true
}

// WriteError writes e, with its Retry-After header when it has one.
func WriteError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(e.RetryAfter, 10))
	}
	Write(w, e.Status, e.Code, e.Message, e.Detail)
}

// RateLimited writes the management 429 with its Retry-After header.
func RateLimited(w http.ResponseWriter, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	WriteJSON(w, http.StatusTooManyRequests, struct {
		Error      string `json:"error"`
		RetryAfter int    `json:"retry_after"`
	}{MsgRateLimited, retryAfter})
}

// ModelCallBody is the envelope of a model-call error (docs/rest-api.md "Model-call errors"): detail is always a
// string, so a client of the model routes reads one type; what a refusal knows in structure (the refused field,
// the limit that fired, the upstream's status) is in fields as well, when there is any: a refused field is its
// {field, message} object, as a model call is refused for one field at a time.
type ModelCallBody struct {
	Error     string `json:"error"`
	ErrorCode string `json:"error_code"`
	Detail    string `json:"detail"`
	Fields    any    `json:"fields,omitempty"`
}

// WriteModelCall writes the model-call envelope with status: a string detail as it is, any other as its
// DetailString, kept whole in fields; a list of one FieldError (the envelope's shape of a refused field) is that
// field's object in fields.
func WriteModelCall(w http.ResponseWriter, status int, code, msg string, detail any) {
	b := ModelCallBody{Error: msg, ErrorCode: code}
	if s, ok := detail.(string); ok {
		b.Detail = s
	} else if detail != nil {
		b.Detail, b.Fields = DetailString(detail), detail
		if fe, ok := detail.([]FieldError); ok && len(fe) == 1 {
			b.Fields = fe[0]
		}
	}
	WriteJSON(w, status, b)
}

// WriteModelCallError writes e as a model-call error, with its Retry-After header when it has one.
func WriteModelCallError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(e.RetryAfter, 10))
	}
	WriteModelCall(w, e.Status, e.Code, e.Message, e.Detail)
}

// DetailString renders a structured detail as one line: a {field, message} as "field: message", any other object
// as its "key: value" pairs in key order, a list as its items joined by "; ".
func DetailString(detail any) string {
	b, err := json.Marshal(detail)
	if err != nil {
		return ""
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	return detailLine(v)
}

func detailLine(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []any:
		parts := make([]string, 0, len(v))
		for _, item := range v {
			parts = append(parts, detailLine(item))
		}
		return strings.Join(parts, "; ")
	case map[string]any:
		if f, ok := v["field"].(string); ok && len(v) == 2 {
			if m, ok := v["message"].(string); ok {
				return f + ": " + m
			}
		}
		keys := slices.Sorted(maps.Keys(v))
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+detailLine(v[k]))
		}
		return strings.Join(parts, ", ")
	}
	b, _ := json.Marshal(v)
	return string(b)
}
