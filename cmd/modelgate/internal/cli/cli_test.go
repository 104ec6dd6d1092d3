package cli

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// isolate points the user's config directory at a fresh directory and clears the overriding variables.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", dir)
	t.Setenv(EnvURL, "")
	t.Setenv(EnvAPIKey, "")
	return dir
}

func TestConfigIsPrivateAndTheEnvironmentOverridesIt(t *testing.T) {
	dir := isolate(t)
	p, err := SaveConfig(Config{URL: "http://stored:8080/", APIKey: "mgw_stored"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "modelgate", "config"); p != want {
		t.Errorf("config at %s, want %s", p, want)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c, err := LoadConfig(getenv)
	if err != nil || c.URL != "http://stored:8080" || c.APIKey != "mgw_stored" {
		t.Fatalf("stored config = %+v, %v", c, err)
	}
	env[EnvAPIKey] = "mgw_env"
	if c, _ = LoadConfig(getenv); c.URL != "http://stored:8080" || c.APIKey != "mgw_env" {
		t.Errorf("with %s set: %+v", EnvAPIKey, c)
	}
	env[EnvURL] = "http://env:1"
	if c, _ = LoadConfig(getenv); c.URL != "http://env:1" || c.APIKey != "mgw_env" {
		t.Errorf("with both set: %+v", c)
	}
}

func TestAPIErrorShowsTheFieldAndTheRule(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		header     http.Header
		want       []string
	}{
		{"field list", `{"error":"Invalid request.","error_code":"invalid_request","detail":[{"field":"name","message":"must be 1 to 128 lowercase letters, digits and hyphens"}]}`,
			400, nil, []string{"HTTP 400 invalid_request: Invalid request.", "\n  name: must be 1 to 128 lowercase letters, digits and hyphens"}},
		{"one field", `{"error":"bad","error_code":"client_error","detail":{"field":"priority","message":"must be 0..2"}}`,
			400, nil, []string{"HTTP 400 client_error: bad", "\n  priority: must be 0..2"}},
		{"field named in the rule", `{"error":"x","error_code":"invalid_request","detail":[{"field":"metadata.external_entity_id","message":"metadata.external_entity_id is required."}]}`,
			400, nil, []string{"\n  metadata.external_entity_id: is required."}},
		{"model-call fields", `{"error":"bad","error_code":"client_error","detail":"priority: must be 0..2","fields":{"field":"priority","message":"must be 0..2"}}`,
			400, nil, []string{"HTTP 400 client_error: bad", "\n  priority: must be 0..2"}},
		{"model-call string", `{"error":"gone","error_code":"model_does_not_exist","detail":"model_id: nope"}`,
			404, nil, []string{"HTTP 404 model_does_not_exist: gone", "\n  model_id: nope"}},
		{"object", `{"error":"no","error_code":"forbidden","detail":{"key_type":"WORKSPACE_INVOKE"}}`,
			403, nil, []string{"HTTP 403 forbidden: no", "\n  key_type: WORKSPACE_INVOKE"}},
		{"management 429", `{"error":"Rate limit exceeded. Please try again later.","retry_after":7}`,
			429, nil, []string{"HTTP 429: Rate limit exceeded.", "retry after 7s"}},
		{"429 with header", `{"error":"slow down","error_code":"rate_limited","detail":null}`,
			429, http.Header{"Retry-After": {"3"}}, []string{"rate_limited", "retry after 3s"}},
		{"not JSON", "upstream connect error", 502, nil, []string{"HTTP 502: upstream connect error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header
			if h == nil {
				h = http.Header{}
			}
			msg := parseError(tc.status, h, []byte(tc.body)).Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestWaitRetriesOnceAfterA429(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if body, _ := io.ReadAll(r.Body); string(body) != `{"a":1}` {
			t.Errorf("call %d body %q: a retry must send the body again", calls, body)
		}
		if calls%3 != 0 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":"Rate limit exceeded. Please try again later.","retry_after":4}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	var slept []time.Duration
	c := &Client{BaseURL: srv.URL, APIKey: "k", Wait: true, Sleep: func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}}
	req := Request{Method: http.MethodPost, Path: "/v1/x", Body: []byte(`{"a":1}`)}
	// Calls 1 and 2 are 429s: one wait, then the 429 stands.
	if _, err := c.Do(context.Background(), req); err == nil || err.(*APIError).Status != 429 {
		t.Fatalf("two 429s in a row: err %v, want the second 429", err)
	}
	if len(slept) != 1 || slept[0] != 4*time.Second {
		t.Fatalf("slept %v, want once for retry_after (4s, the body's, before Retry-After)", slept)
	}
	// Call 3 succeeds at once; without --wait a 429 is answered at once.
	if resp, err := c.Do(context.Background(), req); err != nil || string(resp.Body) != `{"ok":true}` {
		t.Fatalf("third call: %v %v", resp, err)
	}
	c.Wait = false
	if _, err := c.Do(context.Background(), req); err == nil || len(slept) != 1 {
		t.Fatalf("without Wait: err %v, slept %v", err, slept)
	}
}

// run runs the CLI in process against srv and returns stdout, stderr and the exit code.
func run(t *testing.T, srv *httptest.Server, stdin string, args ...string) (string, string, int) {
	t.Helper()
	t.Setenv(EnvURL, srv.URL)
	t.Setenv(EnvAPIKey, "mgw_test")
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestOutputFormatsAndExitCodes(t *testing.T) {
	isolate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer mgw_test" {
			t.Errorf("%s %s without the key", r.Method, r.URL)
		}
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"models":[{"id":"m1","name":"One","production_deployment_id":"m1-v1","development_deployment_id":null,"deployments_count":1,"team_name":"","created_at":"2026-01-01T00:00:00Z"}]}`)
		case "/v1/models/gone":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"Model not found.","error_code":"not_found","detail":null}`)
		default:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"down","error_code":"unavailable","detail":null}`)
		}
	}))
	defer srv.Close()

	out, _, code := run(t, srv, "", "models", "list")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, "m1-v1") || !strings.Contains(out, "PRODUCTION") {
		t.Errorf("table: code %d\n%s", code, out)
	}
	out, _, _ = run(t, srv, "", "models", "list", "-o", "json")
	if !strings.Contains(out, "\"models\": [") {
		t.Errorf("json:\n%s", out)
	}
	out, _, _ = run(t, srv, "", "models", "list", "-o", "yaml")
	if !strings.Contains(out, "- created_at:") || !strings.Contains(out, "id: m1") {
		t.Errorf("yaml:\n%s", out)
	}
	_, errOut, code := run(t, srv, "", "models", "get", "gone")
	if code != ExitNotFound || !strings.Contains(errOut, "HTTP 404 not_found: Model not found.") {
		t.Errorf("404: code %d, stderr %q", code, errOut)
	}
	if _, _, code = run(t, srv, "", "models", "deployments", "x"); code != ExitUnavailable {
		t.Errorf("503: code %d", code)
	}
	if _, errOut, code = run(t, srv, "", "models", "list", "-o", "xml"); code != ExitUsage || !strings.Contains(errOut, "-o must be") {
		t.Errorf("-o xml: code %d, stderr %q", code, errOut)
	}
	if _, _, code = run(t, srv, "", "models", "get"); code != ExitUsage {
		t.Errorf("missing argument: code %d", code)
	}
	if _, errOut, code = run(t, srv, "", "models", "bogus"); code != ExitUsage || !strings.Contains(errOut, `unknown command "bogus" for "modelgate models"`) {
		t.Errorf("unknown verb: code %d, stderr %q", code, errOut)
	}
	if out, _, code = run(t, srv, "", "models"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("a group alone: code %d, stdout %q", code, out)
	}
	t.Setenv(EnvURL, "")
	var errBuf bytes.Buffer
	if code := Main([]string{"models", "list"}, strings.NewReader(""), io.Discard, &errBuf); code != ExitUsage || !strings.Contains(errBuf.String(), "modelgate login") {
		t.Errorf("not logged in: code %d, stderr %q", code, errBuf.String())
	}
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Short == "" || c.Example == "" {
			t.Errorf("%s: Short %q, Example %q; every command has both", c.CommandPath(), c.Short, c.Example)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}).root())
}

func TestZipDirKeepsRelativePaths(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "src", "main.py"), []byte("print(1)\n"), 0o644)
	f, err := zipDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fi, _ := f.Stat()
	zr, err := zip.NewReader(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range zr.File {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); got != "Dockerfile src/ src/main.py" {
		t.Errorf("entries %q", got)
	}
	if _, err := zipDir(t.TempDir()); err == nil {
		t.Error("a directory without a Dockerfile was zipped")
	}
}

func TestProgressBarReachesTheTotal(t *testing.T) {
	var w bytes.Buffer
	p := &progress{r: strings.NewReader(strings.Repeat("x", 3000)), total: 3000, w: &w}
	if _, err := io.Copy(io.Discard, p); err != nil {
		t.Fatal(err)
	}
	p.done()
	if !strings.Contains(w.String(), "100% 2.9 KiB / 2.9 KiB") {
		t.Errorf("bar %q", w.String())
	}
}

// TestRedirectKeepsTheKeyAtItsOrigin: a redirect within the server's origin is followed with the key; one to
// another port, scheme or host is not followed at all, so neither the key nor the body gets there
// (docs/security.md "The CLI trusts its server only so far").
func TestRedirectKeepsTheKeyAtItsOrigin(t *testing.T) {
	isolate(t)
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Method+" "+r.URL.Path+" Authorization="+r.Header.Get("Authorization"))
		io.WriteString(w, `{"models":[]}`)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models": // within the origin
			http.Redirect(w, r, "/v1/models/", http.StatusFound)
		case "/v1/models/":
			if r.Header.Get("Authorization") != "Bearer mgw_test" {
				t.Errorf("the same-origin redirect arrived without the key")
			}
			io.WriteString(w, `{"models":[{"id":"m1"}]}`)
		default: // another port of the same host
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()

	if out, errOut, code := run(t, srv, "", "models", "list"); code != 0 || !strings.Contains(out, "m1") {
		t.Errorf("a redirect within the origin: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code := run(t, srv, "", "models", "get", "m2")
	if code != ExitError || !strings.Contains(errOut, "another origin") || !strings.Contains(errOut, other.URL) {
		t.Errorf("a redirect to another port: code %d, stderr %q", code, errOut)
	}
	if len(elsewhere) > 0 {
		t.Errorf("the other origin received %v", elsewhere)
	}
	for _, tc := range []struct{ from, to string }{
		{"http://127.0.0.1:8080/v1", "http://127.0.0.1:8081/v1"},
		{"http://127.0.0.1:8080/v1", "https://127.0.0.1:8080/v1"},
		{"https://gw.example/v1", "https://evil.gw.example/v1"},
		{"https://gw.example/v1", "http://gw.example/v1"},
	} {
		from, _ := http.NewRequest("GET", tc.from, nil)
		to, _ := http.NewRequest("GET", tc.to, nil)
		if sameOrigin(to, []*http.Request{from}) == nil {
			t.Errorf("a redirect from %s to %s is followed", tc.from, tc.to)
		}
	}
	for _, tc := range []struct{ from, to string }{
		{"https://gw.example/v1", "https://GW.example:443/v2"},
		{"http://127.0.0.1/v1", "http://127.0.0.1:80/x"},
	} {
		from, _ := http.NewRequest("GET", tc.from, nil)
		to, _ := http.NewRequest("GET", tc.to, nil)
		if err := sameOrigin(to, []*http.Request{from}); err != nil {
			t.Errorf("a redirect from %s to %s: %v", tc.from, tc.to, err)
		}
	}
}

// TestWaitIsBounded: --wait waits what the server asks only up to --timeout and MaxWaitLimit; a longer ask (or one
// that would overflow a Duration) is answered at once, as the 429 it is, saying why. test/cli runs the binary on it.
func TestWaitIsBounded(t *testing.T) {
	retryAfter := "99999"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"Rate limit exceeded."}`)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		retryAfter string
		maxWait    time.Duration
		want       time.Duration // slept; 0: not at all
	}{
		{"99999", 0, 0},
		{"99999", 5 * time.Minute, 0},
		{"9223372036854775807", 0, 0},
		{"901", 0, 0}, // MaxWaitLimit is 900 s
		{"900", 0, 900 * time.Second},
		{"31", 30 * time.Second, 0},
		{"30", 30 * time.Second, 30 * time.Second},
	} {
		retryAfter = tc.retryAfter
		var slept []time.Duration
		c := &Client{BaseURL: srv.URL, Wait: true, MaxWait: tc.maxWait, Sleep: func(_ context.Context, d time.Duration) error {
			slept = append(slept, d)
			return nil
		}}
		_, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/v1/x"})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests {
			t.Errorf("Retry-After %s: err %v, want the 429", tc.retryAfter, err)
		}
		switch {
		case tc.want == 0 && (len(slept) != 0 || !strings.Contains(err.Error(), "not waiting")):
			t.Errorf("Retry-After %s, MaxWait %s: slept %v, err %q; want no wait, said so", tc.retryAfter, tc.maxWait, slept, err)
		case tc.want != 0 && (len(slept) != 1 || slept[0] != tc.want):
			t.Errorf("Retry-After %s, MaxWait %s: slept %v, want %s", tc.retryAfter, tc.maxWait, slept, tc.want)
		}
	}
}

