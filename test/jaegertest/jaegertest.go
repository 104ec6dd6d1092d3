// Package jaegertest runs a real Jaeger (v2: an OTLP receiver, memory storage and the query API) on loopback
// ports for the tests, the load harness and the local stack, and reads traces back through its query API. The
// binary is built from source through the Go module proxy by hack/jaeger-binary.sh and cached outside the
// repository, as the envtest binaries are.
package jaegertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"
)

// Version is the Jaeger release hack/jaeger-binary.sh builds.
const Version = "v1.76.0"

// Binary is the path of the Jaeger binary: $MODELGATE_JAEGER when set, else the cache of hack/jaeger-binary.sh.
// The error names the command that builds it.
func Binary() (string, error) {
	if p := os.Getenv("MODELGATE_JAEGER"); p != "" {
		return p, nil
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "jaeger", Version, "jaeger")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no Jaeger binary at %s: build it with hack/jaeger-binary.sh (make jaeger)", p)
	}
	return p, nil
}

// cacheDir is where the hack/ scripts cache what they build: $MODELGATE_CACHE, else ~/.cache/modelgate.
func cacheDir() (string, error) {
	if cache := os.Getenv("MODELGATE_CACHE"); cache != "" {
		return cache, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "modelgate"), nil
}

// Jaeger is one running Jaeger.
type Jaeger struct {
	// OTLPGRPC and OTLPHTTP are the base URLs of its OTLP receivers (OTEL_EXPORTER_OTLP_ENDPOINT's form).
	OTLPGRPC, OTLPHTTP string
	// UI is the base URL of the query API and UI.
	UI   string
	cmd  *exec.Cmd
	done chan struct{}
}

var config = template.Must(template.New("jaeger").Parse(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: {{.Query}}
    grpc:
      endpoint: {{.QueryGRPC}}
{{- if .UIAssets}}
    ui:
      assets_path: {{printf "%q" .UIAssets}}
{{- end}}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {{.GRPC}}
      http:
        endpoint: {{.HTTP}}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`))

// Options are the loopback addresses a Jaeger listens on, Start picking free ones for those left empty, and the
// directory of its web UI's assets (UIAssets), if any.
type Options struct {
	GRPC, HTTP, Query, QueryGRPC string
	// UIAssets is a build of jaeger-ui (hack/jaeger-ui.sh) that Jaeger serves at Query; without it Query serves the
	// query API and a placeholder page.
	UIAssets string
}

// UIAssets is the directory of Jaeger's web UI assets: $MODELGATE_JAEGER_UI when set, else the cache of
// hack/jaeger-ui.sh when it has been built there, else "".
func UIAssets() string {
	if p := os.Getenv("MODELGATE_JAEGER_UI"); p != "" {
		return p
	}
	cache, err := cacheDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(cache, "jaeger-ui", Version)
	if _, err := os.Stat(filepath.Join(p, "index.html")); err != nil {
		return ""
	}
	return p
}

// Start runs bin with its OTLP receivers and query API (and web UI, given opts.UIAssets) on 127.0.0.1 only, its
// log in dir/jaeger.log, and waits until its query API answers. Stop ends it.
func Start(ctx context.Context, bin, dir string, opts Options) (*Jaeger, error) {
	for _, p := range []*string{&opts.GRPC, &opts.HTTP, &opts.Query, &opts.QueryGRPC} {
		if *p == "" {
			a, err := freeAddr()
			if err != nil {
				return nil, err
			}
			*p = a
		}
	}
	var cfg strings.Builder
	if err := config.Execute(&cfg, opts); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "jaeger.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--config", "file:"+cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("failed to start Jaeger: %w", err)
	}
	j := &Jaeger{OTLPGRPC: "http://" + opts.GRPC, OTLPHTTP: "http://" + opts.HTTP, UI: "http://" + opts.Query, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(j.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(j.UI + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j, nil
			}
		}
		select {
		case <-j.done:
			return nil, fmt.Errorf("jaeger exited before serving its query API (log: %s)", logf.Name())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			j.Stop()
			return nil, fmt.Errorf("jaeger's query API did not answer within a minute (log: %s)", logf.Name())
		}
	}
}

// Run runs Jaeger for the test on free loopback ports until it ends, failing the test when the binary is
// missing (make test builds it first; make jaeger builds it alone).
func Run(t testing.TB) *Jaeger {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	j, err := Start(ctx, bin, t.TempDir(), Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Stop(); cancel() })
	return j
}

// TraceParent is a W3C traceparent of a new, sampled trace, as a client sends it, with its trace and span ids.
func TraceParent() (header, traceID, spanID string) {
	var b [24]byte
	_, _ = rand.Read(b[:])
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// freeAddr is a loopback address with a port nothing listens on at this moment.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Stop ends Jaeger and waits for it.
func (j *Jaeger) Stop() {
	if j.cmd.Process != nil {
		_ = j.cmd.Process.Signal(os.Interrupt)
	}
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		_ = j.cmd.Process.Kill()
		<-j.done
	}
}

// Trace is one trace as the query API gives it.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Span is one span of a Trace.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	Tags          []KeyValue  `json:"tags"`
	ProcessID     string      `json:"processID"`
}

// Reference links a span to its parent (CHILD_OF).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// KeyValue is one tag.
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Process is the process a span came from.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// Tag is the value of span's tag key, as a string ("" when absent).
func (s Span) Tag(key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// HasTag reports whether span has tag key.
func (s Span) HasTag(key string) bool {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return true
		}
	}
	return false
}

// Parent is the span id of span's parent, "" for a root.
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Traces are the traces of service, up to limit, newest first.
func (j *Jaeger) Traces(service string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {fmt.Sprint(limit)}, "lookback": {"1h"}}
	resp, err := http.Get(j.UI + "/api/traces?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/traces: %d %s", resp.StatusCode, body)
	}
	var out struct {
		Data   []Trace `json:"data"`
		Errors []any   `json:"errors"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("GET /api/traces: %w", err)
	}
	if len(out.Errors) > 0 {
		return nil, fmt.Errorf("GET /api/traces: %v", out.Errors)
	}
	return out.Data, nil
}

// Trace is the trace of id (32 hex digits), ErrNotFound while Jaeger has none.
func (j *Jaeger) Trace(id string) (Trace, error) {
	resp, err := http.Get(j.UI + "/api/traces/" + id)
	if err != nil {
		return Trace{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return Trace{}, ErrNotFound
	}
	var out struct {
		Data []Trace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return Trace{}, err
	}
	if len(out.Data) == 0 {
		return Trace{}, ErrNotFound
	}
	return out.Data[0], nil
}

// ErrNotFound: Jaeger holds no such trace (yet).
var ErrNotFound = errors.New("trace not found")
