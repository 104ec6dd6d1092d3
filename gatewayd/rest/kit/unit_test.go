package kit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// TestManagementRow walks the pure core of the management rate limits: which row of the table a call belongs to,
// from the route pattern that matched it and its path values. The three deployment selectors of activate,
// deactivate and retry are three rows each; every endpoint the table does not list is its own row at 100 per
// second, by method and route pattern.
func TestManagementRow(t *testing.T) {
	const (
		deployments = "POST /v1/models/{model_id}/deployments/{deployment_id}/"
		minute      = time.Minute
		second      = time.Second
	)
	for _, tc := range []struct {
		pattern string
		values  map[string]string
		want    Row
	}{
		{deployments + "activate", map[string]string{"deployment_id": "development"}, Row{"POST /v1/models/{model_id}/deployments/development/activate", 20, minute}},
		{deployments + "activate", map[string]string{"deployment_id": "production"}, Row{"POST /v1/models/{model_id}/deployments/production/activate", 20, minute}},
		{deployments + "activate", map[string]string{"deployment_id": "dep-1"}, Row{deployments + "activate", 20, minute}},
		{deployments + "deactivate", map[string]string{"deployment_id": "development"}, Row{"POST /v1/models/{model_id}/deployments/development/deactivate", 20, minute}},
		{deployments + "deactivate", map[string]string{"deployment_id": "production"}, Row{"POST /v1/models/{model_id}/deployments/production/deactivate", 20, minute}},
		{deployments + "deactivate", map[string]string{"deployment_id": "dep-1"}, Row{deployments + "deactivate", 20, minute}},
		{deployments + "retry", map[string]string{"deployment_id": "development"}, Row{"POST /v1/models/{model_id}/deployments/development/retry", 10, minute}},
		{deployments + "retry", map[string]string{"deployment_id": "production"}, Row{"POST /v1/models/{model_id}/deployments/production/retry", 10, minute}},
		{deployments + "retry", map[string]string{"deployment_id": "dep-1"}, Row{deployments + "retry", 10, minute}},
		// A model named like an environment does not move the call to that environment's row.
		{deployments + "retry", map[string]string{"model_id": "production", "deployment_id": "dep-1"}, Row{deployments + "retry", 10, minute}},
		// A value that is not one segment is a deployment id, never an environment.
		{deployments + "retry", map[string]string{"deployment_id": "production/x"}, Row{deployments + "retry", 10, minute}},
		// The table lists logs for a deployment id only; an environment's logs are that row too.
		{deployments + "logs", map[string]string{"deployment_id": "dep-1"}, Row{deployments + "logs", 30, second}},
		{deployments + "logs", map[string]string{"deployment_id": "production"}, Row{deployments + "logs", 30, second}},
		// Every other endpoint: its own row at 100 per second.
		{"GET /v1/models/{model_id}/deployments/{deployment_id}", map[string]string{"deployment_id": "production"},
			Row{"GET /v1/models/{model_id}/deployments/{deployment_id}", 100, second}},
		{"POST /v1/models/{model_id}/environments/{env_name}/activate", map[string]string{"env_name": "production"},
			Row{"POST /v1/models/{model_id}/environments/{env_name}/activate", 100, second}},
		{"GET /v1/models/{model_id}/deployments/{deployment_id}/logs", map[string]string{"deployment_id": "dep-1"},
			Row{"GET /v1/models/{model_id}/deployments/{deployment_id}/logs", 100, second}},
		{"GET /v1/gateway/groups/{group_id}", map[string]string{"group_id": "g"}, Row{"GET /v1/gateway/groups/{group_id}", 100, second}},
		{"PATCH /v1/gateway/groups/{group_id}", map[string]string{"group_id": "g"}, Row{"PATCH /v1/gateway/groups/{group_id}", 100, second}},
		{"GET /v1/gateway/events", nil, Row{"GET /v1/gateway/events", 100, second}},
		{"GET /v1/metrics", nil, Row{"GET /v1/metrics", 100, second}},
		{"/", nil, Row{"/", 100, second}},
	} {
		got := ManagementRow(tc.pattern, func(name string) string { return tc.values[name] })
		if got != tc.want {
			t.Errorf("%s %v: row %+v, want %+v", tc.pattern, tc.values, got, tc.want)
		}
	}
}

func TestMintedKeysAndIDs(t *testing.T) {
	k, err := apikey.Mint(apikey.Federated)
	if err != nil || !ValidPrefix(apikey.Prefix(k)) {
		t.Fatalf("minted key prefix %q is not a valid path prefix (err %v)", apikey.Prefix(k), err)
	}
	if a, b := ids.New(ids.Group), ids.New(ids.Group); a == b || !ValidName(a) || len(a) != 20 {
		t.Fatalf("ids %q and %q: want distinct valid names of 20 characters", a, b)
	}
}

func TestFieldPathKeepsIndexes(t *testing.T) {
	type limit struct {
		Threshold int64 `json:"threshold"`
	}
	type model struct {
		RateLimits []limit `json:"rate_limits"`
	}
	type body struct {
		Models []model `json:"models"`
	}
	raw := []byte(`{"models":[{"rate_limits":[]},{"rate_limits":[{"threshold":1},{"threshold":"x"}]}]}`)
	if got := fieldPath(raw, &body{}, "models.rate_limits.threshold"); got != "models[1].rate_limits[1].threshold" {
		t.Errorf("got %q, want models[1].rate_limits[1].threshold", got)
	}
	if got := fieldPath([]byte(`"x"`), &body{}, ""); got != "(body)" {
		t.Errorf("the body itself: got %q, want (body)", got)
	}
}

// TestForbiddenByRBACOnly: only the API server's RBAC refusal says that the gateway lacks a permission; another
// Forbidden (a namespace being deleted, a quota) stays a control plane failure, and a webhook's is the client's 400.
// The envtest suite of gatewayd/rest checks the RBAC message as a real API server writes it.
func TestForbiddenByRBACOnly(t *testing.T) {
	models := schema.GroupResource{Group: "gateway.modelgate.io", Resource: "models"}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		want   string
	}{
		{"RBAC", apierrors.NewForbidden(models, "", errors.New(`User "system:serviceaccount:mg:gatewayd" cannot create resource "models" in API group "gateway.modelgate.io" in the namespace "ws"`)),
			http.StatusServiceUnavailable, "The gateway lacks the permission to create models on the Kubernetes API; its operator must grant it."},
		{"namespace being deleted", apierrors.NewForbidden(models, "m1", errors.New("unable to create new content in namespace ws because it is being terminated")),
			http.StatusServiceUnavailable, "The control plane is unavailable; retry shortly."},
		{"webhook", apierrors.NewForbidden(models, "m1", errors.New(`admission webhook "vmodel.gateway.modelgate.io" denied the request: no`)),
			http.StatusBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteKubeError(w, httptest.NewRequest(http.MethodPost, "/v1/models", nil), "create model", tc.err)
			var body httperr.Body
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status || (tc.want != "" && body.Error != tc.want) {
				t.Errorf("answer %d %q, want %d %q", w.Code, body.Error, tc.status, tc.want)
			}
		})
	}
}
