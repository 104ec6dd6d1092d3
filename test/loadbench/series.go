package loadbench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/translate"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/reload"
	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/testutil"
)

// SeriesConfig sizes the scale series (loadbench -scale-series).
type SeriesConfig struct {
	// Sizes are the group counts; each group has KeysPerGroup federated keys, in 3-level trees of 100.
	Sizes        []int
	KeysPerGroup int
	// Changes is the number of single-group limit changes timed per size and layout.
	Changes int
	// CreateBudget bounds the creation through admission per size: what is not created by then is
	// extrapolated from the measured rate.
	CreateBudget time.Duration
	// ChangeTimeout bounds one change's propagation; a change past it stops the size, and the report says so.
	ChangeTimeout time.Duration
	Log           func(format string, args ...any)
}

// Layouts of the snapshot ConfigMaps compared by the series.
const (
	layoutNumbered = "numbered chunks (before)"
	layoutContent  = "content-addressed parts (after)"
)

// layoutResult is one layout's figures at one size.
type layoutResult struct {
	// Materialize is translation plus encoding of the whole workspace for one change (median), and its CPU.
	Materialize, MaterializeCPU time.Duration
	// Written is the bytes written to the API server (so to etcd) per single-group change (median); Objects
	// the ConfigMaps written.
	Written, Objects int
	// Decode is what a gatewayd decodes for one change: the whole payload (numbered), or the changed parts
	// with the unchanged ones reused (content); DecodeCold decodes everything, as at start.
	Decode, DecodeCold time.Duration
	// Propagation is per change: from the decision to publish (translation starts) to a probe through the
	// child gatewayd seeing the new limit.
	Propagation []time.Duration
	// RSS and Peak are the child gatewayd's after the changes.
	RSS, Peak int64
}

// seriesPoint is one size of the series.
type seriesPoint struct {
	Groups, Keys int
	// PayloadBytes and Parts describe the content layout; ConfigMaps is the numbered layout's count.
	PayloadBytes, Parts, ConfigMaps int
	Layouts                         map[string]*layoutResult
	// APIServerRSS and EtcdRSS are the control plane's after publishing (cumulative over the series).
	APIServerRSS, EtcdRSS int64
	// Created objects (groups then keys) through admission within the budget, and the time taken.
	CreatedGroups, CreatedKeys int
	CreateElapsed              time.Duration
	CreateErr                  string
	// Err is where this size stopped, empty when it finished.
	Err string
}

// probeIndex is the group (a depth-3 leaf) and key the series flips a limit of: key i belongs to group i%n.
const probeIndex = 10

