package loadbench

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeFastHTTP serves a net/http handler through the evaluation's fasthttp server: the request body reaches
// the handler, and a flushed stream arrives whole, in order.
func TestServeFastHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, err := serveFastHTTP(ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{"data: " + string(body) + "\n\n", "data: [DONE]\n\n"} {
			_, _ = io.WriteString(w, ev)
			_ = http.NewResponseController(w).Flush()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if want := "data: {\"model\":\"m\"}\n\ndata: [DONE]\n\n"; resp.StatusCode != http.StatusOK || string(got) != want {
		t.Errorf("answer %d %q, want 200 %q", resp.StatusCode, got, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
}
