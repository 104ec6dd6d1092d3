package cli

import (
	"context"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// TestModels: list, get and deployments; a second deployment promoted into staging and back, deactivated and
// activated (each change once, then a no-op); retry of a deployment that did not fail; logs; refusals naming the
// field; and the management 429 with its exit code.
func TestModels(t *testing.T) {
	admin := as(t, adminKey)
	const v2 = "demo-model-v2"
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: v2},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: stack.ModelName, Source: gatewayv1.DeploymentSource{URL: st.ModelURL}}}
	if err := st.Client.Create(context.Background(), md); err != nil {
		t.Fatal(err)
	}

	if r := admin.ok("models", "list"); !strings.Contains(r.stdout, "DEPLOYMENTS") || !strings.Contains(r.stdout, stack.ModelName) {
		t.Errorf("list: %v", r)
	}
	if got := admin.json("models", "get", stack.ModelName); got["production_deployment_id"] != stack.ModelDeploymentName {
		t.Errorf("get: %v", got)
	}
	waitActive(t, stack.ModelName, v2)

	r := admin.ok("models", "promote", stack.ModelName, "--environment", stack.ModelStagingEnv, "--deployment", v2, "--keep-previous")
	if !strings.Contains(r.stdout, stack.ModelStagingEnv) || !strings.Contains(r.stdout, v2) {
		t.Errorf("promote: %v", r)
	}
	back := admin.json("models", "promote", stack.ModelName, "--environment", stack.ModelStagingEnv, "--deployment", stack.ModelDeploymentName, "--keep-previous")
	if lookup(back, "current_deployment", "id") != stack.ModelDeploymentName {
		t.Errorf("promote back: %v", back)
	}

	if r := admin.ok("models", "deactivate", stack.ModelName, "--deployment", v2); !strings.Contains(r.stdout, "Deactivated deployment "+v2) {
		t.Errorf("deactivate: %v", r)
	}
	if got := admin.json("models", "deactivate", stack.ModelName, "--deployment", v2); got["no_op"] != true {
		t.Errorf("second deactivate: %v", got)
	}
	if r := admin.ok("models", "activate", stack.ModelName, "--deployment", v2); !strings.Contains(r.stdout, "Activated deployment "+v2) {
		t.Errorf("activate: %v", r)
	}
	if r := admin.ok("models", "activate", stack.ModelName, "--environment", stack.ModelStagingEnv); !strings.Contains(r.stdout, "Nothing to do") {
		t.Errorf("activate an active environment: %v", r)
	}
	if r := admin.ok("models", "retry", stack.ModelName, v2); !strings.Contains(r.stdout, "Not retried") {
		t.Errorf("retry: %v", r)
	}
	logs := admin.json("models", "logs", stack.ModelName, v2, "--limit", "5", "--since", "1h")
	if lines, _ := logs["logs"].([]any); len(lines) == 0 || len(lines) > 5 {
		t.Errorf("logs: %v", logs)
	}
	if r := admin.ok("models", "logs", stack.ModelName, v2, "--asc", "--level", "INFO"); !strings.Contains(r.stdout, "MESSAGE") {
		t.Errorf("logs table: %v", r)
	}

	admin.refused(exitInvalid, []string{"HTTP 400", "deployment_id: "}, "models", "promote", stack.ModelName, "--environment", stack.ModelStagingEnv)
	admin.refused(exitInvalid, []string{"HTTP 400", "min_level: "}, "models", "logs", stack.ModelName, v2, "--level", "LOUD")
	admin.refused(exitNotFound, []string{"HTTP 404"}, "models", "get", "no-such-model")
	admin.refused(exitUsage, []string{"give one of --deployment, --environment"}, "models", "activate", stack.ModelName)

	// retry allows 10 calls a minute per key: past them, exit 6 and the wait the server asks for. A burst that
	// straddles the minute's end is tried again.
	eventually(t, "a retry refused with 429", func() (bool, string) {
		for i := 0; i < 12 && call(adminKey, http.MethodPost, "/v1/models/"+stack.ModelName+"/deployments/"+v2+"/retry") != http.StatusTooManyRequests; i++ {
		}
		r := admin.run("models", "retry", stack.ModelName, v2)
		return r.code == exitRateLimited && strings.Contains(r.stderr, "HTTP 429: Rate limit exceeded.") && strings.Contains(r.stderr, "retry after"), r.String()
	})
}
