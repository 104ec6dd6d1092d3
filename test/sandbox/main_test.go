// Package sandbox tests sandbox image pushes end to end on the local stack: gatewayd's routes and signed upload,
// the manager's SandboxImageBuild reconciler, and real OCI registries served in process on loopback sockets (the
// stack's workspace registry, plus source registries each test starts, one behind basic auth). Results are read
// back from the workspace registry with remote.Image.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/test/stack"
)

var st *stack.Stack

// Keys of the suite, by what they may do.
var (
	adminKey  string // WORKSPACE_MANAGE_ALL, workspace-wide: acts for every team, so must select one
	redKey    string // WORKSPACE_MANAGE_ALL bound to team red
	noTeamKey string // PERSONAL key of a MEMBER who belongs to no team
)

func TestMain(m *testing.M) {
	if os.Getenv(childRegistryEnv) != "" {
		serveChildRegistry() // the benchmark's registry, in a process of its own; never returns
	}
	// A short body deadline, so TestUploadOutlastsTheBodyDeadline can show that an upload is not bound by it.
	opts := stack.Options{Gatewayd: gatewayd.Options{BodyReadTimeout: bodyReadTimeout}}
	os.Exit(stack.RunSuite(m, "sandbox", opts, func(ctx context.Context, s *stack.Stack) error {
		st, adminKey = s, s.APIKey
		return seed(ctx)
	}))
}

// seed creates teams red and blue and the suite's keys, and waits until gatewayd serves them.
func seed(ctx context.Context) error {
	c, ns := st.Client, st.Namespace
	for _, t := range []string{"blue", "red"} {
		team := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: t}, Spec: gatewayv1.TeamSpec{DisplayName: t}}
		if err := c.Create(ctx, team); err != nil {
			return fmt.Errorf("failed to create team %s: %w", t, err)
		}
	}
	var err error
	if redKey, err = createKey(ctx, "sandbox-red", gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll, DisplayName: "sandbox-red", TeamID: "red"}); err != nil {
		return err
	}
	if noTeamKey, err = createKey(ctx, "sandbox-member", gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypePersonal, DisplayName: "sandbox-member",
		Owner: &gatewayv1.KeyOwner{UserID: "mallory", Role: gatewayv1.OrgRoleMember}}); err != nil {
		return err
	}
	// Wait until the snapshot gatewayd serves holds both teams and both keys.
	deadline := time.Now().Add(time.Minute)
	for {
		r := call(nil, redKey, "GET", "/v1/teams", nil, nil)
		m := call(nil, noTeamKey, "GET", "/v1/teams", nil, nil)
		a := call(nil, adminKey, "GET", "/v1/teams", nil, nil)
		if r.code == 200 && m.code == 200 && a.code == 200 && bytes.Contains(a.raw, []byte(`"blue"`)) && bytes.Contains(a.raw, []byte(`"red"`)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gatewayd did not serve the suite's teams and keys in time: %v %v %v", r, m, a)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createKey(ctx context.Context, name string, spec gatewayv1.WorkspaceAPIKeySpec) (string, error) {
	key, err := apikey.Mint(apikey.Workspace)
	if err != nil {
		return "", err
	}
	spec.Prefix, spec.Hash = apikey.Prefix(key), apikey.Hash(key)
	obj := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: name}, Spec: spec}
	if err := st.Client.Create(ctx, obj); err != nil {
		return "", fmt.Errorf("failed to create key %s: %w", name, err)
	}
	return key, nil
}

// response is one HTTP answer, with its body decoded when it is a JSON object.
type response struct {
	code int
	raw  []byte
	body map[string]any
}

func (r response) String() string { return fmt.Sprintf("HTTP %d: %s", r.code, bytes.TrimSpace(r.raw)) }

// call sends a request to gatewayd with key (none when empty) and headers, and a JSON body unless body is nil.
func call(t testing.TB, key, method, path string, body any, header map[string]string) response {
	if t != nil {
		t.Helper()
	}
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, st.GatewayURL+path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if t != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return response{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := response{code: resp.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &out.body)
	return out
}
