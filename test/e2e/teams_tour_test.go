package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// TestTeamsTour walks the README's "Teams and workspace keys" step on the local stack: a WORKSPACE_MANAGE_API_KEYS
// key applied with kubectl (minted into a Secret by the manager) creates a workspace-wide invoke key scoped to the
// demo model, which invokes it and nothing else, and a key of team tour-ml, which does not see the demo model (it
// belongs to no team); the key list names the team. It also calls the "wake" step's route, which a url
// deployment answers with 202 and nothing to start.
func TestTeamsTour(t *testing.T) {
	s := theStack(t)
	ctx := context.Background()
	waitDeploymentActive(t, s, stack.ModelDeploymentName)

	team := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "tour-ml"},
		Spec: gatewayv1.TeamSpec{DisplayName: "Tour ML"}}
	keyAdmin := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "tour-key-admin"},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAPIKeys, DisplayName: "tour-key-admin"}}
	for _, obj := range []client.Object{team, keyAdmin} {
		if err := s.Client.Create(ctx, obj); err != nil {
			t.Fatalf("kubectl apply %s: %v", obj.GetName(), err)
		}
	}
	// The README reads the minted key from the Secret the key's status names.
	var keys string
	deadline := time.Now().Add(time.Minute)
	for keys == "" {
		k := &gatewayv1.WorkspaceAPIKey{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(keyAdmin), k); err != nil {
			t.Fatal(err)
		}
		if k.Status.SecretName != "" {
			sec := &corev1.Secret{}
			if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: k.Status.SecretName}, sec); err != nil {
				t.Fatal(err)
			}
			keys = string(sec.Data["api_key"])
		}
		if keys == "" && time.Now().After(deadline) {
			t.Fatal("the key-management key was never minted")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The key-management key authenticates once the snapshot holds it; the team route creates the team key.
	var created response
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		created = send(t, http.MethodPost, s.GatewayURL+"/v1/api_keys", "Bearer "+keys,
			map[string]any{"type": "WORKSPACE_INVOKE", "name": "tour-invoke", "model_ids": []string{stack.ModelName}})
		if created.code != http.StatusUnauthorized && created.code != http.StatusNotFound || time.Now().After(deadline) {
			break
		}
	}
	expect(t, created, http.StatusCreated, "")
	invoke := str(t, created.body, "api_key")
	teamKey := send(t, http.MethodPost, s.GatewayURL+"/v1/teams/tour-ml/api_keys", "Bearer "+keys,
		map[string]any{"type": "WORKSPACE_INVOKE", "name": "tour-ml-invoke"})
	expect(t, teamKey, http.StatusCreated, "")
	mlKey := str(t, teamKey.body, "api_key")

	list := send(t, http.MethodGet, s.GatewayURL+"/v1/api_keys", "Bearer "+keys, nil)
	expect(t, list, http.StatusOK, "")
	found := false
	for _, k := range list.body["keys"].([]any) {
		k := k.(map[string]any)
		if k["name"] == "tour-ml-invoke" {
			found = true
			if k["team_name"] != "Tour ML" || k["type"] != "WORKSPACE_INVOKE" {
				t.Errorf("listed team key = %v, want team_name Tour ML and type WORKSPACE_INVOKE", k)
			}
		}
	}
	if !found {
		t.Fatalf("the team key is not in the list: %s", list)
	}

	predict := s.GatewayURL + "/models/" + stack.ModelName + "/production/predict"
	r := predictUntilServed(t, predict, "Bearer "+invoke, []byte(`{"text":"good"}`), "application/json")
	expect(t, r, http.StatusOK, "")
	expect(t, send(t, http.MethodGet, s.GatewayURL+"/v1/gateway/groups", "Bearer "+invoke, nil), http.StatusForbidden, "forbidden")
	// The team key authenticates once the snapshot holds it; the demo model, of no team, is not its to see.
	var ml response
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ml = send(t, http.MethodPost, predict, "Bearer "+mlKey, []byte(`{"text":"good"}`))
		if ml.code != http.StatusUnauthorized || time.Now().After(deadline) {
			break
		}
	}
	expect(t, ml, http.StatusNotFound, "model_does_not_exist")

	wake := send(t, http.MethodPost, s.GatewayURL+"/models/"+stack.ModelName+"/production/wake", "Bearer "+invoke, nil)
	expect(t, wake, http.StatusAccepted, "")
}
