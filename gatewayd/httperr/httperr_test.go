package httperr_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// TestDetailString: a structured detail renders as one line that names its fields.
func TestDetailString(t *testing.T) {
	for _, tc := range []struct {
		detail any
		want   string
	}{
		{nil, ""},
		{"model_id: x", "model_id: x"},
		{httperr.FieldError{Field: "body", Message: "must be at most 8 bytes"}, "body: must be at most 8 bytes"},
		{[]httperr.FieldError{{Field: "a", Message: "x"}, {Field: "b", Message: "y"}}, "a: x; b: y"},
		{map[string]any{"upstream_status": 500, "upstream_body": "oops"}, "upstream_body: oops, upstream_status: 500"},
	} {
		if got := httperr.DetailString(tc.detail); got != tc.want {
			t.Errorf("DetailString(%v) = %q, want %q", tc.detail, got, tc.want)
		}
	}
}

// TestFieldErrorsAreAList: a refused field goes out as a list of {field, message} in the envelope; on the model
// routes, whose detail is a string, the one refused field is the object in fields.
func TestFieldErrorsAreAList(t *testing.T) {
	fields := []httperr.FieldError{{Field: "limit", Message: "must be an integer from 1 to 1000"}}
	rec := httptest.NewRecorder()
	httperr.Write(rec, http.StatusBadRequest, httperr.CodeInvalidRequest, "Bad limit.", fields)
	if got, want := strings.TrimSpace(rec.Body.String()), `{"error":"Bad limit.","error_code":"invalid_request","detail":[{"field":"limit","message":"must be an integer from 1 to 1000"}]}`; got != want {
		t.Errorf("Write = %s, want %s", got, want)
	}
	rec = httptest.NewRecorder()
	httperr.WriteModelCall(rec, http.StatusBadRequest, httperr.CodeClientError, "Bad limit.", fields)
	if got, want := strings.TrimSpace(rec.Body.String()), `{"error":"Bad limit.","error_code":"client_error","detail":"limit: must be an integer from 1 to 1000","fields":{"field":"limit","message":"must be an integer from 1 to 1000"}}`; got != want {
		t.Errorf("WriteModelCall = %s, want %s", got, want)
	}
	two := append(fields, httperr.FieldError{Field: "cursor", Message: "unknown"})
	rec = httptest.NewRecorder()
	httperr.WriteModelCall(rec, http.StatusBadRequest, httperr.CodeClientError, "Bad page.", two)
	if got, want := strings.TrimSpace(rec.Body.String()), `{"error":"Bad page.","error_code":"client_error","detail":"limit: must be an integer from 1 to 1000; cursor: unknown","fields":[{"field":"limit","message":"must be an integer from 1 to 1000"},{"field":"cursor","message":"unknown"}]}`; got != want {
		t.Errorf("WriteModelCall of two fields = %s, want %s", got, want)
	}
}

// TestRoutingAnswers: the 404 and 405 of a path, and the 200 of a call with nothing else to say, in JSON.
func TestRoutingAnswers(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	rec := httptest.NewRecorder()
	httperr.WriteError(rec, httperr.NoRoute(r))
	if got, want := strings.TrimSpace(rec.Body.String()), `{"error":"No route for POST /x.","error_code":"not_found","detail":null}`; rec.Code != http.StatusNotFound || got != want {
		t.Errorf("NoRoute = %d %s, want 404 %s", rec.Code, got, want)
	}
	rec = httptest.NewRecorder()
	httperr.WriteError(rec, httperr.MethodNotAllowed(r, []string{"GET"}))
	if got, want := strings.TrimSpace(rec.Body.String()), `{"error":"Method POST is not allowed on /x.","error_code":"method_not_allowed","detail":{"allow":["GET"]}}`; rec.Code != http.StatusMethodNotAllowed || got != want {
		t.Errorf("MethodNotAllowed = %d %s, want 405 %s", rec.Code, got, want)
	}
	rec = httptest.NewRecorder()
	httperr.WriteOK(rec)
	if got := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusOK || got != `{"ok":true}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("WriteOK = %d %s %q", rec.Code, got, rec.Header().Get("Content-Type"))
	}
}
