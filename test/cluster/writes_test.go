package cluster_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/stack"
)

// writeRoutes are the write operations (POST, PUT, PATCH, DELETE) of the /v1 OpenAPI document, as "METHOD
// /path/{template}". The tour calls each of them on the installed chart and wants a 2xx from each, so a verb that
// gatewayd's Role lacks fails the suite (docs/rbac.md); TestTourWriteRoutesMatchOpenAPI, which needs no cluster,
// keeps the list equal to gatewayd/rest/openapi.json.
var writeRoutes = []string{
	"POST /v1/gateway/groups",
	"PATCH /v1/gateway/groups/{group_id}",
	"DELETE /v1/gateway/groups/{group_id}",
	"POST /v1/gateway/groups/{group_id}/api_keys",
	"POST /v1/gateway/groups/{group_id}/api_keys/register",
	"DELETE /v1/gateway/groups/{group_id}/api_keys/{api_key_prefix}",
	"POST /v1/gateway/endpoints",
	"PATCH /v1/gateway/endpoints/{endpoint_id}",
	"DELETE /v1/gateway/endpoints/{endpoint_id}",
	"POST /v1/api_keys",
	"PATCH /v1/api_keys/{prefix}",
	"DELETE /v1/api_keys/{prefix}",
	"POST /v1/teams/{team_id}/api_keys",
	"POST /v1/models",
	"PATCH /v1/models/{model_id}",
	"DELETE /v1/models/{model_id}",
	"DELETE /v1/models/{model_id}/deployments/{deployment_id}",
	"POST /v1/models/{model_id}/deployments/{deployment_id}/activate",
	"POST /v1/models/{model_id}/deployments/{deployment_id}/deactivate",
	"POST /v1/models/{model_id}/deployments/{deployment_id}/retry",
	"POST /v1/models/{model_id}/deployments/{deployment_id}/logs",
	"POST /v1/models/{model_id}/environments/{env_name}/activate",
	"POST /v1/models/{model_id}/environments/{env_name}/deactivate",
	"POST /v1/models/{model_id}/environments/{env_name}/promote",
	"POST /v1/sandboxes/images",
	"DELETE /v1/sandboxes/images/{image_name}",
	"PUT /v1/sandboxes/uploads/{build}",
	"DELETE /v1/chains/{chain_id}",
	"POST /v1/chains/{chain_id}/environments/{env_name}/activate",
	"POST /v1/chains/{chain_id}/environments/{env_name}/deactivate",
	"POST /v1/chains/{chain_id}/environments/{env_name}/promote",
}

// TestTourWriteRoutesMatchOpenAPI keeps writeRoutes equal to the write operations of the OpenAPI document, so a
// new write route is called on the installed chart by the cluster suite. It needs no cluster.
func TestTourWriteRoutesMatchOpenAPI(t *testing.T) {
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "gatewayd", "rest", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch m := strings.ToUpper(method); m {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				documented = append(documented, m+" "+path)
			}
		}
	}
	for _, op := range documented {
		if !slices.Contains(writeRoutes, op) {
			t.Errorf("openapi.json documents %s, which the cluster tour does not call: add it to writeRoutes and call it in tour.everyWrite", op)
		}
	}
	for _, op := range writeRoutes {
		if !slices.Contains(documented, op) {
			t.Errorf("writeRoutes lists %s, which openapi.json does not document", op)
		}
	}
	if len(writeRoutes) != len(slices.Compact(slices.Sorted(slices.Values(writeRoutes)))) {
		t.Errorf("writeRoutes lists a route twice")
	}
	// The tour's record of its calls finds each route from a path with its parameters filled in, and no other.
	param := regexp.MustCompile(`\{[^/]+\}`)
	for _, op := range writeRoutes {
		method, path, _ := strings.Cut(param.ReplaceAllString(op, "p-1"), " ")
		var l writeLog
		l.record(method, path, answer{code: http.StatusOK})
		if len(l.answers) != 1 || len(l.answers[op]) != 1 {
			t.Errorf("%s %s is recorded as %v, want %s", method, path, slices.Collect(maps.Keys(l.answers)), op)
		}
	}
}

// writeLog records the tour's answers to the write routes, by route: whatever step made the call.
type writeLog struct {
	mu      sync.Mutex
	answers map[string][]answer
}

