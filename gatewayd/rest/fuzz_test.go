package rest_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// fixedDirectory authenticates one admin key and reports every snapshot wait as satisfied.
type fixedDirectory struct{ key string }

func (d fixedDirectory) WorkspaceKey(k string) (auth.Caller, bool) {
	if k != d.key {
		return auth.Caller{}, false
	}
	return auth.NewCaller("fuzz", snapshot.WorkspaceAPIKey{Prefix: k[:16], Type: "PERSONAL",
		Owner: &snapshot.KeyOwner{UserID: "u", Role: "ADMIN"}}, nil), true
}

func (fixedDirectory) WaitFor(context.Context, string, func(*snapshot.Snapshot) bool) error {
	return nil
}

func (fixedDirectory) HasAPIKey(string, string) bool { return false }

// FuzzHandlers feeds random methods, paths, queries and bodies to every route. The handlers must never panic
// and never answer a 5xx other than 503. The client is controller-runtime's in-memory fake: this target checks
// the handlers' parsing and mapping, not admission, which the envtest suite covers against a real API server.
func FuzzHandlers(f *testing.F) {
	const key = "mgw_fuzzfuzzfuzz.secretsecretsecretsecretsecret12"
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	parent := "grp-parent00000000"
	seed := []runtime.Object{
		&gatewayv1.Group{
			ObjectMeta: metav1.ObjectMeta{Name: parent, Namespace: "fuzz"},
			Spec: gatewayv1.GroupSpec{ExternalEntityID: "ext", Models: []gatewayv1.ModelConfig{{Slug: "demo/echo",
				UsageLimits: []gatewayv1.Limit{{Type: "TOKEN", Unit: "DAY", Threshold: 10}}}}},
		},
		&gatewayv1.APIKey{
			ObjectMeta: metav1.ObjectMeta{Name: "key-1", Namespace: "fuzz"},
			Spec:       gatewayv1.APIKeySpec{GroupID: parent, KeySource: gatewayv1.KeySource{Prefix: "mgk_aaaaaaaaaaaa", Hash: strings.Repeat("0", 64)}},
		},
		&gatewayv1.Workspace{
			ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "fuzz"},
			Spec:       gatewayv1.WorkspaceSpec{KeyRegistration: &gatewayv1.KeyRegistration{PublicKey: strings.Repeat("A", 43) + "="}},
		},
	}
	var tick atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(seed...).Build()
	mux := http.NewServeMux()
	rest.New(rest.Options{
		Client: c, Directory: fixedDirectory{key: key}, Usage: resttest.FixedUsage{N: 1},
		// A clock that moves a second per reading keeps the management rate limit out of the fuzzer's way.
		Clock: func() time.Time { return time.Unix(tick.Add(1), 0) },
	}).Register(mux)

	for _, s := range []struct{ method, path, query, body string }{
		{"POST", "gateway/groups", "", `{"metadata":{"external_entity_id":"a"},"models":[{"slug":"x"}]}`},
		{"POST", "gateway/groups", "", `{"metadata":{"external_entity_id":"b"},"models":[{"slug":"x","rate_limits":[{"type":"TOKEN","unit":"SECOND","threshold":5}]}],"hierarchy":{"parent_group_id":"` + parent + `"}}`},
		{"GET", "gateway/groups", "limit=2&cursor=djE6Z3JwLQ", ""},
		{"PATCH", "gateway/groups/" + parent, "", `{"models":[],"metadata":{"name":"n"}}`},
		{"DELETE", "gateway/groups/" + parent, "", ""},
		{"GET", "gateway/groups/" + parent + "/usage", "", ""},
		{"POST", "gateway/groups/" + parent + "/api_keys", "", `{"name":"k"}`},
		{"POST", "gateway/groups/" + parent + "/api_keys/register", "", `{"key":"x"}`},
		{"GET", "gateway/groups/" + parent + "/api_keys/mgk_aaaaaaaaaaaa", "", ""},
		{"DELETE", "gateway/groups/" + parent + "/api_keys/mgk_aaaaaaaaaaaa", "", ""},
		{"POST", "gateway/endpoints", "", `{"slug":"s","targets":[{"provider":"OPENAI","base_url":"http://x"}],"timeout_ms":5}`},
		{"PATCH", "gateway/endpoints/ep-1", "", `{"targets":[]}`},
		{"POST", "api_keys", "", `{"type":"PERSONAL","name":"me"}`},
		{"DELETE", "api_keys/mgw_fuzzfuzzfuzz", "", ""},
		{"GET", "spec", "", ""},
		{"POST", "models/m/deployments/production/logs", "", `{"search_pattern":"(","min_level":"ERROR","direction":"asc","limit":5,"start_epoch_millis":0}`},
	} {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		req := httptest.NewRequest(http.MethodGet, "/", bytes.NewReader(body))
		req.Method = method
		req.URL.Path = "/v1/" + path
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s /v1/%s?%s with body %q: status %d: %s", method, path, query, body, rec.Code, rec.Body.String())
		}
	})
}
