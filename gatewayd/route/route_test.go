package route

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// The wire routes of the families, as clients call them (docs/rest-api.md): the table must produce exactly these.
var wantPatterns = map[*Family][]string{
	&Predict: {
		"POST /models/{model_id}/production/predict",
		"POST /models/{model_id}/development/predict",
		"POST /models/{model_id}/environments/{env_name}/predict",
		"POST /models/{model_id}/deployment/{deployment_id}/predict",
	},
	&Wake: {
		"POST /models/{model_id}/production/wake",
		"POST /models/{model_id}/development/wake",
		"POST /models/{model_id}/environments/{env_name}/wake",
		"POST /models/{model_id}/deployment/{deployment_id}/wake",
	},
	&AsyncPredict: {
		"POST /models/{model_id}/production/async_predict",
		"POST /models/{model_id}/development/async_predict",
		"POST /models/{model_id}/environments/{env_name}/async_predict",
		"POST /models/{model_id}/deployment/{deployment_id}/async_predict",
	},
	&AsyncQueueStatus: {
		"GET /models/{model_id}/production/async_queue_status",
		"GET /models/{model_id}/development/async_queue_status",
		"GET /models/{model_id}/environments/{env_name}/async_queue_status",
		"GET /models/{model_id}/deployment/{deployment_id}/async_queue_status",
	},
	&RunRemote: {
		"POST /chains/{chain_id}/production/run_remote",
		"POST /chains/{chain_id}/development/run_remote",
		"POST /chains/{chain_id}/environments/{env_name}/run_remote",
		"POST /chains/{chain_id}/deployment/{deployment_id}/run_remote",
	},
	&AsyncRunRemote: {
		"POST /chains/{chain_id}/production/async_run_remote",
		"POST /chains/{chain_id}/development/async_run_remote",
		"POST /chains/{chain_id}/environments/{env_name}/async_run_remote",
		"POST /chains/{chain_id}/deployment/{deployment_id}/async_run_remote",
	},
}

func TestFamiliesArePatterns(t *testing.T) {
	if len(Families) != len(wantPatterns) {
		t.Fatalf("%d families, want %d", len(Families), len(wantPatterns))
	}
	for f, want := range wantPatterns {
		if got := f.Patterns(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("patterns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestOf sends a request down every route of every family, through a ServeMux as gatewayd's, and reads back which
// deployment it names; reading it allocates nothing.
func TestOf(t *testing.T) {
	mux := http.NewServeMux()
	var got Selector
	var allocs float64
	for _, f := range Families {
		f.Register(mux, func(_ http.ResponseWriter, r *http.Request) {
			got = Of(r)
			allocs = testing.AllocsPerRun(100, func() { _ = Of(r) })
		})
	}
	want := []Selector{{Environment: "production"}, {Environment: "development"}, {Environment: "staging"}, {Deployment: "d1"}}
	for _, f := range Families {
		for i, p := range f.Patterns() {
			method, path, _ := strings.Cut(p, " ")
			path = strings.NewReplacer("{model_id}", "m1", "{chain_id}", "c1", "{env_name}", "staging", "{deployment_id}", "d1").Replace(path)
			got, allocs = Selector{}, -1
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("%s %s: %d", method, path, rec.Code)
			}
			if got != want[i] {
				t.Errorf("%s %s: selector %+v, want %+v", method, path, got, want[i])
			}
			if allocs != 0 {
				t.Errorf("%s %s: Of allocates %v times a call", method, path, allocs)
			}
		}
	}
}

// fixture is a namespace with model m (team a; production -> v1, development -> v2, staging -> an inactive
// deployment, an environment with none) and chain c (team a; production -> cd1, development -> cd2 whose
// entrypoint is inactive, new -> cd3 whose entrypoint the manager has not made yet).
func fixture() *view.Namespace {
	return &view.Namespace{
		Models: map[string]*snapshot.ServedModel{"m": {ID: "m", TeamID: "a", Development: "v2",
			Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "off"}, {Name: "empty"}}}},
		Deployments: map[string]*snapshot.Deployment{
			"v1":       {ID: "v1", ModelID: "m", Active: true},
			"v2":       {ID: "v2", ModelID: "m", Active: true},
			"off":      {ID: "off", ModelID: "m"},
			"other":    {ID: "other", ModelID: "n", Active: true},
			"cd1-main": {ID: "cd1-main", ModelID: "chain_c", Active: true},
			"cd2-main": {ID: "cd2-main", ModelID: "chain_c"},
		},
		Snapshot: &snapshot.Snapshot{
			Chains: []snapshot.ServedChain{{ID: "c", TeamID: "a", Development: "cd2",
				Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "cd1"}, {Name: "new", Deployment: "cd3"}}}},
			ChainDeployments: []snapshot.ChainDeployment{{ID: "cd1", ChainID: "c", Entrypoint: "cd1-main"},
				{ID: "cd2", ChainID: "c", Entrypoint: "cd2-main"}, {ID: "cd3", ChainID: "c", Entrypoint: "cd3-main"}},
		},
	}
}

