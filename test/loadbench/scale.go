package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/translate"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// Environment of the child gatewayd process.
const (
	childEnv        = "LOADBENCH_CHILD"
	childKubeconfig = "LOADBENCH_KUBECONFIG"
	childNamespace  = "LOADBENCH_NAMESPACE"
	childCPUProfile = "LOADBENCH_CHILD_CPUPROFILE"
	// childServer picks the HTTP server of the child's customer side: empty for gatewayd's own (net/http),
	// serverFastHTTP for the evaluation's alternative (fasthttp.go).
	childServer       = "LOADBENCH_CHILD_SERVER"
	childReadyPrefix  = "loadbench-child-ready "
	scaleSettle       = 3 * time.Second
	childReadyTimeout = 3 * time.Minute
)

// chartGC is the garbage collector's settings the chart gives gatewayd (charts/modelgate/values.yaml,
// gatewayd.go), so a child gatewayd runs as deployed; a GOGC or GOMEMLIMIT in the harness's environment wins.
var chartGC = map[string]string{"GOGC": "200", "GOMEMLIMIT": "800MiB"}

// ChildGOMAXPROCSEnv, when set in the harness's environment, is the GOMAXPROCS of every child gatewayd (the
// harness's own stays Go's default): what gatewayd does with fewer Ps than the machine's cores, as a pod whose
// environment sets GOMAXPROCS runs (docs/benchmarks.md "GOMAXPROCS on shared cores").
const ChildGOMAXPROCSEnv = "LOADBENCH_CHILD_GOMAXPROCS"

// childEnviron is the environment of a child gatewayd: the harness's, the chart's GC settings it does not set,
// the GOMAXPROCS of ChildGOMAXPROCSEnv, then extra.
func childEnviron(extra ...string) []string {
	env := os.Environ()
	for name, value := range chartGC {
		if _, set := os.LookupEnv(name); !set {
			env = append(env, name+"="+value)
		}
	}
	if n := os.Getenv(ChildGOMAXPROCSEnv); n != "" {
		env = append(env, "GOMAXPROCS="+n)
	}
	return append(env, extra...)
}

type scaleResult struct {
	RSS, Peak     int64
	SnapshotBytes int
	ConfigMaps    int
	Settle        time.Duration
}

// measureScale publishes a workspace of cfg.ScaleGroups groups and cfg.ScaleKeys keys, built by the manager's
// own translation, starts gatewayd in a separate process serving only it, checks that one of its keys works,
// and reads the process's resident memory once loaded.
func measureScale(ctx context.Context, cfg Config, cs kubernetes.Interface, kubeconfig string, u *upstreams, v *Violations) (scaleResult, error) {
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "loadbench-scale")
	if err != nil {
		return scaleResult{}, err
	}
	in, key := bigWorkspace(ns, cfg.ScaleGroups, cfg.ScaleKeys)
	s := translate.Translate(in)
	if len(s.Groups) != cfg.ScaleGroups || len(s.APIKeys) != cfg.ScaleKeys {
		return scaleResult{}, fmt.Errorf("scale snapshot has %d groups and %d keys, want %d and %d", len(s.Groups), len(s.APIKeys), cfg.ScaleGroups, cfg.ScaleKeys)
	}
	s.Endpoints = []snapshot.Endpoint{{ID: "plain", Slug: plainSlug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: u.plain.BaseURL()}}}}
	payload, sum, err := snapshot.Encode(s)
	if err != nil {
		return scaleResult{}, fmt.Errorf("failed to encode the scale snapshot: %w", err)
	}
	// The index ConfigMap, plus one per chunk when the payload does not fit in it.
	res := scaleResult{SnapshotBytes: len(payload), ConfigMaps: 1 + len(snapshot.Split(payload, snapshot.MaxChunkBytes)), Settle: scaleSettle}
	if err := gatewaytest.PublishPayload(ctx, cs, ns, 1, sum, payload, 0); err != nil {
		return scaleResult{}, err
	}
	s, payload = nil, nil // let the harness's own copy go before the child is measured

	self, err := os.Executable()
	if err != nil {
		return scaleResult{}, fmt.Errorf("failed to find the harness executable: %w", err)
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = childEnviron(childEnv+"=gatewayd", childKubeconfig+"="+kubeconfig, childNamespace+"="+ns)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return scaleResult{}, fmt.Errorf("failed to pipe the child's output: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return scaleResult{}, fmt.Errorf("failed to start the child gatewayd: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	base, err := waitChild(out)
	if err != nil {
		return scaleResult{}, err
	}
	target := &Target{Name: "gatewayd (scale)", URL: base + "/v1/chat/completions", Auth: "Api-Key " + key, Model: plainSlug}
	Drive(ctx, target, 1, time.Millisecond, false, expect(cfg), v)
	time.Sleep(res.Settle)
	if res.RSS, res.Peak, err = memoryOf(cmd.Process.Pid); err != nil {
		return scaleResult{}, err
	}
	return res, nil
}

func waitChild(out io.Reader) (string, error) {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if base, ok := strings.CutPrefix(sc.Text(), childReadyPrefix); ok {
				found <- base
			}
		}
		close(found)
	}()
	select {
	case base, ok := <-found:
		if !ok {
			return "", errors.New("the child gatewayd exited before it was ready")
		}
		return base, nil
	case <-time.After(childReadyTimeout):
		return "", fmt.Errorf("the child gatewayd was not ready within %s", childReadyTimeout)
	}
}

