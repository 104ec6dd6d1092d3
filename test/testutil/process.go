package testutil

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"
)

// ProcessTB is what StartProcess needs of a test (a testing.TB has it).
type ProcessTB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
}

// Process is a program a test runs (a product binary), with its output kept for the test's log.
type Process struct {
	Cmd *exec.Cmd
	// Done is closed once the program has exited.
	Done chan struct{}

	mu   sync.Mutex
	logs bytes.Buffer
}

// StartProcess runs binary with args, and KUBECONFIG=kubeconfig in its environment when kubeconfig is not empty,
// until the test ends, when it is killed; when the test failed, its output is logged under name.
func StartProcess(t ProcessTB, name, kubeconfig, binary string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(binary, args...), Done: make(chan struct{})}
	p.Cmd.Env = os.Environ()
	if kubeconfig != "" {
		p.Cmd.Env = append(p.Cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.Done
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.Logs())
		}
	})
	return p
}

// Write keeps the program's output.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

// Logs is what the program has written so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Exited reports whether the program has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// AwaitReady waits until the program, a gatewayd, answers 200 at base+"/readyz" (once it serves the snapshots
// present at its start), and fails the test when the program exits first or a minute passes.
func (p *Process) AwaitReady(t ProcessTB, base string) {
	t.Helper()
	last := "no answer yet"
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if p.Exited() {
			t.Fatal(base + ": the program exited before /readyz answered 200")
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			last = err.Error()
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = fmt.Sprintf("/readyz answered %d", resp.StatusCode)
	}
	t.Fatal(base + " never became ready: " + last)
}
