package stack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPredict(t *testing.T) {
	for _, c := range []struct {
		text  string
		label string
		score float64
	}{
		{"I love it", "positive", 0.6667},
		{"", "positive", 0.5},
		{"Terrible. I HATE it!", "negative", 0.75},
		{"good but broken", "positive", 0.5},
		{"great, nice, excellent", "positive", 0.8},
	} {
		got := Predict(c.text, "d")
		if got.Label != c.label || got.Score != c.score || got.Deployment != "d" {
			t.Errorf("Predict(%q) = %+v, want %s %.4f", c.text, got, c.label, c.score)
		}
	}
}

func TestDemoModel(t *testing.T) {
	h := NewDemoModel("demo-model-v1")
	call := func(method, path, contentType string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}

	if w := call(http.MethodGet, "/health", "", nil); w.Code != http.StatusOK || w.Body.String() != "ok" {
		t.Errorf("GET /health = %d %q, want 200 ok", w.Code, w.Body)
	}

	w := call(http.MethodPost, "/predict", "application/json; charset=utf-8", []byte(`{"text":"I love it"}`))
	var p Prediction
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusOK {
		t.Fatalf("JSON predict = %d %q (%v)", w.Code, w.Body, err)
	}
	if p != (Prediction{Label: "positive", Score: 0.6667, Deployment: "demo-model-v1"}) {
		t.Errorf("JSON predict = %+v", p)
	}

	for _, body := range []string{`{"inputs":[1]}`, `not json`} {
		if w := call(http.MethodPost, "/predict", "application/json", []byte(body)); w.Code != http.StatusBadRequest ||
			!strings.Contains(w.Body.String(), `"error"`) {
			t.Errorf("predict %s = %d %q, want 400 with an error", body, w.Code, w.Body)
		}
	}

	raw := []byte{0, 1, 2, '\n', 0xff}
	for _, ct := range []string{"application/octet-stream", "multipart/form-data; boundary=x", ""} {
		w := call(http.MethodPost, "/predict", ct, raw)
		body, _ := io.ReadAll(w.Body)
		wantCT := ct
		if ct == "" {
			wantCT = "application/octet-stream"
		}
		if w.Code != http.StatusOK || !bytes.Equal(body, raw) || w.Header().Get("Content-Type") != wantCT {
			t.Errorf("predict %q = %d %q %q, want the body back with Content-Type %q", ct, w.Code, w.Header().Get("Content-Type"), body, wantCT)
		}
	}
}