// routePatterns match a request's method and path to its entry of writeRoutes.
var routePatterns = func() map[string]*regexp.Regexp {
	out := map[string]*regexp.Regexp{}
	param := regexp.MustCompile(`\{[^/]+\}`)
	for _, op := range writeRoutes {
		literal := param.Split(op, -1)
		for i := range literal {
			literal[i] = regexp.QuoteMeta(literal[i])
		}
		out[op] = regexp.MustCompile("^" + strings.Join(literal, `[^/]+`) + "$")
	}
	return out
}()

// record keeps a's answer when method and path are a write route's.
func (l *writeLog) record(method, path string, a answer) {
	if l == nil {
		return
	}
	for op, re := range routePatterns {
		if re.MatchString(method + " " + path) {
			l.mu.Lock()
			if l.answers == nil {
				l.answers = map[string][]answer{}
			}
			l.answers[op] = append(l.answers[op], a)
			l.mu.Unlock()
			return
		}
	}
}

// lacksPermission reports whether a is gatewayd's answer to a call the API server's RBAC refused it
// (gatewayd/rest/kit.WriteKubeError).
func lacksPermission(a answer) bool {
	msg, _ := a.body["error"].(string)
	return a.code == http.StatusServiceUnavailable && strings.Contains(msg, "lacks the permission")
}

// check fails t for every write route the tour never called or never saw succeed, and for every answer that
// says gatewayd lacks a permission.
func (l *writeLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, op := range writeRoutes {
		as := l.answers[op]
		for _, a := range as {
			if lacksPermission(a) {
				t.Errorf("%s: gatewayd lacks a permission on the installed chart: %s", op, a)
			}
		}
		switch {
		case len(as) == 0:
			t.Errorf("%s: the tour never called it", op)
		case !slices.ContainsFunc(as, func(a answer) bool { return a.code >= 200 && a.code < 300 }):
			t.Errorf("%s: no call succeeded; the last answered %s", op, as[len(as)-1])
		}
	}
}

// everyWrite calls the write routes of openapi.json that the tour's other steps do not, each until it succeeds,
// on objects of its own (the sandbox image is the ZIP build's), and then checks that every write route was
// called and succeeded at least once through gatewayd's Service, with the chart's RBAC.
func (tr *tour) everyWrite(t *testing.T) {
	// Each part runs even when another failed, so one run shows every route that fails.
	t.Run("groups, their keys and endpoints", tr.groupWrites)
	t.Run("workspace and team keys", tr.workspaceKeyWrites)
	t.Run("a model and its deployments", tr.modelWrites)
	t.Run("a chain", tr.chainWrites)
	t.Run("the ZIP build's image deleted", func(t *testing.T) {
		// The push and the upload were sandboxZip's.
		tr.write(t, http.MethodDelete, "/v1/sandboxes/images/agent", nil, map[string]string{"X-Team-Id": "red"}, http.StatusOK)
	})
	tr.writes.check(t)
}

// write sends one management call as the admin key until it answers want (two minutes at most: the list routes'
// cache and the snapshot may not show an object created a moment before), failing at once on gatewayd lacking a
// permission.
func (tr *tour) write(t *testing.T, method, path string, body any, header map[string]string, want int) answer {
	t.Helper()
	return tr.writeAs(t, tr.p.APIKey, method, path, body, header, want)
}

// writeAs is write with another workspace key.
func (tr *tour) writeAs(t *testing.T, key, method, path string, body any, header map[string]string, want int) answer {
	t.Helper()
	var a answer
	eventually(t, 2*time.Minute, method+" "+path, func() error {
		a = tr.call(t, method, path, "Bearer "+key, body, header)
		if lacksPermission(a) {
			t.Fatalf("%s %s: %s", method, path, a)
		}
		if a.code != want {
			return fmt.Errorf("%s, want %d", a, want)
		}
		return nil
	})
	return a
}

func str(t *testing.T, a answer, field string) string {
	t.Helper()
	s, _ := a.body[field].(string)
	if s == "" {
		t.Fatalf("no %s in %s", field, a)
	}
	return s
}

