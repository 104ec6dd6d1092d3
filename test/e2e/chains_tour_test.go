package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// chainletServer is a chainlet served from outside the cluster (a url source). "back" upper-cases the text it
// gets; "front", the entrypoint, calls "back" at the address MODELGATE_CHAINLET_URLS gives it (read from the
// ChainDeployment's status, as a url chainlet must) and answers both. Until it has the addresses it answers 503.
type chainletServer struct {
	*httptest.Server
	urls atomic.Pointer[map[string]string]
}

func newChainlet(t *testing.T, name string) *chainletServer {
	c := &chainletServer{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusOK)
			return
		}
		var in struct {
			Text string `json:"text"`
		}
		if r.URL.Path != "/predict" || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if name == "back" {
			_ = json.NewEncoder(w).Encode(map[string]string{"upper": strings.ToUpper(in.Text)})
			return
		}
		urls := c.urls.Load()
		if urls == nil {
			http.Error(w, "chainlet URLs not known yet", http.StatusServiceUnavailable)
			return
		}
		body, _ := json.Marshal(in)
		resp, err := http.Post((*urls)["back"]+"/predict", "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		back, _ := io.ReadAll(resp.Body)
		_ = json.NewEncoder(w).Encode(map[string]any{"front": in.Text, "back": json.RawMessage(back)})
	}))
	t.Cleanup(c.Close)
	return c
}

