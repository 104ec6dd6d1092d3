package kit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
)

// BadRequest answers 400 invalid_request naming field and the rule it broke.
func BadRequest(w http.ResponseWriter, field, msg string) {
	httperr.Write(w, http.StatusBadRequest, httperr.CodeInvalidRequest, msg, []httperr.FieldError{{Field: field, Message: msg}})
}

// NotFound answers 404 not_found for the object what of id.
func NotFound(w http.ResponseWriter, what, id string) {
	httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("%s %q not found.", what, id), map[string]string{"id": id})
}

// DecodeBody parses the request body strictly into v: one JSON value, no unknown fields, the right types. It
// writes the 4xx itself and returns false on any problem. An empty body is allowed only when allowEmpty.
func DecodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	raw, ok := ReadBody(w, r)
	if !ok {
		return false
	}
	return DecodeBytes(w, raw, v, allowEmpty)
}

// ReadBody reads the capped body, answering its failure (413 past the cap, 408 past its deadline) as every route
// does (ingress.ReadFailed).
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		httperr.WriteError(w, ingress.ReadFailed(err))
		return nil, false
	}
	return raw, true
}

// DecodeBytes is DecodeBody for a body already read.
func DecodeBytes(w http.ResponseWriter, raw []byte, v any, allowEmpty bool) bool {
	if len(bytes.TrimSpace(raw)) == 0 {
		if allowEmpty {
			return true
		}
		httperr.Write(w, http.StatusBadRequest, httperr.CodeMalformedJSON, "The request body must be a JSON object.", nil)
		return false
	}
	if duplicateMember(w, raw) {
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
		f := fieldPath(raw, v, typeErr.Field)
		msg := fmt.Sprintf("%s must be of type %s, not %s.", f, jsonType(typeErr.Type.Kind().String()), typeErr.Value)
		httperr.Write(w, http.StatusBadRequest, httperr.CodeInvalidType, msg, []httperr.FieldError{{Field: f, Message: msg}})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		msg := fmt.Sprintf("Unknown field %q.", f)
		httperr.Write(w, http.StatusBadRequest, httperr.CodeUnknownField, msg, []httperr.FieldError{{Field: f, Message: "unknown field"}})
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		httperr.Write(w, http.StatusBadRequest, httperr.CodeMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", nil)
	default:
		httperr.Write(w, http.StatusBadRequest, httperr.CodeMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", nil)
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
	"spec.retry", "retry",
	"spec.cooldown", "cooldown",
	"onStatus", "on_status",
	"inputPerMillionTokens", "input_per_million_tokens",
	"outputPerMillionTokens", "output_per_million_tokens",
	"baseURL", "base_url",
	"targetModel", "target_model",
	"apiKeySecretRef", "api_key_secret_ref",
	"spec.teamID", "team_id",
	"spec.environments", "environments",
	"spec.type", "type",
)

// kindPaths renames the paths whose REST name depends on the resource: a workspace key's spec.displayName is its
// name, a group's is metadata.name.
var kindPaths = map[string]*strings.Replacer{
	"WorkspaceAPIKey": strings.NewReplacer("spec.displayName", "name", "spec.owner", "owner"),
	"Model":           strings.NewReplacer("spec.displayName", "display_name", "spec.development", "development"),
}

// pathsOf is the renaming of the resource kind a status is about.
func pathsOf(status metav1.Status) func(string) string {
	if status.Details != nil {
		if r := kindPaths[status.Details.Kind]; r != nil {
			return func(s string) string { return apiPaths.Replace(r.Replace(s)) }
		}
	}
	return apiPaths.Replace
}

// WriteKubeError maps a refusal or failure of the API server onto the envelope:
//   - Invalid, BadRequest, or a webhook's Forbidden: 400 with each field message (renamed to API paths); a
//     cascading-threshold refusal carries exactly hierarchy.MsgChildExceedsParent as its error;
//   - a Duplicate cause, AlreadyExists or Conflict: 409;
//   - NotFound: 404;
//   - a refusal by the API server's RBAC: 503 saying that the gateway lacks a permission, logged at ERROR with the
//     verb, the resource and the identity refused, because the install, not the request, is at fault (an operator
//     grants the verb in gatewayd's Role: docs/rbac.md);
//   - anything else (unreachable, timeouts, internal errors): 503, because the control plane, not the request, is
//     at fault.
func WriteKubeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	log := logr.FromContextOrDiscard(r.Context())
	if errors.Is(err, ErrBusy) {
		httperr.Write(w, http.StatusConflict, httperr.CodeConflict, "The object changed too often while this update was applied; retry it.", nil)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		log.Error(err, "Kubernetes API call failed", "op", what)
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeControlPlaneUnavailable,
			"The control plane is unavailable; retry shortly.", nil)
		return
	}
	status := st.Status()
	rename := pathsOf(status)
	fromWebhook := strings.Contains(status.Message, "admission webhook")
	switch {
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		httperr.Write(w, http.StatusConflict, httperr.CodeConflict, rename(status.Message), nil)
	case apierrors.IsNotFound(err):
		httperr.Write(w, http.StatusNotFound, httperr.CodeNotFound, rename(status.Message), nil)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err) && fromWebhook:
		writeRefusal(w, status)
	case apierrors.IsForbidden(err) && rbacDenied.MatchString(status.Message):
		m := rbacDenied.FindStringSubmatch(status.Message)
		verb, resource, group := m[2], m[3], m[4]
		log.Error(err, "The gateway lacks a permission on the Kubernetes API; grant it in gatewayd's Role (docs/rbac.md)",
			"op", what, "verb", verb, "resource", resource, "apiGroup", group, "serviceAccount", m[1])
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeControlPlaneUnavailable,
			fmt.Sprintf("The gateway lacks the permission to %s %s on the Kubernetes API; its operator must grant it.", verb, resource), nil)
	default:
		log.Error(err, "Kubernetes API call failed", "op", what)
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeControlPlaneUnavailable,
			"The control plane is unavailable; retry shortly.", nil)
	}
}

