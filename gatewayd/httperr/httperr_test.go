package httperr_test

import (
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
