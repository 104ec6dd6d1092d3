package gatewayd_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
)

// TestModelCallErrorsDetailIsString walks the errors the model routes answer (docs/rest-api.md "Model-call
// errors"): unknown model, environment and deployment, 401, 403, 413, the tier's 429, 502, 503 not ready, and the
// async refusals. Each one's detail is a string, and a refusal that knows more in structure (the refused field,
// the limit that fired) keeps it in fields. The fixture's helpers check every other error of the model routes
// the package's tests meet the same way (the held call's 503 in TestWakeHoldTimesOut among them).
func TestModelCallErrorsDetailIsString(t *testing.T) {
	f := newModelFixtureOpts(t, fixtureOpts{maxBodyBytes: 256, async: true})
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + down.Addr().String()
	down.Close()
	f.snap.Models = append(f.snap.Models, snapshot.ServedModel{ID: "broken", Environments: []snapshot.EnvironmentRoute{
		{Name: "production", Deployment: "down"}, {Name: "loading", Deployment: "loading"}}})
	f.snap.Deployments = append(f.snap.Deployments,
		snapshot.Deployment{ID: "down", ModelID: "broken", Kind: snapshot.DeploymentURL, URL: downURL, PredictPath: "/predict", Active: true, Ready: true},
		snapshot.Deployment{ID: "loading", ModelID: "broken", Kind: snapshot.DeploymentURL, URL: downURL, PredictPath: "/predict", Active: true},
	)
	f.snap.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: 1}
	f.publish()
	invoke := "Bearer " + f.keys["invoke"]
	chat := `{"model":"` + slug + `","messages":[{"role":"user","content":"hello world"}]}`
	do := func(method, path, auth, body string) (int, []byte) {
		t.Helper()
		return sendWith(t, method, f.url+path, auth, body)
	}
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		// fields is the key the structured detail must hold ("" when a sentence says it all).
		fields string
	}{
		{"no key", "POST", "/models/sentiment/production/predict", "", `{}`, 401, ""},
		{"unknown model", "POST", "/models/nope/production/predict", invoke, `{}`, 404, ""},
		{"unknown environment", "POST", "/models/sentiment/environments/nope/predict", invoke, `{}`, 404, ""},
		{"deployment of another model", "POST", "/models/sentiment/deployment/o1/predict", invoke, `{}`, 404, ""},
		{"metrics key", "POST", "/models/sentiment/production/predict", "Bearer " + f.keys["metrics"], `{}`, 403, "key_type"},
		{"staging key on production", "POST", "/models/sentiment/production/predict", "Bearer " + f.keys["invoke-staging"], `{}`, 403, "key_type"},
		{"body too large", "POST", "/models/sentiment/production/predict", invoke, strings.Repeat("x", 1024), 413, "field"},
		{"upstream down", "POST", "/models/broken/production/predict", invoke, `{}`, 502, ""},
		{"not ready", "POST", "/models/broken/environments/loading/predict", invoke, `{}`, 503, ""},
		{"unknown chain", "POST", "/chains/nope/production/run_remote", invoke, `{}`, 404, ""},
		{"no such model route", "POST", "/models/sentiment/production/nope", invoke, `{}`, 404, ""},
		{"wrong method on a model route", "GET", "/models/sentiment/production/predict", invoke, "", 405, "allow"},
		{"openai unknown model", "POST", "/v1/chat/completions", invoke, `{"model":"nope/nope","messages":[]}`, 404, ""},
		{"openai not an object", "POST", "/v1/chat/completions", invoke, `[1]`, 400, ""},
		{"async no input", "POST", "/models/sentiment/production/async_predict", invoke, `{"priority": 1}`, 400, "field"},
		{"async priority", "POST", "/models/sentiment/production/async_predict", invoke, `{"model_input": 1, "priority": 3}`, 400, "field"},
		{"async webhook", "POST", "/models/sentiment/production/async_predict", invoke, `{"model_input": 1, "webhook_endpoint": "http://10.0.0.1/x"}`, 400, "field"},
		{"async too large", "POST", "/models/sentiment/production/async_predict", invoke, `{"model_input": "` + strings.Repeat("a", 300<<10) + `"}`, 413, "field"},
		{"async unknown model", "POST", "/models/nope/production/async_predict", invoke, `{"model_input": 1}`, 404, ""},
		{"async status of no request", "GET", "/models/sentiment/async_request/nope", invoke, "", 404, ""},
		{"async cancel of no request", "DELETE", "/models/sentiment/async_request/nope", invoke, "", 404, ""},
		{"async status, metrics key", "GET", "/models/sentiment/async_request/nope", "Bearer " + f.keys["metrics"], "", 404, ""},
		{"tier 429", "POST", "/v1/chat/completions", invoke, chat, 429, "limit"},
	} {
		status, body := do(tc.method, tc.path, tc.auth, tc.body)
		if tc.status == 429 && status == http.StatusOK {
			// The tier allows one call a minute: the first may pass.
			status, body = do(tc.method, tc.path, tc.auth, tc.body)
		}
		var env struct {
			Error     string         `json:"error"`
			ErrorCode string         `json:"error_code"`
			Detail    any            `json:"detail"`
			Fields    map[string]any `json:"fields"`
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&env); err != nil || status != tc.status || env.Error == "" || env.ErrorCode == "" {
			t.Errorf("%s: %d %s, want %d in the envelope", tc.name, status, body, tc.status)
			continue
		}
		if _, ok := env.Detail.(string); !ok {
			t.Errorf("%s: detail %v is not a string: %s", tc.name, env.Detail, body)
		}
		if tc.fields != "" && env.Fields[tc.fields] == nil {
			t.Errorf("%s: fields carries no %s: %s", tc.name, tc.fields, body)
		}
	}
}
