package sandboxmanager

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	certutil "k8s.io/client-go/util/cert"
)

// leaderElectionID is the manager's Lease (cmd/manager).
const leaderElectionID = "modelgate-manager.gateway.modelgate.io"

// managerLease is the timing of the manager processes' leader election: a killed leader's Lease expires after
// leaseDuration, and only then does the next process lead. Short, so a restart takes seconds, but with a renew
// deadline that a busy machine still meets.
var managerLease = []string{"--leader-election-lease-duration=8s", "--leader-election-renew-deadline=6s", "--leader-election-retry-period=1s"}

var (
	buildOnce   sync.Once
	managerBin  string
	buildErr    error
	buildOutput []byte
)

// managerBinary builds cmd/manager once for the package.
func managerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "modelgate-sandboxmanager-")
		if err != nil {
			buildErr = err
			return
		}
		managerBin = filepath.Join(dir, "manager")
		buildOutput, buildErr = exec.Command("go", "build", "-o", managerBin, "github.com/modelgate/modelgate/cmd/manager").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("failed to build the manager: %v\n%s", buildErr, buildOutput)
	}
	return managerBin
}

// managerProcess is cmd/manager running as a child process against the package's envtest.
type managerProcess struct{ *testutil.Process }

// startManagerProcess runs the manager binary with leader election on, in namespace default, until kill or the
// end of the test. It reaches the API server through the package's proxy. Webhooks run in cert-manager mode on a self-signed certificate the test writes, since nothing
// calls them here; metrics and probes are off.
func startManagerProcess(t *testing.T, label string) *managerProcess {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc, err := api.kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	crt, key, err := certutil.GenerateSelfSignedCertKey("localhost", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(filepath.Join(certDir, "tls.crt"), crt, 0o600), os.WriteFile(filepath.Join(certDir, "tls.key"), key, 0o600)); err != nil {
		t.Fatal(err)
	}
	tempDir := filepath.Join(dir, "builds")
	if err := os.MkdirAll(tempDir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--leader-elect=true", "--leader-election-namespace=" + ns,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--webhook-cert-mode=cert-manager", "--webhook-cert-dir=" + certDir, "--webhook-port=" + strconv.Itoa(testutil.MustFreePort(t)),
		"--namespaces=" + ns, "--sandbox-allow-internal-images", "--sandbox-temp-dir=" + tempDir,
	}, managerLease...)
	return &managerProcess{testutil.StartProcess(t, "manager "+label, kubeconfig, managerBinary(t), args...)}
}

// kill sends SIGKILL, as the kernel's OOM killer or a node loss would: the manager runs no shutdown code, so it
// neither releases its Lease nor finishes or cancels its build. kill returns once the process is gone, and fails
// the test when it had already exited by itself.
func (p *managerProcess) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.Done:
		t.Fatalf("the manager exited before it was killed: %v", p.Cmd.ProcessState)
	default:
	}
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the manager ended with %v, not by SIGKILL", p.Cmd.ProcessState)
	}
}

// terminate sends SIGTERM, as the kubelet does when it stops a pod, and waits for the manager to exit; it fails
// the test unless the manager exits cleanly.
func (p *managerProcess) terminate(t *testing.T) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the manager did not exit after SIGTERM")
	}
	if !p.Cmd.ProcessState.Success() {
		t.Fatalf("the manager ended with %v after SIGTERM, want exit status 0", p.Cmd.ProcessState)
	}
}

// leaseHolder is the identity holding the manager's Lease and how often it changed hands.
func leaseHolder(t *testing.T) (holder string, transitions int32) {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), keyOf(leaderElectionID), &l); err != nil {
		t.Fatalf("the manager's Lease: %v", err)
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	return holder, transitions
}
