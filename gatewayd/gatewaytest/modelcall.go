package gatewaytest

import (
	"encoding/json"
	"testing"
)

// WantStringDetail fails t unless an error answer of a model route (status 400 and above, with a body) is the
// model-call envelope whose detail is a string (docs/rest-api.md "Model-call errors"). An answer without
// error_code is the upstream's own, passed through unchanged (an OpenAI-compatible error), and is not checked.
// what names the call.
func WantStringDetail(t testing.TB, what string, status int, body []byte) {
	t.Helper()
	if status < 400 || len(body) == 0 {
		return
	}
	var env map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		t.Errorf("%s: %d answer is not JSON: %s", what, status, body)
		return
	}
	if _, gatewayd := env["error_code"]; !gatewayd {
		return
	}
	if _, ok := env["detail"].(string); !ok {
		t.Errorf("%s: %d answer's detail is not a string: %s", what, status, body)
	}
}
