package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/stack"
)

// TestClusterTargetsAcrossReplicas: an Endpoint of two targets, the first at the pod's own loopback where nothing
// listens (tried first, priority 0), the second the demo upstream. Three calls of a federated key through one
// gatewayd replica take the first target out of rotation there only (cooldown is per replica); the targets route
// read through the other replica shows it cooling all the same, having read the first replica's state on its
// metrics listener through the chart's peers Service, with each replica's own state listed and none unanswered.
func TestClusterTargetsAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tr := twoReplicas(t, ctx, standaloneRedis)
	replicas := tr.gatewaydPods(t)
	caller, reader := replicas[0], replicas[1]
	admin := "Bearer " + tr.p.APIKey
	must := func(base, method, path, auth string, body any, want int) answer {
		t.Helper()
		a, err := tr.doAt(base, method, path, auth, body, nil)
		if err != nil || a.code != want {
			t.Fatalf("%s %s at %s: %v %s, want %d", method, path, base, err, a, want)
		}
		return a
	}
	const slug = "pair/chat"
	ep := must(caller, http.MethodPost, "/v1/gateway/endpoints", admin, map[string]any{"slug": slug, "targets": []any{
		map[string]any{"provider": "OPENAI", "base_url": "http://127.0.0.1:1/v1"},
		map[string]any{"provider": "OPENAI", "base_url": tr.p.UpstreamURL, "target_model": stack.EndpointModel, "priority": 1,
			"api_key_secret_ref": map[string]any{"name": stack.UpstreamSecretName, "key": "api_key"}},
	}}, http.StatusCreated)
	id := ep.body["id"].(string)
	g := must(caller, http.MethodPost, "/v1/gateway/groups", admin, apibody.Group("pair", "INDEPENDENT", nil, apibody.Model(slug, nil, nil)), http.StatusCreated)
	k := must(caller, http.MethodPost, "/v1/gateway/groups/"+g.body["id"].(string)+"/api_keys", admin, map[string]any{"name": "pair"}, http.StatusCreated)
	key := "Api-Key " + k.body["api_key"].(string)
	for i := range 3 {
		must(caller, http.MethodPost, "/v1/chat/completions", key,
			map[string]any{"model": slug, "messages": []any{map[string]any{"role": "user", "content": "hello"}}}, http.StatusOK)
		t.Logf("call %d answered by the second target", i+1)
	}

	var last answer
	eventually(t, time.Minute, "the other replica's targets route showing the first target cooling", func() error {
		a, err := tr.doAt(reader, http.MethodGet, "/v1/gateway/endpoints/"+id+"/targets", admin, nil, nil)
		if err != nil || a.code != http.StatusOK {
			return fmt.Errorf("%v %s", err, a)
		}
		last = a
		targets, _ := a.body["targets"].([]any)
		if len(targets) != 2 {
			return fmt.Errorf("targets %s", a.raw)
		}
		t0 := targets[0].(map[string]any)
		if t0["state"] != "cooling" {
			return fmt.Errorf("target-0 %v", t0)
		}
		return nil
	})
	targets := last.body["targets"].([]any)
	t0, t1 := targets[0].(map[string]any), targets[1].(map[string]any)
	r0, _ := t0["replicas"].([]any)
	unanswered, _ := last.body["unanswered_replicas"].([]any)
	if len(r0) != 2 || unanswered == nil || len(unanswered) != 0 {
		t.Fatalf("target-0 seen on %d replicas, unanswered %v; want both replicas and none unanswered: %s", len(r0), last.body["unanswered_replicas"], last.raw)
	}
	own, other := r0[0].(map[string]any), r0[1].(map[string]any)
	if own["replica"] != last.body["replica"] || own["state"] != "up" || other["state"] != "cooling" || other["replica"] == own["replica"] ||
		other["cooling_until"] != t0["cooling_until"] {
		t.Errorf("target-0's replicas: %v then %v; want the reader's own (up) first, then the caller's (cooling until the merged time %v)", own, other, t0["cooling_until"])
	}
	tries := func(m map[string]any, outcome string) float64 {
		return m["tries_last_hour"].(map[string]any)[outcome].(float64)
	}
	if tries(t0, "unreachable") != 3 || t1["state"] != "up" || tries(t1, "ok") != 3 {
		t.Errorf("merged tries: target-0 %v, target-1 %v; want 3 refused tries of target-0 and 3 answers of target-1, up", t0, t1)
	}
}
