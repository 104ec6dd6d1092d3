package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"mime/multipart"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// TestModelsTour walks the README's "Models" step against the seeded demo model: its url deployment becomes
// ACTIVE, and the predict routes reach the demo model server through gatewayd over real sockets. The
// environment activation of the tour is left out until its management route exists.
func TestModelsTour(t *testing.T) {
	s := theStack(t)
	waitDeploymentActive(t, s, stack.ModelDeploymentName)
	predict := s.GatewayURL + "/models/" + stack.ModelName + "/production/predict"

	t.Run("EnvironmentActivation", func(t *testing.T) {
		// The README's step: activating an environment whose deployment is active is a no-op.
		env := "/v1/models/" + stack.ModelName + "/environments/staging/"
		r := admin(t, s, http.MethodPost, env+"activate", nil)
		if r.code != http.StatusOK || !mapsEqual(r.body, map[string]any{"success": true, "no_op": true}) {
			t.Fatalf("activate: %s", r)
		}
	})

	t.Run("JSONPrediction", func(t *testing.T) {
		r := predictUntilServed(t, predict, "Bearer "+s.APIKey, []byte(`{"text":"I love it"}`), "application/json")
		expect(t, r, http.StatusOK, "")
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type is %q, want application/json", ct)
		}
		want := map[string]any{"label": "positive", "score": 0.6667, "deployment": stack.ModelDeploymentName}
		if !mapsEqual(r.body, want) {
			t.Fatalf("predict answered %s, want %v", r, want)
		}
	})

	t.Run("EveryRouteAndScheme", func(t *testing.T) {
		base := s.GatewayURL + "/models/" + stack.ModelName
		for _, c := range []struct{ url, auth string }{
			{base + "/production/predict", "Api-Key " + s.APIKey},
			{base + "/environments/" + stack.ModelStagingEnv + "/predict", "Bearer " + s.APIKey},
			{base + "/deployment/" + stack.ModelDeploymentName + "/predict", "Bearer " + s.APIKey},
		} {
			r := send(t, http.MethodPost, c.url, c.auth, []byte(`{"text":"a terrible, awful day"}`))
			expect(t, r, http.StatusOK, "")
			if r.body["label"] != "negative" || r.body["deployment"] != stack.ModelDeploymentName {
				t.Errorf("%s answered %s, want a negative label from %s", c.url, r, stack.ModelDeploymentName)
			}
		}
		expect(t, send(t, http.MethodPost, predict, "", []byte(`{"text":"hi"}`)), http.StatusUnauthorized, "unauthorized")
	})

	t.Run("OctetStreamPassesThrough", func(t *testing.T) {
		body := make([]byte, 256<<10)
		_, _ = rand.Read(body)
		body[0], body[1] = 0, '\n' // bytes a text-minded proxy would mangle
		r := send(t, http.MethodPost, predict, "Bearer "+s.APIKey, body, "Content-Type", "application/octet-stream")
		expect(t, r, http.StatusOK, "")
		if !bytes.Equal(r.raw, body) {
			t.Fatalf("octet-stream body came back changed: sent %d bytes, got %d", len(body), len(r.raw))
		}
		if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("Content-Type came back as %q, want application/octet-stream", ct)
		}
	})

	t.Run("MultipartPassesThrough", func(t *testing.T) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("text", "I love it")
		fw, _ := mw.CreateFormFile("image", "pixel.bin")
		_, _ = fw.Write([]byte{0x89, 'P', 'N', 'G', 0, 1, 2, 3})
		_ = mw.Close()
		body := buf.Bytes()
		r := send(t, http.MethodPost, predict, "Bearer "+s.APIKey, body, "Content-Type", mw.FormDataContentType())
		expect(t, r, http.StatusOK, "")
		if !bytes.Equal(r.raw, body) {
			t.Fatalf("multipart body came back changed:\nsent %q\ngot  %q", body, r.raw)
		}
		if ct := r.header.Get("Content-Type"); ct != mw.FormDataContentType() {
			t.Errorf("Content-Type came back as %q, want %q", ct, mw.FormDataContentType())
		}
	})
}

// waitDeploymentActive lists the workspace's ModelDeployments until name reports ACTIVE.
func waitDeploymentActive(t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last gatewayv1.ModelDeploymentStatus
	for {
		var list gatewayv1.ModelDeploymentList
		if err := s.Client.List(ctx, &list, client.InNamespace(s.Namespace)); err == nil {
			for _, md := range list.Items {
				if md.Name == name {
					last = md.Status
				}
			}
			if last.Status == gatewayv1.StatusActive {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ModelDeployment %s never became %s; last status %q, conditions %+v",
				name, gatewayv1.StatusActive, last.Status, last.Conditions)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// predictUntilServed calls a predict route until gatewayd has loaded the deployment (it answers neither 404 nor
// 503), which follows the ACTIVE status by one snapshot.
func predictUntilServed(t *testing.T, url, auth string, body []byte, contentType string) response {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := send(t, http.MethodPost, url, auth, body, "Content-Type", contentType)
		if (r.code != http.StatusNotFound && r.code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}
