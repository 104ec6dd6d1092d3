package gatewayd_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// modelServer is a real model server on 127.0.0.1: /predict answers the request's body and Content-Type back,
// so a test can tell that bytes went through unchanged both ways, and records its name in served, so a test
// making one call at a time can tell which deployment served it.
func modelServer(t *testing.T, name string, served *atomic.Value) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/predict", "/v2/predict":
			body, _ := io.ReadAll(r.Body)
			served.Store(name)
			w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
			_, _ = w.Write(body)
		case "/hang":
			// The server notices a closed connection only once the body is read.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// modelFixture is a gatewayd serving one model, "sentiment", with url deployments v1 (production), v2
// (staging, predict path /v2/predict) and dev (development), and the keys of the scoping cases.
type modelFixture struct {
	*fixture
	keys   map[string]string
	served *atomic.Value
}

func newModelFixture(t *testing.T, upstreamTimeout time.Duration) *modelFixture {
	return newModelFixtureOpts(t, fixtureOpts{upstreamTimeout: upstreamTimeout})
}

// newModelFixtureOpts is newModelFixture with more of gatewayd's options (o's mode and workspace keys are the
// fixture's own).
func newModelFixtureOpts(t *testing.T, o fixtureOpts) *modelFixture {
	served := &atomic.Value{}
	v1, v2, dev := modelServer(t, "v1", served), modelServer(t, "v2", served), modelServer(t, "dev", served)
	keys := map[string]string{}
	var records []snapshot.WorkspaceAPIKey
	add := func(id, typ string, models, envs []string) {
		key, rec := gatewaytest.NewWorkspaceKey(id, typ)
		rec.Models, rec.Environments = models, envs
		keys[id] = key
		records = append(records, rec)
	}
	add("invoke", "WORKSPACE_INVOKE", nil, nil)
	add("invoke-other-model", "WORKSPACE_INVOKE", []string{"other"}, nil)
	add("invoke-staging", "WORKSPACE_INVOKE", nil, []string{"staging"})
	add("metrics", "WORKSPACE_EXPORT_METRICS", nil, nil)
	add("keys", "WORKSPACE_MANAGE_API_KEYS", nil, nil)
	add("manage", "WORKSPACE_MANAGE_ALL", nil, nil)
	o.mode, o.workspace = "INDEPENDENT", records
	f := newFixture(t, o)
	f.snap.Models = []snapshot.ServedModel{
		{ID: "other", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "o1"}}},
		{ID: "sentiment", Development: "dev", Environments: []snapshot.EnvironmentRoute{
			{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "v2"}}},
	}
	dep := func(id, model, url, path string) snapshot.Deployment {
		return snapshot.Deployment{ID: id, ModelID: model, Kind: snapshot.DeploymentURL, URL: url, PredictPath: path, Active: true, Ready: true}
	}
	f.snap.Deployments = []snapshot.Deployment{
		dep("dev", "sentiment", dev.URL, "/predict"),
		dep("o1", "other", v1.URL, "/predict"),
		dep("v1", "sentiment", v1.URL, "/predict"),
		dep("v2", "sentiment", v2.URL, "/v2/predict"),
	}
	f.publish()
	return &modelFixture{fixture: f, keys: keys, served: served}
}

// predict calls path with key and body; it returns the status, the model server that answered ("" when none
// did) and the body.
func (f *modelFixture) predict(path, auth, contentType string, body []byte) (int, string, []byte, http.Header) {
	f.t.Helper()
	f.served.Store("")
	req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	gatewaytest.WantStringDetail(f.t, "POST "+path, resp.StatusCode, b)
	return resp.StatusCode, f.served.Load().(string), b, resp.Header
}

func (f *modelFixture) deployment(id string) *snapshot.Deployment {
	for i := range f.snap.Deployments {
		if f.snap.Deployments[i].ID == id {
			return &f.snap.Deployments[i]
		}
	}
	f.t.Fatalf("no deployment %s", id)
	return nil
}