// groupWrites: a group, its minted and registered keys, an Endpoint.
func (tr *tour) groupWrites(t *testing.T) {
	g := tr.write(t, http.MethodPost, "/v1/gateway/groups", apibody.Group("tour-writes", "", nil, apibody.Model(stack.EndpointSlug, nil, nil)), nil, http.StatusCreated)
	group := "/v1/gateway/groups/" + str(t, g, "id")
	tr.write(t, http.MethodPatch, group, map[string]any{"metadata": map[string]any{"name": "Tour writes, renamed"}}, nil, http.StatusOK)
	minted := tr.write(t, http.MethodPost, group+"/api_keys", map[string]any{"name": "tour-minted"}, nil, http.StatusCreated)
	tr.write(t, http.MethodDelete, group+"/api_keys/"+str(t, minted, "prefix"), nil, nil, http.StatusOK)

	// Registration is signed with the Workspace's key; the tour gives the Workspace one whose private half it holds.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ws := &gatewayv1.Workspace{}
	if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: cluster.WorkspaceNamespace, Name: stack.WorkspaceName}, ws); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ws.DeepCopy())
	ws.Spec.KeyRegistration = &gatewayv1.KeyRegistration{PublicKey: base64.StdEncoding.EncodeToString(pub)}
	if err := tr.p.Client.Patch(tr.ctx, ws, patch); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{"name": "tour-registered", "key": "tourRegKey_" + ids.New(ids.KeySecret)})
	if err != nil {
		t.Fatal(err)
	}
	tr.write(t, http.MethodPost, group+"/api_keys/register", json.RawMessage(raw),
		map[string]string{"X-Service-Signature": base64.StdEncoding.EncodeToString(ed25519.Sign(priv, raw))}, http.StatusOK)
	tr.write(t, http.MethodDelete, group, nil, nil, http.StatusOK)

	e := tr.write(t, http.MethodPost, "/v1/gateway/endpoints", map[string]any{"slug": "tour/writes",
		"targets": []any{map[string]any{"provider": "OPENAI", "base_url": tr.p.UpstreamURL, "target_model": stack.EndpointModel}}}, nil, http.StatusCreated)
	endpoint := "/v1/gateway/endpoints/" + str(t, e, "id")
	tr.write(t, http.MethodPatch, endpoint, map[string]any{"timeout_ms": 5000}, nil, http.StatusOK)
	tr.write(t, http.MethodDelete, endpoint, nil, nil, http.StatusOK)
}

// workspaceKeyWrites: a workspace key created, renamed and deleted, and a team's key, by an organization admin's
// PERSONAL key (the admin key manages everything but workspace keys, and a key-management key renames none),
// brought in a Secret as kubectl would.
func (tr *tour) workspaceKeyWrites(t *testing.T) {
	keys, err := stack.NewWorkspaceKey()
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.WorkspaceNamespace
	tr.createAll(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tour-writes-keys", Namespace: ns}, Data: map[string][]byte{"api_key": []byte(keys)}},
		&gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: "tour-writes-keys", Namespace: ns}, Spec: gatewayv1.WorkspaceAPIKeySpec{
			Type: gatewayv1.KeyTypePersonal, DisplayName: "tour-writes-keys",
			Owner:     &gatewayv1.KeyOwner{UserID: "tour-admin", Email: "tour-admin@example.com", Name: "Tour admin", Role: gatewayv1.OrgRoleAdmin},
			KeySource: gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "tour-writes-keys", Key: "api_key"}}}},
		&gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: "tour-writes", Namespace: ns}, Spec: gatewayv1.TeamSpec{DisplayName: "Tour writes"}})

	k := tr.writeAs(t, keys, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "tour-writes"}, nil, http.StatusCreated)
	key := "/v1/api_keys/" + str(t, k, "api_key")[:16]
	tr.writeAs(t, keys, http.MethodPatch, key, map[string]any{"name": "tour-writes-renamed"}, nil, http.StatusOK)
	tr.writeAs(t, keys, http.MethodDelete, key, nil, nil, http.StatusOK)
	tr.writeAs(t, keys, http.MethodPost, "/v1/teams/tour-writes/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "tour-writes-team"}, nil, http.StatusCreated)
}