// RunSeries measures every size of cfg and returns the points, in order; a size that fails records why and
// the series goes on with the next.
func RunSeries(ctx context.Context, cfg SeriesConfig) ([]seriesPoint, error) {
	st, err := stack.Start(ctx, stack.Options{Namespace: "loadbench", Gatewayd: gatewayd.Options{Namespaces: []string{"loadbench"}}})
	if err != nil {
		return nil, fmt.Errorf("failed to start the stack: %w", err)
	}
	defer func() { _ = st.Stop() }()
	cs, err := kubernetes.NewForConfig(st.Config)
	if err != nil {
		return nil, err
	}
	u, err := startUpstreams(QuickConfig())
	if err != nil {
		return nil, err
	}
	defer u.close()
	var out []seriesPoint
	for _, n := range cfg.Sizes {
		p := seriesPoint{Groups: n, Keys: n * cfg.KeysPerGroup, Layouts: map[string]*layoutResult{}}
		cfg.Log("series: %d groups, %d keys: publication", p.Groups, p.Keys)
		if err := measurePublication(ctx, cfg, cs, st.KubeconfigPath, u, &p); err != nil {
			p.Err = err.Error()
			cfg.Log("series: %d groups stopped: %v", n, err)
		}
		p.APIServerRSS, p.EtcdRSS = controlPlaneRSS()
		cfg.Log("series: %d groups: creation through admission (budget %s)", n, cfg.CreateBudget)
		createThroughAdmission(ctx, cfg, st.Client, cs, &p)
		out = append(out, p)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

// measurePublication times, for each layout, Changes single-group changes of a workspace of p's size, from
// translation to enforcement by a separate gatewayd process.
func measurePublication(ctx context.Context, cfg SeriesConfig, cs kubernetes.Interface, kubeconfig string, u *upstreams, p *seriesPoint) error {
	ns, err := gatewaytest.CreateNamespace(ctx, cs, fmt.Sprintf("series-%d", p.Groups))
	if err != nil {
		return err
	}
	in, key := bigWorkspace(ns, p.Groups, p.Keys)
	endpoints := []snapshot.Endpoint{{ID: "plain", Slug: plainSlug, Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: u.plain.BaseURL()}}}}
	// The numbered layout is materialized as the manager did then, translating the whole workspace; the content
	// layout as it does now, with a Translator that re-judges what a change reaches. Both read the versions the
	// API server would stamp.
	for i := range in.Groups {
		in.Groups[i].UID, in.Groups[i].Generation = types.UID(in.Groups[i].Name), 1
	}
	for i := range in.APIKeys {
		in.APIKeys[i].ResourceVersion = "1"
	}
	var translator translate.Translator
	full := true
	translateAt := func() *snapshot.Snapshot {
		var s *snapshot.Snapshot
		if full {
			s = translate.Translate(in)
		} else {
			s = translator.Translate(in)
		}
		s.Endpoints = endpoints
		return s
	}
	probeGroup := &in.Groups[probeIndex]
	high := probeGroup.Spec.Models[0].RateLimits[0].Threshold

	// The first version, in the numbered layout, and the child gatewayd that serves it.
	s := translateAt()
	if len(s.Groups) != p.Groups || len(s.APIKeys) != p.Keys {
		return fmt.Errorf("translation kept %d groups and %d keys of %d and %d", len(s.Groups), len(s.APIKeys), p.Groups, p.Keys)
	}
	payload, sum, err := snapshot.Encode(s)
	if err != nil {
		return err
	}
	p.ConfigMaps = 1 + len(snapshot.Split(payload, snapshot.MaxChunkBytes))
	version := int64(1)
	if err := gatewaytest.PublishPayload(ctx, cs, ns, version, sum, payload, 0); err != nil {
		return fmt.Errorf("failed to publish the first snapshot: %w", err)
	}
	s, payload = nil, nil
	// Each layout gets a fresh gatewayd process, started on that layout's first version, so its memory is that
	// layout's alone.
	var child *child
	defer func() {
		if child != nil {
			child.stop()
		}
	}()
	probe := &prober{key: key, client: &http.Client{Timeout: 10 * time.Second},
		body: []byte(`{"model":"` + plainSlug + `","messages":[{"role":"user","content":"probe"}]}`)}
	serve := func() error {
		if child != nil {
			child.stop()
		}
		var err error
		if child, err = startChild(ctx, kubeconfig, ns, ""); err != nil {
			return err
		}
		probe.url = child.base + "/v1/chat/completions"
		if _, err := probe.until(ctx, http.StatusOK, 3*time.Minute, 5*time.Millisecond); err != nil {
			return fmt.Errorf("the probe key never worked: %w", err)
		}
		return nil
	}
	if err := serve(); err != nil {
		return err
	}

	var published []snapshot.Part // the content layout's parts on the API server
	for _, layout := range []string{layoutNumbered, layoutContent} {
		res := &layoutResult{}
		p.Layouts[layout] = res
		if layout == layoutContent {
			// The content layout's first version, all of its parts, then its own gatewayd.
			full = false
			version++
			parts, sum, err := translator.EncodeParts(translateAt(), snapshot.MaxChunkBytes)
			if err != nil {
				return err
			}
			if _, _, err := publishParts(ctx, cs, ns, version, nil, parts, sum); err != nil {
				return fmt.Errorf("failed to publish the first content-addressed snapshot: %w", err)
			}
			// The manager deletes the numbered chunks the index no longer names; left in place, they would sit
			// in the new gatewayd's informer cache and count in its memory.
			for i := 1; i < p.ConfigMaps; i++ {
				if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, snapshot.ChunkName(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("failed to delete numbered chunk %d: %w", i, err)
				}
			}
			published = parts
			if err := serve(); err != nil {
				return err
			}
		}
		var mats, cpus []time.Duration
		var written, objects []int
		for i := range cfg.Changes {
			threshold, want := high, http.StatusOK
			if i%2 == 0 {
				threshold, want = 1, http.StatusTooManyRequests
				_, _ = probe.call(ctx)
			}
			probeGroup.Spec.Models[0].RateLimits[0].Threshold = threshold
			probeGroup.Generation++
			version++
			t0, c0 := time.Now(), testutil.ProcessCPU()
			s := translateAt()
			var w, o int
			if layout == layoutNumbered {
				payload, sum, err := snapshot.Encode(s)
				if err != nil {
					return err
				}
				mats, cpus = append(mats, time.Since(t0)), append(cpus, testutil.ProcessCPU()-c0)
				if err := gatewaytest.PublishPayload(ctx, cs, ns, version, sum, payload, 0); err != nil {
					return fmt.Errorf("failed to publish change %d: %w", i+1, err)
				}
				w, o = len(payload), 1+len(snapshot.Split(payload, snapshot.MaxChunkBytes))
			} else {
				parts, sum, err := translator.EncodeParts(s, snapshot.MaxChunkBytes)
				if err != nil {
					return err
				}
				mats, cpus = append(mats, time.Since(t0)), append(cpus, testutil.ProcessCPU()-c0)
				if w, o, err = publishParts(ctx, cs, ns, version, published, parts, sum); err != nil {
					return fmt.Errorf("failed to publish change %d: %w", i+1, err)
				}
				published = parts
				p.PayloadBytes, p.Parts = 0, len(parts)
				for _, part := range parts {
					p.PayloadBytes += len(part.Payload)
				}
			}
			written, objects = append(written, w), append(objects, o)
			at, err := probe.until(ctx, want, cfg.ChangeTimeout, 5*time.Millisecond)
			if err != nil {
				return fmt.Errorf("%s, change %d: %w", layout, i+1, err)
			}
			res.Propagation = append(res.Propagation, at.Sub(t0))
		}
		res.Materialize, res.MaterializeCPU = medianDuration(mats), medianDuration(cpus)
		res.Written, res.Objects = medianInt(written), medianInt(objects)
		time.Sleep(scaleSettle)
		if res.RSS, res.Peak, err = memoryOf(child.pid); err != nil {
			return err
		}
		cfg.Log("series: %d groups, %s: materialize %s, %d bytes in %d objects per change, propagation p50 %s, RSS %d MiB",
			p.Groups, layout, res.Materialize, res.Written, res.Objects, medianDuration(res.Propagation), res.RSS>>20)
	}
	measureDecode(translateAt(), p)
	return nil
}