// TestResolve pins what an environment or a deployment id resolves to, for a model and for a chain.
func TestResolve(t *testing.T) {
	ns := fixture()
	for _, tc := range []struct {
		chain  bool
		id     string
		sel    Selector
		want   string // the deployment, or the error's status and detail
		object bool   // the model or chain is returned
	}{
		{id: "m", sel: Selector{Environment: "production"}, want: "v1", object: true},
		{id: "m", sel: Selector{Environment: "development"}, want: "v2", object: true},
		{id: "m", sel: Selector{Deployment: "v2"}, want: "v2", object: true},
		{id: "m", sel: Selector{Environment: "staging"}, want: "404 deployment_id: off", object: true},
		{id: "m", sel: Selector{Environment: "empty"}, want: "404 environment: empty", object: true},
		{id: "m", sel: Selector{Environment: "nope"}, want: "404 environment: nope", object: true},
		{id: "m", sel: Selector{Deployment: "other"}, want: "404 deployment_id: other", object: true},
		{id: "nope", sel: Selector{Environment: "production"}, want: "404 model_id: nope"},
		{chain: true, id: "c", sel: Selector{Environment: "production"}, want: "cd1-main", object: true},
		{chain: true, id: "c", sel: Selector{Environment: "development"}, want: "404 deployment_id: cd2", object: true},
		{chain: true, id: "c", sel: Selector{Environment: "new"}, want: "503 deployment_id: cd3", object: true},
		{chain: true, id: "c", sel: Selector{Deployment: "cd1"}, want: "cd1-main", object: true},
		{chain: true, id: "c", sel: Selector{Deployment: "cd9"}, want: "404 deployment_id: cd9", object: true},
		{chain: true, id: "c", sel: Selector{Environment: "nope"}, want: "404 environment: nope", object: true},
		{chain: true, id: "nope", sel: Selector{Deployment: "cd1"}, want: "404 chain_id: nope"},
	} {
		var object bool
		var got string
		if tc.chain {
			c, d, e := resolveChain(ns, tc.id, tc.sel)
			object, got = c != nil, outcome(t, d, e)
		} else {
			m, d, e := resolveModel(ns, tc.id, tc.sel)
			object, got = m != nil, outcome(t, d, e)
		}
		if got != tc.want || object != tc.object {
			t.Errorf("%s %+v: %q (object %v), want %q (object %v)", tc.id, tc.sel, got, object, tc.want, tc.object)
		}
	}
}

// outcome is d's id, or e's status and detail.
func outcome(t *testing.T, d *snapshot.Deployment, e *httperr.Error) string {
	switch {
	case e != nil && d != nil:
		t.Errorf("both deployment %s and error %v", d.ID, e)
	case e != nil:
		return fmt.Sprintf("%d %v", e.Status, e.Detail)
	case d != nil:
		return d.ID
	}
	return ""
}

// TestAuthorize pins the order of the answers of a call that names a deployment: the invoke decision on the model
// or chain before whether its deployment resolves, 404 for one the caller may not see (and no model to label the
// call with), 403 for a key that may not invoke at all even when the id is unknown.
func TestAuthorize(t *testing.T) {
	ns := fixture()
	key := func(typ gatewayv1.WorkspaceKeyType, team string, models ...string) auth.Caller {
		return auth.NewCaller("ns", snapshot.WorkspaceAPIKey{Prefix: "p", Type: string(typ), TeamID: team, Models: models}, nil)
	}
	invoke, otherTeam, scoped, metrics := key(gatewayv1.KeyTypeInvoke, "a"), key(gatewayv1.KeyTypeInvoke, "b"),
		key(gatewayv1.KeyTypeInvoke, "a", "x"), key(gatewayv1.KeyTypeExportMetrics, "")
	prod, staging := Selector{Environment: "production"}, Selector{Environment: "staging"}
	for _, tc := range []struct {
		name   string
		caller auth.Caller
		chain  bool
		id     string
		sel    Selector
		want   string
		object bool // the model is returned, to label the call
	}{
		{"allowed", invoke, false, "m", prod, "v1", true},
		{"allowed, not active", invoke, false, "m", staging, "404 deployment_id: off", true},
		{"unknown model", invoke, false, "nope", prod, "404 model_id: nope", false},
		{"another team's model is hidden", otherTeam, false, "m", prod, "404 model_id: m", false},
		{"hidden before not active", otherTeam, false, "m", staging, "404 model_id: m", false},
		{"out of the key's models", scoped, false, "m", staging, "403 map[key_type:WORKSPACE_INVOKE model_id:m]", true},
		{"a key that may not invoke", metrics, false, "m", prod, "403 map[key_type:WORKSPACE_EXPORT_METRICS model_id:m]", true},
		{"a key that may not invoke, unknown model", metrics, false, "nope", prod, "403 map[key_type:WORKSPACE_EXPORT_METRICS]", false},
		{"chain allowed", invoke, true, "c", prod, "cd1-main", true},
		{"chain not active", invoke, true, "c", Selector{Environment: "development"}, "404 deployment_id: cd2", false},
		{"another team's chain is hidden", otherTeam, true, "c", prod, "404 chain_id: c", false},
		{"chain out of the key's models", scoped, true, "c", prod, "403 map[chain_id:c key_type:WORKSPACE_INVOKE]", false},
		{"a key that may not invoke, unknown chain", metrics, true, "nope", prod, "403 map[key_type:WORKSPACE_EXPORT_METRICS]", false},
	} {
		var object bool
		var got string
		if tc.chain {
			c, d, e := AuthorizeChainInvoke(tc.caller, ns, tc.id, tc.sel)
			object, got = c != nil, outcome(t, d, e)
		} else {
			m, d, e := AuthorizeInvoke(tc.caller, ns, tc.id, tc.sel)
			object, got = m != nil, outcome(t, d, e)
		}
		if got != tc.want || object != tc.object {
			t.Errorf("%s: %q (object %v), want %q (object %v)", tc.name, got, object, tc.want, tc.object)
		}
	}
}