// rbacDenied is the message of the API server's RBAC refusal of a resource request, the one form the API server
// writes for every verb and resource: `User "<name>" cannot <verb> resource "<resource>" in API group "<group>"`,
// then the namespace or the cluster scope. Other Forbidden answers (a namespace being terminated, a quota) do not
// match it.
var rbacDenied = regexp.MustCompile(`User "([^"]*)" cannot (\S+) resource "([^"]*)" in API group "([^"]*)"`)

func writeRefusal(w http.ResponseWriter, status metav1.Status) {
	var fields []httperr.FieldError
	rename := pathsOf(status)
	duplicate, cascading := false, strings.Contains(status.Message, hierarchy.MsgChildExceedsParent)
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			if c.Field != "" && c.Field != "<nil>" {
				// A cause about no field in particular (an empty or nil path) stays in the message only.
				fields = append(fields, httperr.FieldError{Field: rename(c.Field), Message: rename(c.Message)})
			}
			duplicate = duplicate || c.Type == metav1.CauseTypeFieldValueDuplicate
			cascading = cascading || strings.Contains(c.Message, hierarchy.MsgChildExceedsParent)
		}
	}
	msg := rename(status.Message)
	if len(fields) > 0 {
		msg = fields[0].Field + ": " + fields[0].Message
	}
	switch {
	case duplicate:
		httperr.Write(w, http.StatusConflict, httperr.CodeConflict, msg, fields)
	case cascading:
		httperr.Write(w, http.StatusBadRequest, httperr.CodeChildExceedsParentLimit, hierarchy.MsgChildExceedsParent, fields)
	default:
		httperr.Write(w, http.StatusBadRequest, httperr.CodeInvalidRequest, msg, fields)
	}
}

// fieldPath names the field of a type error with its indexes ("models[0].rate_limits[1].threshold"), which
// encoding/json's dotted Field leaves out: the same body is decoded again with go-json-experiment, whose
// semantic errors carry a JSON pointer. dotted is the fallback, "(body)" for the body itself.
func fieldPath(raw []byte, v any, dotted string) string {
	var semantic *jsonv2.SemanticError
	target := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	if err := jsonv2.Unmarshal(raw, target); errors.As(err, &semantic) && semantic.JSONPointer != "" {
		return httperr.FieldPath(semantic.JSONPointer)
	}
	if dotted == "" {
		return "(body)"
	}
	return dotted
}