// measureDecode times what a gatewayd decodes: the numbered layout's whole payload; the content layout's every
// part (a cold start) and its one changed part plus the merge (a change), both with the loader's own
// reload.DecodeParts, so the figure is gatewayd's and not a re-implementation's.
func measureDecode(s *snapshot.Snapshot, p *seriesPoint) {
	payload, sum, err := snapshot.Encode(s)
	if err == nil {
		t0 := time.Now()
		_, _ = snapshot.Decode(payload, sum)
		d := time.Since(t0)
		p.Layouts[layoutNumbered].Decode, p.Layouts[layoutNumbered].DecodeCold = d, d
	}
	parts, _, err := snapshot.EncodeParts(s, snapshot.MaxChunkBytes)
	if err != nil {
		return
	}
	hashes := make([]string, len(parts))
	payloads := make([][]byte, len(parts))
	for i, part := range parts {
		hashes[i], payloads[i] = part.Hash, part.Payload
	}
	t0 := time.Now()
	decoded, err := reload.DecodeParts(hashes, payloads)
	if err != nil {
		return
	}
	_, _ = snapshot.Merge(snapshotsOf(decoded))
	cold := time.Since(t0)
	// A change rewrites one range: decode the largest part, as the worst single change, and merge.
	big := 1
	for i := range parts {
		if i > 0 && len(parts[i].Payload) > len(parts[big].Payload) {
			big = i
		}
	}
	t0 = time.Now()
	one, err := reload.DecodeParts(hashes[big:big+1], payloads[big:big+1])
	if err != nil {
		return
	}
	decoded[big] = one[0]
	_, _ = snapshot.Merge(snapshotsOf(decoded))
	res := p.Layouts[layoutContent]
	res.Decode, res.DecodeCold = time.Since(t0), cold
}

// snapshotsOf is the decoded parts' snapshots, in order; a part of keys is its namespace only (its keys are in
// the view's compact block), as the loader merges it.
func snapshotsOf(parts []reload.DecodedPart) []*snapshot.Snapshot {
	out := make([]*snapshot.Snapshot, len(parts))
	for i, p := range parts {
		out[i] = p.Snapshot
	}
	return out
}

