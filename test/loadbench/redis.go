package loadbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	gwstate "github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// state is a limit store and a billing store, opened by gatewayd/state as cmd/gatewayd opens them for one
// --store choice.
type state struct {
	limits  limits.Store
	billing billing.Store
	close   func()
}

func fromStore(st *gwstate.State, cleanup func()) *state {
	return &state{limits: st.Limits(), billing: st.Billing(), close: func() {
		_ = st.Close()
		cleanup()
	}}
}

// openEmbedded opens the default single-replica state of cmd/gatewayd (--store=embedded): rolling windows in
// memory, DAY counters and billing events in one bbolt file, here in a temporary directory.
func openEmbedded() (*state, error) {
	dir, err := os.MkdirTemp("", "loadbench-state-")
	if err != nil {
		return nil, fmt.Errorf("failed to create a state directory: %w", err)
	}
	st, err := gwstate.Open(context.Background(), gwstate.Config{Store: gwstate.Embedded, Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return fromStore(st, func() { _ = os.RemoveAll(dir) }), nil
}

// openRedis starts redis-server on a free loopback port, without persistence, and opens the state of
// cmd/gatewayd --store=redis on it. It fails, and the Redis rows print as not run, when redis-server is missing.
func openRedis(ctx context.Context, path string) (*state, error) {
	if path == "" {
		path = "redis-server"
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (apt-get install redis-server): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to find a free port: %w", err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", bin, err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	stop := func() {
		_ = client.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := client.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		if i == 200 || ctx.Err() != nil {
			stop()
			return nil, fmt.Errorf("redis-server on port %s never answered: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = client.Close()
	st, err := gwstate.Open(ctx, gwstate.Config{Store: gwstate.Redis, RedisURL: "redis://127.0.0.1:" + port})
	if err != nil {
		stop()
		return nil, err
	}
	return fromStore(st, stop), nil
}

// openRedisCluster starts a 6-node Redis Cluster (three primaries, one replica each) on loopback through the
// tests' harness, gatewayd/state/redistest, and opens the state of cmd/gatewayd --store=redis --redis-mode=cluster
// on it. It fails, and the Redis Cluster rows print as not run, when the cluster does not form.
func openRedisCluster(ctx context.Context) (*state, error) {
	h := &harness{}
	var d *redistest.Deployment
	if err := h.run(func() { d = redistest.StartDeployment(h, redistest.Cluster) }); err != nil {
		h.close()
		return nil, fmt.Errorf("redis cluster: %w", err)
	}
	st, err := gwstate.Open(ctx, gwstate.Config{Store: gwstate.Redis, RedisMode: redistest.Cluster, RedisAddrs: strings.Join(d.Addrs, ",")})
	if err != nil {
		h.close()
		return nil, err
	}
	return fromStore(st, h.close), nil
}

// harness is the testing.TB that redistest needs, outside a test: it keeps the cleanups for close, and turns
// Fatal and Skip into the error of run. Only the methods below are called; the embedded TB is nil.
type harness struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	err      error
}

// run calls fn on a goroutine of its own, which Fatal and Skip end, and answers their message.
func (h *harness) run(fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// close runs the cleanups, last registered first.
func (h *harness) close() {
	h.mu.Lock()
	cs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

func (h *harness) Helper() {}

func (h *harness) Cleanup(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = append(h.cleanups, f)
}

func (h *harness) TempDir() string {
	dir, err := os.MkdirTemp("", "loadbench-redis-")
	if err != nil {
		h.Fatal(err)
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (h *harness) Logf(format string, args ...any) {}

func (h *harness) Fatal(args ...any) { h.fail(fmt.Sprint(args...)) }

func (h *harness) Fatalf(format string, args ...any) { h.fail(fmt.Sprintf(format, args...)) }

func (h *harness) Skip(args ...any) { h.fail(fmt.Sprint(args...)) }

func (h *harness) fail(msg string) {
	h.mu.Lock()
	if h.err == nil {
		h.err = errors.New(msg)
	}
	h.mu.Unlock()
	runtime.Goexit()
}
