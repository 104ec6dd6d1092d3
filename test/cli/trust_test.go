package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// at runs the binary against the server at url with key, rather than the stack's gatewayd.
func at(t *testing.T, url, key string) *cli {
	return &cli{t: t, env: []string{"MODELGATE_URL=" + url, "MODELGATE_API_KEY=" + key}}
}

// TestRedirectToAnotherPortGetsNoKey: a server that redirects to another port of the same host does not get the
// key sent there, nor the body; a redirect within its origin is followed (docs/security.md "The CLI trusts its
// server only so far").
func TestRedirectToAnotherPortGetsNoKey(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		elsewhere = append(elsewhere, r.Method+" "+r.URL.Path+" Authorization="+r.Header.Get("Authorization")+" body="+string(body))
		mu.Unlock()
		io.WriteString(w, `{"models":[]}`)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("moved") == "1":
			io.WriteString(w, `{"models":[{"id":"same-origin"}]}`)
			return
		case r.URL.Path == "/v1/models":
			http.Redirect(w, r, "/v1/models?moved=1", http.StatusFound)
			return
		}
		// 307 keeps the method and body: a push's body would follow the key.
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	key := "mgw_redirect_test_key"
	c := at(t, srv.URL, key)
	if r := c.ok("models", "list"); !strings.Contains(r.stdout, "same-origin") {
		t.Errorf("a redirect within the origin was not followed: %v", r)
	}
	c.refused(1, []string{"another origin", other.URL}, "models", "get", "m1")
	c.refused(1, []string{"another origin"}, "images", "push", "x", "--image", "ghcr.io/org/app:1", "--team", "red")
	mu.Lock()
	defer mu.Unlock()
	for _, e := range elsewhere {
		if strings.Contains(e, key) {
			t.Errorf("the key reached the other port: %s", e)
		}
	}
	if len(elsewhere) > 0 {
		t.Errorf("the other port received %v", elsewhere)
	}
}

// TestWaitGivesUpOnAHugeRetryAfter: --wait on a 429 that asks for 99999 s (27 hours) does not wait: it answers
// exit 6 at once, saying it does not wait that long. The deadline only keeps a broken CLI from hanging the suite.
func TestWaitGivesUpOnAHugeRetryAfter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "99999")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"Rate limit exceeded. Please try again later.","retry_after":99999}`)
	}))
	defer srv.Close()
	c := at(t, srv.URL, "mgw_wait_test_key")
	c.deadline = 2 * time.Minute
	c.refused(6, []string{"HTTP 429", "retry after 99999s", "not waiting"}, "models", "list", "--wait", "--timeout", "10s")
	c.refused(6, []string{"not waiting", "at most 15m0s"}, "models", "list", "--wait", "--timeout", "48h")
	if n := calls.Load(); n != 2 {
		t.Errorf("the server was called %d times, want once a run", n)
	}
}

// TestServerTextIsPrintedEscaped: an error, its detail and a table cell carrying ESC sequences (a window title, a
// screen clear, a CSI in its one-byte C1 form) and a bidirectional override reach stdout and stderr escaped.
func TestServerTextIsPrintedEscaped(t *testing.T) {
	const evil = "\x1b]0;owned\x07\x1b[2J\u009b31m\u202eeht"
	quoted, _ := json.Marshal(evil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"models":[{"id":"m1","name":`+string(quoted)+`}]}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"Refused `+strings.Trim(string(quoted), `"`)+`","error_code":"invalid_request","detail":[{"field":"name","message":`+string(quoted)+`}]}`)
	}))
	defer srv.Close()
	c := at(t, srv.URL, "mgw_escape_test_key")
	table := c.ok("models", "list")
	refusal := c.refused(3, []string{"HTTP 400 invalid_request: Refused "}, "models", "get", "m1")
	js := c.ok("models", "list", "-o", "json")
	for _, r := range []result{table, refusal, js} {
		if strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07\u009b\u202e") {
			t.Errorf("raw control characters printed: %q %q", r.stdout, r.stderr)
		}
	}
	const shown = `\x1b]0;owned\a\x1b[2J\u009b31m\u202eeht`
	if !strings.Contains(table.stdout, shown) {
		t.Errorf("table: %q, want the name escaped as %s", table.stdout, shown)
	}
	if strings.Count(refusal.stderr, shown) != 2 {
		t.Errorf("refusal: %q, want the sentence and the detail escaped as %s", refusal.stderr, shown)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(js.stdout), &v); err != nil || !strings.Contains(js.stdout, `\u009b31m\u202eeht`) {
		t.Errorf("-o json: %v, %q; want valid JSON with the characters as JSON escapes", err, js.stdout)
	} else if name := v["models"].([]any)[0].(map[string]any)["name"]; name != evil {
		t.Errorf("-o json decodes to %q, want the server's value %q", name, evil)
	}
}
