// Package cluster runs a real one-node Kubernetes cluster on this machine, built from source: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, with Debian's containerd, runc
// and CNI plugins, every address inside a network namespace of its own. `make cluster` (cmd/cluster) and the
// cluster suite (make test) share it. docs/cluster.md says what it runs, how, and every pitfall it avoids.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NetnsName is the namespace the cluster lives in. One cluster runs on a machine at a time: kubelet and the CNI
// plugins keep a few paths that are not per instance (see hostPaths).
const NetnsName = "modelgate-cluster"

// NodeName is the one node's name.
const NodeName = "modelgate-node"

// Options say where the cluster's parts are.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl:
	// `hack/envtest-binaries.sh cluster` builds them and prints the directory.
	BinDir string
	// Images are docker-archive tarballs imported into containerd before the node registers (BuildImages).
	Images []string
	// Log receives progress lines. Nil discards them.
	Log io.Writer
}

// Cluster is a running cluster. Down stops it and removes everything it made.
type Cluster struct {
	opts  Options
	Netns Netns
	// Dir is the cluster's directory (DefaultDir); logs/ holds each component's output.
	Dir string
	// AdminKubeconfig reaches the API server at NodeIP:6443 as system:masters; use it from inside the namespace
	// (Exec), or through Config, which dials inside the namespace.
	AdminKubeconfig string
	// Config is the admin's rest.Config, dialling inside the namespace.
	Config *rest.Config
	// Kube is a clientset over Config.
	Kube *kubernetes.Clientset
	// CA is the cluster CA's PEM.
	CA []byte

	pki       *pki
	mu        sync.Mutex
	procs     []*process
	forker    *forker
	sysctls   map[string]string
	hostPaths []string
	failed    chan error
}

// process is one component, in its own process group so that Down stops what it started too.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "cluster: "+format+"\n", args...)
	}
}

// Up starts the cluster and waits for its node to be Ready. On error, what it started is stopped and removed.
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("the cluster needs %s in %q (hack/envtest-binaries.sh cluster builds it): %w", b, opts.BinDir, err)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "iptables"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("the cluster needs %s on PATH (Debian packages containerd, runc, util-linux, iptables): %w", b, err)
		}
	}
	if _, err := os.Stat(cniBinDir + "/bridge"); err != nil {
		return nil, fmt.Errorf("the cluster needs the CNI plugins in %s (Debian package containernetworking-plugins): %w", cniBinDir, err)
	}
	c := &Cluster{opts: opts, Dir: DefaultDir, failed: make(chan error, 16), forker: newForker()}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				opts.logf("teardown after a failed start: %v", derr)
			}
		}
	}()
	// A cluster left by a process that was killed outright is in the way of this one: remove it first.
	if err := Cleanup(opts.Log); err != nil {
		return c, fmt.Errorf("failed to remove a previous cluster: %w", err)
	}
	c.hostPaths = missingHostPaths()
	if c.Netns, err = CreateNetns(NetnsName); err != nil {
		return c, err
	}
	for _, d := range []string{"logs", "etcd", "containerd", "cni/net.d", "cni/ipam", "kubelet", "manifests", "pods", "volumes", "pv"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return c, err
		}
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	if err := c.startNode(ctx); err != nil {
		return c, err
	}
	return c, c.waitNodeReady(ctx)
}

// Failed receives a component's error when it stops on its own before Down.
func (c *Cluster) Failed() <-chan error { return c.failed }