// TestPredictRoutes: each of the four route prefixes reaches the deployment it names, for Bearer and Api-Key.
func TestPredictRoutes(t *testing.T) {
	f := newModelFixture(t, 0)
	for _, tc := range []struct{ path, want string }{
		{"/models/sentiment/production/predict", "v1"},
		{"/models/sentiment/development/predict", "dev"},
		{"/models/sentiment/environments/staging/predict", "v2"},
		{"/models/sentiment/environments/production/predict", "v1"},
		{"/models/sentiment/deployment/v2/predict", "v2"},
	} {
		for _, scheme := range []string{"Bearer ", "Api-Key "} {
			status, by, body, _ := f.predict(tc.path, scheme+f.keys["invoke"], "application/json", []byte(`{"text":"hi"}`))
			if status != http.StatusOK || by != tc.want || string(body) != `{"text":"hi"}` {
				t.Errorf("%s (%s): status %d from %q, body %s; want 200 from %s", tc.path, scheme, status, by, body, tc.want)
			}
		}
	}
}

// TestPredictBodiesUnchanged: a 64 KiB octet-stream body and a multipart body arrive byte-identical, and so do
// the answers.
func TestPredictBodiesUnchanged(t *testing.T) {
	f := newModelFixture(t, 0)
	blob := make([]byte, 64<<10)
	_, _ = rand.Read(blob)
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	part, _ := mw.CreateFormFile("image", "cat.png")
	_, _ = part.Write(blob[:4096])
	_ = mw.WriteField("threshold", "0.5")
	_ = mw.Close()
	for _, tc := range []struct {
		name, contentType string
		body              []byte
	}{
		{"octet-stream", "application/octet-stream", blob},
		{"multipart", mw.FormDataContentType(), form.Bytes()},
	} {
		status, _, got, h := f.predict("/models/sentiment/production/predict", "Bearer "+f.keys["invoke"], tc.contentType, tc.body)
		if status != http.StatusOK || !bytes.Equal(got, tc.body) || h.Get("Content-Type") != tc.contentType {
			t.Errorf("%s: status %d, %d bytes back (want %d identical), content type %q", tc.name, status, len(got), len(tc.body), h.Get("Content-Type"))
		}
	}
}

