package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/stack"
)

// watchLag is how late the second replica's watches deliver every event: a replica whose informer runs behind
// the one that answered a write, as a busy or distant one does.
const watchLag = 300 * time.Millisecond

// TestReadYourWritesOnEveryReplica writes through the stack's gatewayd and calls, right after each answer, a
// second gatewayd whose watches lag: a minted workspace key, a group and the federated key minted under it, an
// Endpoint's slug, and a model whose production environment points at a deployment (async_predict). None may
// miss: the second replica holds a call for something it does not serve until it has loaded every snapshot
// published before the call (docs/limits.md "Read-your-writes on every replica").
func TestReadYourWritesOnEveryReplica(t *testing.T) {
	s := theStack(t)
	waitDeploymentActive(t, s, stack.ModelDeploymentName)
	second := startLaggingReplica(t, s)
	run := strings.ToLower(randomBase62(t, 6))
	const pairs = 25
	misses := 0
	call := func(kind string, i int, r response, want int) {
		t.Helper()
		if missed(r) {
			misses++
			t.Logf("%s %d missed on the second replica: %s", kind, i, r)
			return
		}
		expect(t, r, want, "")
	}
	keys := keyManager(t, s, "rw-keys-"+run)
	for i := range pairs {
		// A workspace key, used on the model API.
		r := send(t, http.MethodPost, s.GatewayURL+"/v1/api_keys", "Bearer "+keys,
			map[string]any{"type": "WORKSPACE_INVOKE", "name": fmt.Sprintf("rw-%s-%d", run, i)})
		expect(t, r, http.StatusCreated, "")
		call("workspace key", i, chat(t, second, "Bearer "+str(t, r.body, "api_key"), stack.EndpointSlug), http.StatusOK)

		// A group and a federated key under it, used on the model API.
		r = admin(t, s, http.MethodPost, "/v1/gateway/groups", apibody.Group(fmt.Sprintf("rw-%s-%d", run, i), "CASCADING", nil,
			apibody.Model(stack.EndpointSlug, nil, nil)))
		expect(t, r, http.StatusCreated, "")
		r = admin(t, s, http.MethodPost, "/v1/gateway/groups/"+str(t, r.body, "id")+"/api_keys", map[string]any{"name": "rw"})
		expect(t, r, http.StatusCreated, "")
		call("federated key", i, chat(t, second, "Api-Key "+str(t, r.body, "api_key"), stack.EndpointSlug), http.StatusOK)

		// An Endpoint, called by its slug.
		slug := fmt.Sprintf("rw/%s-%d", run, i)
		r = admin(t, s, http.MethodPost, "/v1/gateway/endpoints", map[string]any{"slug": slug, "targets": []any{map[string]any{
			"provider": "OPENAI", "base_url": s.UpstreamURL, "target_model": stack.EndpointModel,
			"api_key_secret_ref": map[string]any{"name": stack.UpstreamSecretName, "key": "api_key"},
		}}})
		expect(t, r, http.StatusCreated, "")
		call("endpoint", i, chat(t, second, "Bearer "+s.APIKey, slug), http.StatusOK)

		// A model whose production environment serves a deployment that every replica already serves.
		model := fmt.Sprintf("rw-%s-%d", run, i)
		createServedDeployment(t, s, model+"-v1", model)
		r = admin(t, s, http.MethodPost, "/v1/models", map[string]any{"id": model,
			"environments": []any{map[string]any{"name": "production", "deployment": model + "-v1"}}})
		expect(t, r, http.StatusCreated, "")
		call("model", i, send(t, http.MethodPost, second+"/models/"+model+"/production/async_predict", "Bearer "+s.APIKey,
			map[string]any{"model_input": map[string]any{"text": "hello"}}), http.StatusCreated)
	}
	t.Logf("%d misses over %d create-then-call pairs on the second replica", misses, 4*pairs)
	if misses > 0 {
		t.Fatalf("%d of %d calls on the second replica missed what the first had answered as written", misses, 4*pairs)
	}
}

// missed reports whether r is the answer of a replica that does not serve what the call names: an unknown key, a
// model or deployment unknown, or a slug no Endpoint routes.
func missed(r response) bool {
	code, _ := r.body["error_code"].(string)
	return r.code == http.StatusUnauthorized || r.code == http.StatusNotFound ||
		r.code == http.StatusServiceUnavailable && code == httperr.CodeModelNotReady
}

// chat calls the OpenAI chat route of the gatewayd at base with authorization, for slug.
func chat(t *testing.T, base, authorization, slug string) response {
	t.Helper()
	return send(t, http.MethodPost, base+"/v1/chat/completions", authorization, map[string]any{
		"model": slug, "messages": []any{map[string]any{"role": "user", "content": "hello"}},
	})
}

// keyManager creates a key-management workspace key named name, as kubectl would, and returns its plaintext once
// the stack's gatewayd authenticates it.
func keyManager(t *testing.T, s *stack.Stack, name string) string {
	t.Helper()
	ctx := context.Background()
	k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAPIKeys, DisplayName: name}}
	if err := s.Client.Create(ctx, k); err != nil {
		t.Fatal(err)
	}
	var plain string
	waitFor(t, time.Minute, "the key-management key minted and served", func() bool {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil || k.Status.SecretName == "" {
			return false
		}
		sec := &corev1.Secret{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: k.Status.SecretName}, sec); err != nil {
			return false
		}
		plain = string(sec.Data["api_key"])
		return send(t, http.MethodGet, s.GatewayURL+"/v1/api_keys", "Bearer "+plain, nil).code == http.StatusOK
	})
	return plain
}

// createServedDeployment creates a url deployment of model at the demo model server, and waits until the stack's
// gatewayd serves it: the write under test is the model's.
func createServedDeployment(t *testing.T, s *stack.Stack, name, model string) {
	t.Helper()
	if err := s.Client.Create(context.Background(), &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec:       gatewayv1.ModelDeploymentSpec{ModelID: model, Source: gatewayv1.DeploymentSource{URL: s.ModelURL}},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the deployment "+name+" served", func() bool {
		ns := s.Gateway.View().Namespace(s.Namespace)
		return ns != nil && ns.Deployments[name] != nil
	})
}

// startLaggingReplica runs a second gatewayd in this process, on loopback, over the stack's API server through
// watches that deliver every event watchLag late, and returns its base URL once it is ready.
func startLaggingReplica(t *testing.T, s *stack.Stack) string {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return laggingWatches{rt} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, st, err := gatewayd.NewWithState(ctx, gatewayd.Options{RESTConfig: cfg, DisableDashboard: true},
		state.Config{Store: state.Embedded, Dir: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- errors.Join(g.Serve(ctx, ln), st.Close()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the second gatewayd stopped with: %v", err)
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("the second gatewayd stopped before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the second gatewayd never became ready")
	}
	return "http://" + ln.Addr().String()
}

// laggingWatches delays what every watch of the API server delivers by watchLag; other calls pass at once.
type laggingWatches struct{ next http.RoundTripper }

func (l laggingWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") == "true" {
		resp.Body = lateBody{resp.Body}
	}
	return resp, err
}

// lateBody hands over what it read watchLag after it arrived.
type lateBody struct{ io.ReadCloser }

func (b lateBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	time.Sleep(watchLag)
	return n, err
}