// TestChainsTour runs a two-chainlet chain through the whole local stack over real sockets: the manager runs a
// ModelDeployment per chainlet and hands out their addresses, gatewayd serves run_remote and async_run_remote
// from the snapshot, and DELETE takes the chain out of service at once.
func TestChainsTour(t *testing.T) {
	s := theStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	front, back := newChainlet(t, "front"), newChainlet(t, "back")
	id := fmt.Sprintf("tour-%d", time.Now().UnixNano()%1e6)
	dep := id + "-v1"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Client.Create(ctx, &gatewayv1.ChainDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: dep},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: id, Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
			{Name: "front", Source: gatewayv1.DeploymentSource{URL: front.URL}},
			{Name: "back", Source: gatewayv1.DeploymentSource{URL: back.URL}},
		}},
	}))
	must(s.Client.Create(ctx, &gatewayv1.Chain{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: id},
		Spec:       gatewayv1.ChainSpec{Environments: []gatewayv1.ChainEnvironment{{Name: "production", Deployment: dep}}},
	}))

	// The front chainlet reads MODELGATE_CHAINLET_URLS where a url source finds it: the ChainDeployment's status.
	waitFor(t, time.Minute, "the chainlet URLs in the ChainDeployment's status", func() bool {
		cd := &gatewayv1.ChainDeployment{}
		if s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: dep}, cd) != nil || len(cd.Status.Chainlets) != 2 {
			return false
		}
		urls := cd.Status.Chainlets[0].ChainletURLs
		if cd.Status.Chainlets[0].Name != "front" || urls["back"] != back.URL {
			return false
		}
		front.urls.Store(&urls)
		return true
	})

	base := s.GatewayURL + "/chains/" + id
	auth := "Bearer " + s.APIKey
	var r response
	waitFor(t, time.Minute, "run_remote to be served", func() bool {
		r = send(t, http.MethodPost, base+"/production/run_remote", auth, map[string]any{"text": "hello chain"})
		return r.code == http.StatusOK
	})
	if !strings.Contains(string(r.raw), `"front":"hello chain"`) || !strings.Contains(string(r.raw), `"upper":"HELLO CHAIN"`) {
		t.Fatalf("run_remote = %s, want the entrypoint's answer with the other chainlet's inside", r)
	}
	r = send(t, http.MethodPost, base+"/deployment/"+dep+"/run_remote", "Api-Key "+s.APIKey, map[string]any{"text": "by id"})
	expect(t, r, http.StatusOK, "")
	r = send(t, http.MethodPost, base+"/environments/staging/run_remote", auth, map[string]any{"text": "x"})
	expect(t, r, http.StatusNotFound, "model_does_not_exist")
	r = send(t, http.MethodPost, base+"/production/run_remote", "", map[string]any{"text": "x"})
	expect(t, r, http.StatusUnauthorized, "")

	// Management reads.
	r = admin(t, s, http.MethodGet, "/v1/chains/"+id, nil)
	expect(t, r, http.StatusOK, "")
	if r.body["id"] != id || r.body["production_deployment_id"] != dep || r.body["deployments_count"] != float64(1) {
		t.Fatalf("GET chain = %s", r)
	}
	r = admin(t, s, http.MethodGet, "/v1/chains/"+id+"/deployments", nil)
	expect(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.raw), `"is_production":true`) || !strings.Contains(string(r.raw), `"name":"back"`) {
		t.Fatalf("GET chain deployments = %s", r)
	}

	r = admin(t, s, http.MethodGet, "/v1/chains", nil)
	expect(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.raw), `"id":"`+id+`"`) {
		t.Fatalf("GET chains = %s, want %s listed", r, id)
	}

	// Environment routes, as for models.
	r = admin(t, s, http.MethodGet, "/v1/chains/"+id+"/environments/production", nil)
	expect(t, r, http.StatusOK, "")
	if cur, _ := r.body["current_deployment"].(map[string]any); cur["id"] != dep || r.body["chain_id"] != id {
		t.Fatalf("GET chain environment = %s", r)
	}
	r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/activate", nil)
	expect(t, r, http.StatusOK, "")
	if r.body["success"] != true || r.body["no_op"] != true {
		t.Fatalf("activate an active environment = %s, want {success: true, no_op: true}", r)
	}
	r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/deactivate", nil)
	expect(t, r, http.StatusOK, "")
	if r.body["no_op"] != false {
		t.Fatalf("deactivate = %s, want no_op false", r)
	}
	waitFor(t, time.Minute, "a deactivated chain to answer 404", func() bool {
		r = send(t, http.MethodPost, base+"/production/run_remote", auth, map[string]any{"text": "x"})
		return r.code == http.StatusNotFound
	})
	r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/activate", nil)
	expect(t, r, http.StatusOK, "")
	waitFor(t, time.Minute, "the chain to be served again", func() bool {
		r = send(t, http.MethodPost, base+"/production/run_remote", auth, map[string]any{"text": "x"})
		return r.code == http.StatusOK
	})

	// Promote a second deployment to production; the first one's chainlets are scaled down.
	dep2 := id + "-v2"
	must(s.Client.Create(ctx, &gatewayv1.ChainDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: dep2},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: id, Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
			{Name: "front", Source: gatewayv1.DeploymentSource{URL: front.URL}},
			{Name: "back", Source: gatewayv1.DeploymentSource{URL: back.URL}},
		}},
	}))
	waitFor(t, time.Minute, "the second chain deployment to be promotable", func() bool {
		r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/promote", map[string]any{"deployment_id": dep2})
		return r.code == http.StatusOK
	})
	if cur, _ := r.body["current_deployment"].(map[string]any); cur["id"] != dep2 {
		t.Fatalf("promote = %s, want current_deployment %s", r, dep2)
	}
	r = send(t, http.MethodPost, base+"/production/run_remote", auth, map[string]any{"text": "promoted"})
	expect(t, r, http.StatusOK, "")
	md := &gatewayv1.ModelDeployment{}
	must(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: dep + "-front"}, md))
	if md.Annotations[gatewayv1.AnnotationScaledDownAt] == "" {
		t.Fatalf("the previous deployment's entrypoint was not asked to scale down: %v", md.Annotations)
	}
	r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/promote", map[string]any{"deployment_id": "nope"})
	expect(t, r, http.StatusBadRequest, "")
	dep = dep2

	// async_run_remote reaches SUCCEEDED, and its status names the chain.
	r = send(t, http.MethodPost, base+"/production/async_run_remote", auth, map[string]any{"model_input": map[string]any{"text": "later"}})
	expect(t, r, http.StatusCreated, "")
	reqID, _ := r.body["request_id"].(string)
	waitFor(t, time.Minute, "the async request to succeed", func() bool {
		r = send(t, http.MethodGet, base+"/async_request/"+reqID, "Api-Key "+s.APIKey, nil)
		return r.code == http.StatusOK && r.body["status"] == "SUCCEEDED"
	})
	if r.body["chain_id"] != id || r.body["deployment_id"] != dep || r.body["request_id"] != reqID {
		t.Fatalf("async status = %s, want chain_id %s and deployment_id %s", r, id, dep)
	}
	if _, ok := r.body["model_id"]; ok {
		t.Fatalf("async status = %s: chain_id stands in place of model_id", r)
	}
	r = send(t, http.MethodGet, s.GatewayURL+"/chains/other/async_request/"+reqID, auth, nil)
	expect(t, r, http.StatusNotFound, "")

	// DELETE answers at once, the chain is out of service right after, and a second DELETE is a 404.
	r = admin(t, s, http.MethodDelete, "/v1/chains/"+id, nil)
	expect(t, r, http.StatusOK, "")
	if r.body["id"] != id || r.body["deleted"] != true || len(r.body) != 2 {
		t.Fatalf("DELETE chain = %s, want {id, deleted: true}", r)
	}
	r = send(t, http.MethodPost, base+"/production/run_remote", auth, map[string]any{"text": "after delete"})
	expect(t, r, http.StatusNotFound, "model_does_not_exist")
	r = admin(t, s, http.MethodDelete, "/v1/chains/"+id, nil)
	expect(t, r, http.StatusNotFound, "")
	waitFor(t, time.Minute, "the finalizers to remove the chainlet deployments", func() bool {
		var list gatewayv1.ModelDeploymentList
		return s.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{gatewayv1.LabelChain: id}) == nil && len(list.Items) == 0
	})
}

// TestDemoChain calls the chain that the local stack seeds: two url chainlets on the demo model server.
func TestDemoChain(t *testing.T) {
	s := theStack(t)
	var r response
	waitFor(t, time.Minute, "the demo chain to be served", func() bool {
		r = send(t, http.MethodPost, s.GatewayURL+"/chains/"+stack.ChainName+"/production/run_remote", "Bearer "+s.APIKey,
			map[string]any{"text": "I love it"})
		return r.code == http.StatusOK
	})
	if r.body["label"] != "positive" {
		t.Fatalf("run_remote of the demo chain = %s, want the demo model's prediction", r)
	}
}