// modelWrites: a model created through the API, its deployments (applied as kubectl would: the API creates
// none) activated, deactivated, promoted, read, retried once failed, and deleted with the model.
func (tr *tour) modelWrites(t *testing.T) {
	const model = "tour-writes"
	tr.write(t, http.MethodPost, "/v1/models", map[string]any{"id": model, "display_name": "Tour writes"}, nil, http.StatusCreated)
	// A port nothing listens on: the broken deployment never becomes ready, and fails after its startup timeout.
	ln, err := tr.c.Netns.Listen("tcp", net.JoinHostPort(cluster.ClientIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	ns := cluster.WorkspaceNamespace
	deployment := func(name, url string, startup int32) client.Object {
		return &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: model, Source: gatewayv1.DeploymentSource{URL: url}, StartupTimeoutSeconds: startup}}
	}
	tr.createAll(t, deployment("tour-writes-v1", tr.p.ModelURL, 60), deployment("tour-writes-v2", tr.p.ModelURL, 60), deployment("tour-writes-broken", closed, 3))

	base := "/v1/models/" + model
	tr.write(t, http.MethodPatch, base, map[string]any{"display_name": "Tour writes, renamed",
		"environments": []any{map[string]any{"name": gatewayv1.EnvironmentProduction, "deployment": "tour-writes-v1"}}}, nil, http.StatusOK)
	v1 := base + "/deployments/tour-writes-v1"
	tr.waitStatus(t, v1, 2*time.Minute, "ACTIVE")
	tr.waitStatus(t, base+"/deployments/tour-writes-v2", 2*time.Minute, "ACTIVE")
	tr.write(t, http.MethodPost, v1+"/deactivate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, v1+"/activate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, v1+"/logs", map[string]any{"limit": 10}, nil, http.StatusOK)
	production := base + "/environments/" + gatewayv1.EnvironmentProduction
	tr.write(t, http.MethodPost, production+"/deactivate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, production+"/activate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, production+"/promote", map[string]any{"deployment_id": "tour-writes-v2"}, nil, http.StatusOK)

	broken := base + "/deployments/tour-writes-broken"
	tr.waitStatus(t, broken, 2*time.Minute, "DEPLOY_FAILED")
	if r := tr.write(t, http.MethodPost, broken+"/retry", nil, nil, http.StatusOK); r.body["retried"] != true {
		t.Fatalf("retry of a DEPLOY_FAILED deployment: %s", r)
	}
	tr.write(t, http.MethodDelete, v1, nil, nil, http.StatusOK)
	tr.write(t, http.MethodDelete, base, nil, nil, http.StatusOK)
}

// chainWrites: a chain of its own, applied as kubectl would (the API creates none), its production environment
// deactivated, activated and promoted to a second deployment, then deleted.
func (tr *tour) chainWrites(t *testing.T) {
	const chain = "tour-writes-chain"
	ns := cluster.WorkspaceNamespace
	deployment := func(name string) client.Object {
		return &gatewayv1.ChainDeployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gatewayv1.ChainDeploymentSpec{ChainID: chain, Entrypoint: stack.ChainEntrypoint, Chainlets: []gatewayv1.Chainlet{
				{Name: stack.ChainEntrypoint, Source: gatewayv1.DeploymentSource{URL: tr.p.ModelURL}},
				{Name: stack.ChainOtherChainlet, Source: gatewayv1.DeploymentSource{URL: tr.p.ModelURL}},
			}}}
	}
	tr.createAll(t, deployment(chain+"-v1"), deployment(chain+"-v2"),
		&gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Name: chain, Namespace: ns}, Spec: gatewayv1.ChainSpec{DisplayName: "Tour writes",
			Environments: []gatewayv1.ChainEnvironment{{Name: gatewayv1.EnvironmentProduction, Deployment: chain + "-v1"}}}})
	production := "/v1/chains/" + chain + "/environments/" + gatewayv1.EnvironmentProduction
	tr.write(t, http.MethodPost, production+"/deactivate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, production+"/activate", nil, nil, http.StatusOK)
	tr.write(t, http.MethodPost, production+"/promote", map[string]any{"deployment_id": chain + "-v2"}, nil, http.StatusOK)
	tr.write(t, http.MethodDelete, "/v1/chains/"+chain, nil, nil, http.StatusOK)
}
