package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// childRegistryEnv makes the test binary serve a registry instead of running tests: go-containerregistry's
// registry keeps uploads in memory, so the benchmark runs it in a process of its own, away from the RSS it
// measures.
const childRegistryEnv = "MODELGATE_BENCH_CHILD_REGISTRY"

func serveChildRegistry() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	os.Exit(0)
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return -1
}

// BenchmarkUploadRSS streams a 1 GiB upload through gatewayd into a registry in another process, and reports how
// much the peak RSS of this process (gatewayd, the manager and the API clients of the local stack) grew above its
// resident size before the upload. docs/benchmarks.md records the figure:
//
//	go test ./test/sandbox -run '^$' -bench UploadRSS -benchtime 1x
func BenchmarkUploadRSS(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), childRegistryEnv+"=1")
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	host, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(host, "ERR") {
		b.Fatalf("child registry: %q %v", host, err)
	}
	host = strings.TrimSpace(host)

	// Point the workspace at the child's registry for the benchmark, and back afterwards.
	ctx := context.Background()
	var ws gatewayv1.Workspace
	if err := st.Client.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: "default"}, &ws); err != nil {
		b.Fatal(err)
	}
	saved := ws.Spec.ImageRegistry.URL
	ws.Spec.ImageRegistry.URL = "http://" + host + "/bench"
	if err := st.Client.Update(ctx, &ws); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = st.Client.Get(ctx, client.ObjectKeyFromObject(&ws), &ws)
		ws.Spec.ImageRegistry.URL = saved
		_ = st.Client.Update(ctx, &ws)
	}()

	const size = 1 << 30
	for range b.N {
		r := call(b, adminKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "rss"}, red)
		if r.code != http.StatusAccepted {
			b.Fatalf("POST: %v", r)
		}
		runtime.GC()
		before := procStatus("VmRSS")
		// Reset the peak (VmHWM) to the current RSS, then sample RSS too, in case the reset is not allowed.
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
		var peak atomic.Int64
		stop := make(chan struct{})
		go func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				if v := procStatus("VmRSS"); v > peak.Load() {
					peak.Store(v)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		// Incompressible, like a real ZIP, and generated as it is sent: never held in memory.
		req, _ := http.NewRequest("PUT", r.body["upload_url"].(string), io.LimitReader(mrand.NewChaCha8([32]byte{1}), size))
		req.ContentLength = size
		resp, err := http.DefaultClient.Do(req)
		elapsed := time.Since(start)
		close(stop)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("PUT: %d %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		hwm := max(procStatus("VmHWM"), peak.Load())
		b.ReportMetric(float64(hwm-before)/(1<<20), "MiB-RSS-growth")
		b.ReportMetric(float64(size)/(1<<20)/elapsed.Seconds(), "MiB/s")
		b.Logf("RSS before %d MiB, peak %d MiB (sampled peak %d MiB), 1 GiB in %s", before>>20, hwm>>20, peak.Load()>>20, elapsed)
	}
}
