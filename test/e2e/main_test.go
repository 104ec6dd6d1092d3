package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/stack"
)

// One stack serves every test and benchmark of the package: starting envtest and the manager is the slow part,
// and the suites isolate themselves by external ids.
var (
	shared    *stack.Stack
	sharedErr error
	startOnce sync.Once
	devDir    string
)

func TestMain(m *testing.M) {
	stack.SetTestLogger()
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop the stack: %v\n", err)
			code = 1
		}
	}
	if devDir != "" {
		_ = os.RemoveAll(devDir)
	}
	os.Exit(code)
}

// theStack starts the shared stack on first use, so a run that selects no test starts nothing.
func theStack(tb testing.TB) *stack.Stack {
	tb.Helper()
	startOnce.Do(func() {
		if devDir, sharedErr = os.MkdirTemp("", "modelgate-e2e-"); sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		shared, sharedErr = stack.Start(ctx, stack.Options{
			GatewayAddr:  "127.0.0.1:0",
			UpstreamAddr: "127.0.0.1:0",
			DevDir:       devDir,
		})
	})
	if sharedErr != nil {
		tb.Fatalf("failed to start the local stack (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), sharedErr)
	}
	return shared
}

// response is one HTTP answer, with its body decoded when it is a JSON object.
type response struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r response) String() string { return fmt.Sprintf("HTTP %d: %s", r.code, bytes.TrimSpace(r.raw)) }

var httpClient = &http.Client{Timeout: 30 * time.Second}

// send makes one HTTP call. body is marshalled as JSON unless it is already []byte; headers are name/value pairs.
func send(tb testing.TB, method, url, authorization string, body any, headers ...string) response {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.Fatalf("failed to marshal a request body: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		tb.Fatalf("failed to build %s %s: %v", method, url, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s failed: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("failed to read the answer of %s %s: %v", method, url, err)
	}
	r := response{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body) // not every answer is an object; callers check raw then
	return r
}

// admin calls the management API with the stack's WORKSPACE_MANAGE_ALL key.
func admin(tb testing.TB, s *stack.Stack, method, path string, body any, headers ...string) response {
	tb.Helper()
	return send(tb, method, s.GatewayURL+path, "Bearer "+s.APIKey, body, headers...)
}

// infer calls the OpenAI chat route with a federated key, as a customer's end user would.
func infer(tb testing.TB, s *stack.Stack, key, slug string) response {
	tb.Helper()
	return send(tb, http.MethodPost, s.GatewayURL+"/v1/chat/completions", "Api-Key "+key, map[string]any{
		"model":    slug,
		"messages": []any{map[string]any{"role": "user", "content": "hello from the e2e suite"}},
	})
}

// expect fails the test unless r has status code and, when errorCode is not empty, that error_code.
func expect(tb testing.TB, r response, code int, errorCode string) {
	tb.Helper()
	if r.code != code {
		tb.Fatalf("want HTTP %d, got %s", code, r)
	}
	if errorCode != "" && r.body["error_code"] != errorCode {
		tb.Fatalf("want error_code %q, got %s", errorCode, r)
	}
}

// str reads a string field of a decoded object, failing the test when it is missing.
func str(tb testing.TB, obj map[string]any, field string) string {
	tb.Helper()
	v, ok := obj[field].(string)
	if !ok || v == "" {
		tb.Fatalf("answer has no string %q: %v", field, obj)
	}
	return v
}