// TestPredictErrors: the model-call errors of docs/rest-api.md, exactly, with the key scoping of its "Key types and
// permission rules".
func TestPredictErrors(t *testing.T) {
	f := newModelFixture(t, 300*time.Millisecond)
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + down.Addr().String()
	down.Close()
	hang := modelServer(t, "hang", f.served)
	f.snap.Models = append(f.snap.Models, snapshot.ServedModel{ID: "broken", Environments: []snapshot.EnvironmentRoute{
		{Name: "production", Deployment: "down"}, {Name: "hang", Deployment: "hang"}, {Name: "loading", Deployment: "loading"},
		{Name: "empty"}}})
	f.snap.Deployments = append(f.snap.Deployments,
		snapshot.Deployment{ID: "down", ModelID: "broken", Kind: snapshot.DeploymentURL, URL: downURL, PredictPath: "/predict", Active: true, Ready: true},
		snapshot.Deployment{ID: "hang", ModelID: "broken", Kind: snapshot.DeploymentURL, URL: hang.URL, PredictPath: "/hang", Active: true, Ready: true},
		snapshot.Deployment{ID: "loading", ModelID: "broken", Kind: snapshot.DeploymentURL, URL: hang.URL, PredictPath: "/predict", Active: true},
	)
	f.deployment("v2").Active = false
	f.publish()

	for _, tc := range []struct {
		name, path, key string
		status          int
		code            string
	}{
		{"no key", "/models/sentiment/production/predict", "", 401, "unauthorized"},
		{"unknown key", "/models/sentiment/production/predict", "Bearer mgw_nope_nope_nope_nope", 401, "unauthorized"},
		{"unknown model", "/models/nope/production/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"unknown environment", "/models/sentiment/environments/nope/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"nothing promoted", "/models/broken/environments/empty/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"deployment of another model", "/models/sentiment/deployment/o1/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"inactive deployment", "/models/sentiment/environments/staging/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"inactive deployment by id", "/models/sentiment/deployment/v2/predict", f.keys["invoke"], 404, "model_does_not_exist"},
		{"down", "/models/broken/production/predict", f.keys["invoke"], 502, "model_unavailable"},
		{"hangs", "/models/broken/environments/hang/predict", f.keys["invoke"], 504, "timeout"},
		{"not ready", "/models/broken/environments/loading/predict", f.keys["invoke"], 503, "model_not_ready"},
		{"metrics key", "/models/sentiment/production/predict", f.keys["metrics"], 403, "forbidden"},
		{"key-management key", "/models/sentiment/production/predict", f.keys["keys"], 403, "forbidden"},
		{"key scoped to another model", "/models/sentiment/production/predict", f.keys["invoke-other-model"], 403, "forbidden"},
		{"staging key on production", "/models/sentiment/production/predict", f.keys["invoke-staging"], 403, "forbidden"},
		{"staging key by deployment id", "/models/sentiment/deployment/v1/predict", f.keys["invoke-staging"], 403, "forbidden"},
	} {
		auth := tc.key
		if auth != "" && !strings.HasPrefix(auth, "Bearer ") {
			auth = "Bearer " + auth
		}
		status, _, body, h := f.predict(tc.path, auth, "application/json", []byte(`{}`))
		var env struct {
			Error     string `json:"error"`
			ErrorCode string `json:"error_code"`
		}
		if err := json.Unmarshal(body, &env); err != nil || status != tc.status || env.ErrorCode != tc.code || env.Error == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
		if tc.status == 503 && h.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", tc.name)
		}
	}
	// The scoped keys still call what they are scoped to.
	if status, by, _, _ := f.predict("/models/sentiment/environments/staging/predict", "Bearer "+f.keys["invoke-staging"], "application/json", nil); status != 404 {
		t.Errorf("staging key on the inactive staging deployment: %d from %q, want 404", status, by)
	}
	if status, _, _, _ := f.predict("/models/other/production/predict", "Bearer "+f.keys["invoke-other-model"], "application/json", nil); status != 200 {
		t.Errorf("key scoped to model other, calling it: %d, want 200", status)
	}

	// Activating the deployment again brings its routes back.
	f.deployment("v2").Active = true
	f.publish()
	if status, by, _, _ := f.predict("/models/sentiment/environments/staging/predict", "Bearer "+f.keys["invoke-staging"], "application/json", nil); status != 200 || by != "v2" {
		t.Errorf("after activation: %d from %q, want 200 from v2", status, by)
	}
}

// TestPredictMetrics: predict calls are counted with the model id, and a caller's made-up model id is no label.
func TestPredictMetrics(t *testing.T) {
	f := newModelFixture(t, 0)
	f.predict("/models/sentiment/production/predict", "Bearer "+f.keys["invoke"], "application/json", nil)
	f.predict("/models/made-up/production/predict", "Bearer "+f.keys["invoke"], "application/json", nil)
	ws := `,workspace="` + f.ns + `"}`
	if got := f.metric(`service_model_api_inference_requests_total{external_entity_id="",model="sentiment",status_code="200"` + ws); got != 1 {
		t.Errorf("predict calls counted %v, want 1", got)
	}
	if f.metric(`service_model_api_inference_requests_total{external_entity_id="",model="made-up",status_code="404"`+ws) > 0 {
		t.Error("a caller-supplied model id became a label value")
	}
	if got := f.metric(`modelgate_gateway_request_duration_seconds_count{route="POST /models/{model_id}/production/predict",status_code="200"}`); got != 1 {
		t.Errorf("request histogram count %v, want 1", got)
	}
}