// memoryOf reads VmRSS and VmHWM of a process, in bytes.
func memoryOf(pid int) (rss, peak int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("failed to read the child's memory: %w", err)
	}
	for line := range bytes.Lines(raw) {
		k, val, ok := strings.Cut(string(line), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("failed to parse %s of the child: %w", k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// bigWorkspace builds the custom resources of a workspace of n groups in 3-level trees of up to 100 (a root,
// 9 teams, 10 leaves per team; CASCADING, thresholds shrinking down the tree) and keys federated keys spread
// over the groups (key i in group i%n), and returns the plaintext of key probeIndex. Keys come from a seeded generator: they are fixtures
// and only need the product's format.
func bigWorkspace(ns string, n, keys int) (translate.Input, string) {
	in := translate.Input{Namespace: ns}
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for i := range n {
		name, parent, depth := treeSlot(i)
		g := gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: created}, Spec: groupSpec(name, parent, depth)}
		in.Groups = append(in.Groups, g)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	random := func(k int) string {
		b := make([]byte, k)
		for i := range b {
			b[i] = base62[rng.IntN(len(base62))]
		}
		return string(b)
	}
	var first string
	for i := range keys {
		key := "mgk_" + random(12) + "." + random(32)
		// The key of the series' probe group (a leaf), or the only key.
		if i == min(probeIndex, keys-1) {
			first = key
		}
		sum := sha256.Sum256([]byte(key))
		in.APIKeys = append(in.APIKeys, gatewayv1.APIKey{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("key-%06d", i), Namespace: ns, CreationTimestamp: created},
			Spec: gatewayv1.APIKeySpec{GroupID: in.Groups[i%n].Name,
				KeySource: gatewayv1.KeySource{Prefix: key[:16], Hash: hex.EncodeToString(sum[:])}},
		})
	}
	return in, first
}

// treeSlot places group i in its tree: group 0 of each hundred is a root, 1-9 are its teams, and 10-99 are the
// leaves, ten per team.
func treeSlot(i int) (name, parent string, depth int) {
	tree, j := i/100, i%100
	name = fmt.Sprintf("t%04d-g%02d", tree, j)
	switch {
	case j == 0:
		return name, "", 1
	case j < 10:
		return name, fmt.Sprintf("t%04d-g00", tree), 2
	default:
		return name, fmt.Sprintf("t%04d-g%02d", tree, 1+(j-10)/10), 3
	}
}

// groupSpec declares REQUEST per MINUTE and TOKEN per DAY on the plain slug, lower at each level, so CASCADING
// validation holds.
func groupSpec(name, parent string, depth int) gatewayv1.GroupSpec {
	scale := int64(1)
	for range depth - 1 {
		scale *= 10
	}
	spec := gatewayv1.GroupSpec{
		ExternalEntityID: "ext-" + name,
		Hierarchy:        gatewayv1.Hierarchy{LimitEnforcement: modeCascading},
		Models: []gatewayv1.ModelConfig{{Slug: plainSlug,
			RateLimits:  []gatewayv1.Limit{{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: 1_000_000 / scale}},
			UsageLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitDay, Threshold: 1_000_000_000 / scale}},
		}},
	}
	if parent != "" {
		spec.Hierarchy.ParentGroupID = ptr.To(parent)
	}
	return spec
}

// ChildMain runs the child gatewayd of the scale measurement, or a floor proxy (floor.go), when this process was
// started as one, and then exits; otherwise it returns at once. Call it first thing in main and in TestMain.
func ChildMain() {
	var err error
	switch os.Getenv(childEnv) {
	case "gatewayd":
		err = runChild()
	case "floor":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runFloor(ctx)
		stop()
	default:
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild serves one namespace with the defaults of cmd/gatewayd (the embedded store) until SIGTERM.
func runChild() error {
	if path := os.Getenv(childCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("failed to create the CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(childKubeconfig))
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig: %w", err)
	}
	st, err := openEmbedded()
	if err != nil {
		return err
	}
	defer st.close()
	g, err := gatewayd.New(gatewayd.Options{RESTConfig: rc, Namespaces: []string{os.Getenv(childNamespace)}, Store: st.limits, Billing: st.billing})
	if err != nil {
		return err
	}
	base, err := gatewaytest.Serve(ctx, g)
	if err != nil {
		return err
	}
	if err := gatewaytest.WaitReady(g, childReadyTimeout); err != nil {
		return err
	}
	if os.Getenv(childServer) == serverFastHTTP {
		// Serve keeps running (the snapshot, the billing recorder), and its net/http listener idles.
		if base, err = serveFastHTTP(ctx, g.Handler()); err != nil {
			return err
		}
	}
	fmt.Println(childReadyPrefix + base)
	<-ctx.Done()
	return nil
}