// publishParts writes the parts that before does not have, then the index, and deletes the parts that neither
// index names: the manager's publication, on a clientset. It returns the bytes and objects written.
func publishParts(ctx context.Context, cs kubernetes.Interface, ns string, version int64, before, parts []snapshot.Part, sum string) (int, int, error) {
	have := map[string]bool{}
	for _, p := range before {
		have[p.Hash] = true
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	written, objects := 0, 0
	for _, p := range parts {
		if have[p.Hash] {
			continue
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: snapshot.PartName(p.Hash), Namespace: ns,
			Labels: map[string]string{snapshot.LabelKey: snapshot.LabelChunk}}, Immutable: ptr.To(true),
			BinaryData: map[string][]byte{snapshot.BinaryPayload: p.Payload}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return written, objects, err
		}
		written += len(p.Payload)
		objects++
	}
	list := snapshot.PartList(parts)
	idx := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: snapshot.IndexName, Namespace: ns,
		Labels: map[string]string{snapshot.LabelKey: snapshot.LabelIndex}},
		Data: map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10), snapshot.DataChecksum: sum,
			snapshot.DataChunks: strconv.Itoa(len(parts)), snapshot.DataFormat: snapshot.FormatContent, snapshot.DataParts: list}}
	if _, err := cms.Update(ctx, idx, metav1.UpdateOptions{}); err != nil {
		return written, objects, err
	}
	written += len(list)
	objects++
	return written, objects, nil
}

// child is a gatewayd in its own process, so its memory is its own.
type child struct {
	base string
	pid  int
	stop func()
}

// startChild starts a child gatewayd serving ns; with cpuProfile set, it writes a CPU profile there as it stops.
func startChild(ctx context.Context, kubeconfig, ns, cpuProfile string) (*child, error) {
	return startChildOn(ctx, kubeconfig, ns, cpuProfile, "")
}

// startChildOn is startChild with the child's customer side served by server (childServer).
func startChildOn(ctx context.Context, kubeconfig, ns, cpuProfile, server string) (*child, error) {
	return spawnChild(ctx, childEnviron(childEnv+"=gatewayd", childKubeconfig+"="+kubeconfig, childNamespace+"="+ns, childCPUProfile+"="+cpuProfile, childServer+"="+server))
}

// spawnChild starts this program again with env, as a child (ChildMain), and waits until it says it is ready.
func spawnChild(ctx context.Context, env []string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start the child gatewayd: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	base, err := waitChild(out)
	if err != nil {
		stop()
		return nil, err
	}
	return &child{base: base, pid: cmd.Process.Pid, stop: stop}, nil
}

// controlPlaneRSS is the resident memory of the envtest kube-apiserver and etcd this process started.
func controlPlaneRSS() (apiserver, etcd int64) {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : i]
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		rss, _, err := memoryOf(pid)
		if err != nil {
			continue
		}
		switch comm {
		case "kube-apiserver":
			apiserver = rss
		case "etcd":
			etcd = rss
		}
	}
	return apiserver, etcd
}

// createThroughAdmission creates p's groups (level by level, parents first) and then its keys in a fresh
// namespace through the validating webhook, with the manager running, until done or out of budget.
func createThroughAdmission(ctx context.Context, cfg SeriesConfig, c client.Client, cs kubernetes.Interface, p *seriesPoint) {
	ns, err := gatewaytest.CreateNamespace(ctx, cs, fmt.Sprintf("create-%d", p.Groups))
	if err != nil {
		p.CreateErr = err.Error()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CreateBudget)
	defer cancel()
	start := time.Now()
	defer func() { p.CreateElapsed = time.Since(start) }()
	var groups, keys atomic.Int64
	for depth := 1; depth <= 3; depth++ {
		var idx []int
		for i := range p.Groups {
			if _, _, d := treeSlot(i); d == depth {
				idx = append(idx, i)
			}
		}
		if err := parallel(ctx, len(idx), func(k int) error {
			name, parent, d := treeSlot(idx[k])
			g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{gatewayv1.Finalizer}},
				Spec: groupSpec(name, parent, d)}
			if err := c.Create(ctx, g); err != nil {
				return fmt.Errorf("group %s: %w", name, err)
			}
			groups.Add(1)
			return nil
		}); err != nil {
			p.CreatedGroups, p.CreateErr = int(groups.Load()), err.Error()
			return
		}
	}
	p.CreatedGroups = int(groups.Load())
	in, _ := bigWorkspace(ns, p.Groups, p.Keys)
	err = parallel(ctx, len(in.APIKeys), func(k int) error {
		key := in.APIKeys[k]
		obj := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}, Spec: key.Spec}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("key %s: %w", key.Name, err)
		}
		keys.Add(1)
		return nil
	})
	p.CreatedKeys = int(keys.Load())
	if err != nil {
		p.CreateErr = err.Error()
	}
}

// parallel runs f(0..n-1) on createWorkers workers until the first error or ctx's end.
func parallel(ctx context.Context, n int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range createWorkers {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= n || ctx.Err() != nil {
					return
				}
				if err := f(k); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func medianInt(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