// TestServerTextIsPrintedEscaped: the server's words reach the terminal with their control characters and
// bidirectional overrides escaped: in an error, its detail, a table, a sentence and -o json.
func TestServerTextIsPrintedEscaped(t *testing.T) {
	isolate(t)
	const evil = "\x1b]0;owned\x07\x1b[2J\u009b31m\u202eeht\x7f"
	const shown = `\x1b]0;owned\a\x1b[2J\u009b31m\u202eeht\x7f`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		esc := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"models":[{"id":`+esc("m1"+evil)+`,"name":"x"}]}`)
		case "/v1/models/m1/deployments/d1/retry":
			io.WriteString(w, `{"retried":false,"reason":`+esc(evil)+`}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":`+esc("bad"+evil)+`,"error_code":"invalid_request","detail":[{"field":"name","message":`+esc(evil)+`}]}`)
		}
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"models", "list"}, {"models", "list", "-o", "json"}, {"models", "retry", "m1", "d1"}, {"models", "get", "m1"},
		{"models", "list", "-o", "yaml"},
	} {
		out, errOut, _ := run(t, srv, "", args...)
		printed, want, raw := out+errOut, shown, "\x1b\x07\x7f\u009b\u202e"
		switch args[len(args)-1] {
		case "json":
			want = `\u001b]0;owned\u0007\u001b[2J\u009b31m\u202eeht\u007f`
		case "yaml":
			// YAML's own escapes; it prints a bidirectional override as is (it is no terminal sequence).
			want, raw = `\e]0;owned\a\e[2J\x9B31m`, "\x1b\x07\x7f\u009b"
		}
		if strings.ContainsAny(printed, raw) {
			t.Errorf("modelgate %v printed raw control characters: %q", args, printed)
		}
		if !strings.Contains(printed, want) {
			t.Errorf("modelgate %v: %q, want the text escaped as %q", args, printed, want)
		}
	}
	if got := printable("ok\tté\xffx\u00a0"); got != `ok\tté\xffx`+"\u00a0" {
		t.Errorf("printable = %q", got)
	}
}
