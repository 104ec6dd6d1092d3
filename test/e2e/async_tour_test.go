package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/stack"
)

// TestAsyncTour runs an async request through the whole local stack: the seeded Workspace's asyncWebhook goes
// through the manager's translation into the snapshot, gatewayd queues the request in its embedded store, the
// dispatcher calls the demo model server, and a receiver on this machine (the development stack allows
// loopback webhooks) gets the result signed with the seeded secret.
func TestAsyncTour(t *testing.T) {
	s := theStack(t)
	waitDeploymentActive(t, s, stack.ModelDeploymentName)
	predictUntilServed(t, s.GatewayURL+"/models/"+stack.ModelName+"/production/predict", "Bearer "+s.APIKey, []byte(`{"text":"warm up"}`), "application/json")

	var mu sync.Mutex
	var body []byte
	var header http.Header
	got := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if body == nil {
			body, header = b, r.Header.Clone()
			close(got)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	base := s.GatewayURL + "/models/" + stack.ModelName
	var r response
	// The Workspace's asyncWebhook reaches gatewayd with the first snapshot; retry until it has.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = send(t, http.MethodPost, base+"/production/async_predict", "Bearer "+s.APIKey,
			map[string]any{"model_input": map[string]any{"text": "I love it"}, "webhook_endpoint": recv.URL + "/hook"})
		if r.code == http.StatusCreated || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(t, r, http.StatusCreated, "")
	id, _ := r.body["request_id"].(string)
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the result webhook never arrived")
	}
	mu.Lock()
	defer mu.Unlock()
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(stack.AsyncWebhookSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(header.Get("webhook-id") + "." + header.Get("webhook-timestamp") + "."))
	mac.Write(body)
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); header.Get("webhook-signature") != want {
		t.Fatalf("signature %q, want %q", header.Get("webhook-signature"), want)
	}
	var p struct {
		RequestID string         `json:"request_id"`
		Type      string         `json:"type"`
		Data      map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.RequestID != id || p.Type != "async_request_completed" || p.Data["label"] != "positive" {
		t.Fatalf("webhook payload %s", body)
	}
	// The status settles as SUCCEEDED once the delivery is recorded.
	deadline = time.Now().Add(10 * time.Second)
	for {
		st := send(t, http.MethodGet, base+"/async_request/"+id, "Api-Key "+s.APIKey, nil)
		if st.body["status"] == "SUCCEEDED" && st.body["webhook_status"] == "SUCCEEDED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %s", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