// start runs a component in the namespace with its output in logs/<name>.log.
func (c *Cluster) start(name string, args ...string) error {
	logFile, err := os.Create(filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return err
	}
	bin := args[0]
	if !filepath.IsAbs(bin) {
		if p := filepath.Join(c.opts.BinDir, bin); fileExists(p) {
			bin = p
		}
	}
	cmd := c.Netns.Command(context.Background(), bin, args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig stops the component if this process dies without Down. It fires when the *thread* that forked the
	// child exits, and Netns retires the threads it moves into the namespace, so every component is forked from
	// one thread that stays locked for the cluster's life.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.forker.do(cmd.Start); err != nil {
		logFile.Close()
		return fmt.Errorf("failed to start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
		select {
		case c.failed <- fmt.Errorf("%s stopped: %v (see %s)", name, p.err, logFile.Name()):
		default:
		}
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.opts.logf("started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

// stop ends one component: SIGTERM to its process group, SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (c *Cluster) startControlPlane(ctx context.Context) (err error) {
	if c.pki, err = newPKI(filepath.Join(c.Dir, "pki")); err != nil {
		return err
	}
	c.CA = c.pki.CAPEM()
	server := "https://" + NodeIP + ":6443"
	apiCert, apiKey, err := c.pki.issue("apiserver", "kube-apiserver", nil, NodeIP, APIServerServiceIP, "127.0.0.1",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	kubeletClientCert, kubeletClientKey, err := c.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	saKey, saPub, err := c.pki.serviceAccountKey()
	if err != nil {
		return err
	}
	if c.AdminKubeconfig, err = c.pki.kubeconfig("admin", server, "modelgate-admin", "system:masters"); err != nil {
		return err
	}
	if err := c.start("etcd", "etcd", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", "kube-apiserver",
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+NodeIP, "--advertise-address="+NodeIP, "--secure-port=6443",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--tls-cert-file="+apiCert, "--tls-private-key-file="+apiKey,
		"--client-ca-file="+c.pki.CAFile(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate="+kubeletClientCert, "--kubelet-client-key="+kubeletClientKey,
		"--kubelet-certificate-authority="+c.pki.CAFile(),
		"--kubelet-preferred-address-types=InternalIP",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=false",
		"--profiling=false",
	); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return err
	}
	cfg.Dial = c.Netns.DialContext
	cfg.QPS, cfg.Burst = 100, 200
	c.Config = cfg
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := c.poll(ctx, "kube-apiserver /readyz", 2*time.Minute, func() error {
		body, err := c.Kube.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}); err != nil {
		return err
	}
	cmConfig, err := c.pki.kubeconfig("controller-manager", server, "system:kube-controller-manager")
	if err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", "kube-controller-manager",
		"--kubeconfig="+cmConfig, "--authentication-kubeconfig="+cmConfig, "--authorization-kubeconfig="+cmConfig,
		"--service-account-private-key-file="+saKey, "--root-ca-file="+c.pki.CAFile(),
		"--use-service-account-credentials=true",
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--service-cluster-ip-range="+ServiceCIDR,
		// Controllers that need a cloud or node CIDR allocation are off: the bridge plugin hands out pod addresses.
		"--allocate-node-cidrs=false",
		"--profiling=false",
	); err != nil {
		return err
	}
	schedConfig, err := c.pki.kubeconfig("scheduler", server, "system:kube-scheduler")
	if err != nil {
		return err
	}
	return c.start("kube-scheduler", "kube-scheduler",
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--profiling=false")
}

const cniBinDir = "/usr/lib/cni"

// containerdSocket is where the node's containerd listens.
func (c *Cluster) containerdSocket() string {
	return filepath.Join(c.Dir, "containerd", "containerd.sock")
}

// KillContainer kills the process of a container with SIGKILL, as the kernel's OOM killer would: it can neither
// handle the signal nor release anything. containerID is a pod status's, containerd://<id>. The kubelet then
// restarts the container in the same pod.
func (c *Cluster) KillContainer(ctx context.Context, containerID string) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok {
		return fmt.Errorf("container id %q is not containerd's", containerID)
	}
	if out, err := exec.CommandContext(ctx, "ctr", "-a", c.containerdSocket(), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput(); err != nil {
		return fmt.Errorf("failed to kill container %s: %w: %s", id, err, out)
	}
	return nil
}

func (c *Cluster) startNode(ctx context.Context) error {
	server := "https://" + NodeIP + ":6443"
	ctrdDir := filepath.Join(c.Dir, "containerd")
	sock := c.containerdSocket()
	if err := os.WriteFile(filepath.Join(ctrdDir, "config.toml"), []byte(containerdConfig(c.Dir)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "cni/net.d/10-modelgate.conflist"), []byte(cniConfig(c.Dir)), 0o644); err != nil {
		return err
	}
	if err := c.start("containerd", "containerd", "--config", filepath.Join(ctrdDir, "config.toml")); err != nil {
		return err
	}
	if err := c.poll(ctx, "containerd", time.Minute, func() error {
		return exec.CommandContext(ctx, "ctr", "-a", sock, "version").Run()
	}); err != nil {
		return err
	}
	for _, img := range c.opts.Images {
		if out, err := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", "k8s.io", "images", "import", img).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to import image %s into containerd: %w: %s", img, err, out)
		}
	}
	c.opts.logf("imported %d images", len(c.opts.Images))

	if c.sysctls, _ = readSysctls(kubeletSysctls); c.sysctls == nil {
		return errors.New("failed to read the sysctls kubelet rewrites")
	}
	var saved strings.Builder
	for k, v := range c.sysctls {
		fmt.Fprintf(&saved, "%s=%s\n", k, v)
	}
	// Saved in the directory too, so that the Cleanup of a killed run puts them back.
	if err := os.WriteFile(filepath.Join(c.Dir, sysctlFile), []byte(saved.String()), 0o600); err != nil {
		return err
	}
	kubeletCert, kubeletKey, err := c.pki.issue("kubelet-serving", NodeName, nil, NodeIP, NodeName)
	if err != nil {
		return err
	}
	kubeletConfig, err := c.pki.kubeconfig("kubelet", server, "system:node:"+NodeName, "system:nodes")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(c.Dir, "kubelet", "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(kubeletConfigYAML(c.Dir, sock, c.pki.CAFile(), kubeletCert, kubeletKey)), 0o644); err != nil {
		return err
	}
	if err := c.start("kubelet", "kubelet", "--config="+cfgPath, "--kubeconfig="+kubeletConfig,
		"--root-dir="+filepath.Join(c.Dir, "kubelet"), "--cert-dir="+filepath.Join(c.Dir, "kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1"); err != nil {
		return err
	}
	proxyConfig, err := c.pki.kubeconfig("kube-proxy", server, "system:kube-proxy")
	if err != nil {
		return err
	}
	proxyCfgPath := filepath.Join(c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyCfgPath, []byte(kubeProxyConfigYAML(proxyConfig)), 0o644); err != nil {
		return err
	}
	return c.start("kube-proxy", "kube-proxy", "--config="+proxyCfgPath)
}

func (c *Cluster) waitNodeReady(ctx context.Context) error {
	return c.poll(ctx, "node "+NodeName+" Ready", 3*time.Minute, func() error {
		node, err := c.Kube.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// poll calls check until it succeeds, the timeout passes, or a component stops.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			c.opts.logf("%s: ok", what)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ferr := <-c.failed:
			return fmt.Errorf("while waiting for %s: %w", what, ferr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// LogTail answers the last lines of a component's log, for a failure message.
func (c *Cluster) LogTail(name string, lines int) string {
	b, err := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// forker runs functions on one OS thread that stays locked, and never exits, while the cluster runs.
type forker struct{ jobs chan func() }

func newForker() *forker {
	f := &forker{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for job := range f.jobs {
			job()
		}
		// Returning locked retires the thread; only after Down, when no component is left to signal.
	}()
	return f
}

func (f *forker) do(fn func() error) error {
	errc := make(chan error, 1)
	f.jobs <- func() { errc <- fn() }
	return <-errc
}
