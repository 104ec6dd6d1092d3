// Package loadbench is the side-by-side load harness behind `make bench`. It measures gatewayd against the
// cheapest things a user could put in its place: a direct call to the upstream and a bare
// httputil.ReverseProxy. Every target is driven by the same Go load generator in interleaved rounds, and every
// figure is a ratio or a difference taken within one round, reported as the median of the rounds, because a
// shared 2-core machine is too noisy for absolute figures. It also measures how fast a limit change written to
// the API server is enforced (with the real manager, through test/stack), and gatewayd's resident memory with a
// large workspace (in a separate process). While it measures it checks correctness: every answer must be 200,
// carry the usage the upstream reported, and be charged exactly once; any violation fails the run.
package loadbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/test/stack"
)

// Config sizes a run. Start from FullConfig or QuickConfig.
type Config struct {
	// Rounds is how many times each target runs each load shape, interleaved.
	Rounds int
	// LatencyDuration is one target's share of a round at concurrency 1; ThroughputDuration at Concurrency.
	LatencyDuration, ThroughputDuration time.Duration
	// Concurrency is the number of workers of the throughput runs.
	Concurrency int
	// StreamConcurrency workers stream for StreamDuration per target and round; the paced upstream sends
	// StreamDeltas content chunks StreamDelay apart.
	StreamConcurrency int
	StreamDuration    time.Duration
	StreamDeltas      int
	StreamDelay       time.Duration
	// Groups is the number of background groups in the workspace during the propagation measurement, and
	// Changes the number of limit changes timed.
	Groups, Changes int
	// ProbeInterval is the pause between two enforcement probes while a change propagates.
	ProbeInterval time.Duration
	// ScaleGroups and ScaleKeys size the workspace of the memory measurement.
	ScaleGroups, ScaleKeys int
	// SkipPropagation and SkipScale leave those phases out (their rows print as not run).
	SkipPropagation, SkipScale bool
	// RedisServer is the redis-server binary for the Redis rows; empty looks it up on PATH.
	RedisServer string
	// RedisCluster also drives gatewayd on a 6-node Redis Cluster (three primaries, one replica each, started by
	// gatewayd/state/redistest), beside gatewayd on one redis-server: the Cluster ÷ standalone rows.
	RedisCluster bool
	// Peers locates nginx, node and Portkey; SkipPeers leaves the peer rows out.
	Peers     PeerPaths
	SkipPeers bool
	// ServerEval also drives, with the peers, gatewayd in its own process served by fasthttp (fasthttp.go): the
	// server evaluation's throughput, latency and streaming rows.
	ServerEval bool
	// Floor also drives, with the peers (and in the per-call phase), the floor proxies (floor.go): a Go proxy in
	// its own process that does nothing but proxy, on net/http with gatewayd's transport, on net/http's server
	// with fasthttp's client, and on fasthttp natively.
	Floor bool
	// SyscallShapes, when set, are the only loads of the per-call phase ("c=1", "c=32", "stream"), for a
	// profile of one load alone (-child-cpuprofile).
	SyscallShapes []string
	// ChildCPUProfile, when set, is where gatewayd in its own process (the peers' like-for-like target) writes a
	// CPU profile of its whole life.
	ChildCPUProfile string
	// Quick marks a quick run in the report: its figures show that the harness works, not how fast gatewayd is.
	Quick bool
	// Log receives progress messages.
	Log logr.Logger
	// Progress, when set, receives one line per phase, for a person watching.
	Progress io.Writer
}

// FullConfig is the configuration of `make bench`.
func FullConfig() Config {
	return Config{
		Rounds: 5, LatencyDuration: time.Second, ThroughputDuration: time.Second, Concurrency: 32,
		// 16 workers streaming for 5 s give each target about 4,000 chunk gaps per round, so a round's p99 gap is
		// its 40th largest rather than (with 8 workers for 1 s) its 5th, which one scheduler hiccup moved by a
		// millisecond either way.
		StreamConcurrency: 16, StreamDuration: 5 * time.Second, StreamDeltas: 64, StreamDelay: 20 * time.Millisecond,
		Groups: 10000, Changes: 50, ProbeInterval: 5 * time.Millisecond,
		ScaleGroups: 10000, ScaleKeys: 100000,
	}
}

// QuickConfig runs every phase with small counts, in well under a minute of load.
func QuickConfig() Config {
	return Config{
		Rounds: 2, LatencyDuration: 200 * time.Millisecond, ThroughputDuration: 300 * time.Millisecond, Concurrency: 8,
		StreamConcurrency: 2, StreamDuration: 100 * time.Millisecond, StreamDeltas: 8, StreamDelay: 5 * time.Millisecond,
		Groups: 60, Changes: 4, ProbeInterval: 5 * time.Millisecond,
		ScaleGroups: 200, ScaleKeys: 2000, Quick: true,
	}
}

func (c Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "loadbench: "+format+"\n", args...)
	}
}

// Run starts everything, measures, and returns the report. An error means the harness could not measure;
// correctness violations are in the report (Report.Failed).
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	ctx = logr.NewContext(ctx, cfg.Log)
	rep = newReport(cfg)
	v := &rep.Violations

	cfg.progress("starting the control plane, the manager and gatewayd (test/stack)")
	ls, err := startLoadStack(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ls.stop()) }()
	st, cs, u, ws := ls.st, ls.cs, ls.u, ls.ws
	emb, err := openEmbedded()
	if err != nil {
		return nil, err
	}
	defer emb.close()
	gw, stopEmbedded, err := startGatewayd(ctx, "gatewayd", st.Config, ws, emb, nil)
	if err != nil {
		return nil, err
	}
	// Deferred after the store's close, so it runs before it: gatewayd stops, then its state closes.
	defer stopEmbedded()
	var withRedis *Target
	if rs, err := openRedis(ctx, cfg.RedisServer); err != nil {
		rep.RedisNotRun = err.Error()
		cfg.progress("Redis rows not run: %v", err)
	} else {
		defer rs.close()
		var stopRedis func()
		if withRedis, stopRedis, err = startGatewayd(ctx, "gatewayd+Redis", st.Config, ws, rs, nil); err != nil {
			return nil, err
		}
		defer stopRedis()
	}
	var withCluster *Target
	switch {
	case withRedis == nil:
		rep.RedisClusterNotRun = "the standalone Redis rows did not run: " + rep.RedisNotRun
	case !cfg.RedisCluster:
		rep.RedisClusterNotRun = errSkipped.Error()
	default:
		cfg.progress("starting a 6-node Redis Cluster (gatewayd/state/redistest)")
		rc, err := openRedisCluster(ctx)
		if err != nil {
			rep.RedisClusterNotRun = err.Error()
			cfg.progress("Redis Cluster rows not run: %v", err)
			break
		}
		defer rc.close()
		var stopCluster func()
		if withCluster, stopCluster, err = startGatewayd(ctx, "gatewayd+Redis Cluster", st.Config, ws, rc, nil); err != nil {
			return nil, err
		}
		defer stopCluster()
	}

	var peers []*peer
	peerNotRun := map[string]error{}
	for _, start := range []struct {
		name string
		f    func(context.Context, PeerPaths, *upstreams) (*peer, error)
	}{{"nginx", startNginx}, {"Portkey", startPortkey}} {
		if cfg.SkipPeers {
			peerNotRun[start.name] = errSkipped
			continue
		}
		p, err := start.f(ctx, cfg.Peers, u)
		if err != nil {
			// A peer that is not installed, or does not start, is left out and its rows say why; the run goes on.
			peerNotRun[start.name] = err
			cfg.progress("%s rows not run: %v", start.name, err)
			continue
		}
		defer p.stop()
		p.name = start.name
		peers = append(peers, p)
	}

	directPlain, directStream := directTarget(u)
	proxyPlain, proxyStream := proxyTarget(u)
	plain := []*Target{directPlain, proxyPlain, gw}
	stream := []*Target{directStream, proxyStream, gw}
	for _, t := range []*Target{withRedis, withCluster} {
		if t != nil {
			plain = append(plain, t)
			stream = append(stream, t)
		}
	}
	// The Endpoints of several targets follow the in-process gatewayds: two weighted targets (run beside the
	// one-target route, rounds.bracket), and a refused try before every answer (in the rotation). Their streams would say nothing the plain runs do not; the stream list runs gatewayd's own in
	// their places, so that the peers keep one index in both lists. The fixed indexes above stay: a row of a
	// target that did not run is not read.
	routing := routingTargets{two: len(plain), failover: len(plain) + 1}
	plain = append(plain, bySlugs("gatewayd, two targets", gw.URL, ws, emb, twoSlug, twoSlug),
		bySlugs("gatewayd, refused try first", gw.URL, ws, emb, failoverSlug, failoverSlug))
	stream = append(stream, gw, gw)
	// gatewayd tracing 1% of its calls into a real Jaeger, on a state of its own, run beside the untraced
	// gatewayd (rounds.bracket): its throughput against theirs (docs/benchmarks.md "Tracing").
	tracedGw, tracedRun, tracedErr := startTraced(ctx, st.Config, ws)
	tracedAt := -1
	if tracedErr != nil {
		cfg.progress("traced gatewayd not run: %v", tracedErr)
	} else {
		defer tracedRun.stop()
		tracedAt = len(plain)
		plain = append(plain, tracedGw)
		stream = append(stream, gw)
	}
	// With peers, gatewayd also runs in its own process (the scale measurement's child, on the embedded store), as
	// the peers do: on a shared machine a separate process gets its own share of the CPU, which the in-process
	// targets share with the load generator.
	if len(peers) > 0 {
		if c, err := startChild(ctx, st.KubeconfigPath, ws.ns, cfg.ChildCPUProfile); err != nil {
			peerNotRun[ownProcess] = err
			cfg.progress("gatewayd in its own process not run: %v", err)
		} else {
			defer c.stop()
			peers = append([]*peer{{name: ownProcess, plain: ownProcessTarget(c, ws), stream: ownProcessTarget(c, ws), stop: func() {}}}, peers...)
		}
		if cfg.ServerEval {
			fc, err := startChildOn(ctx, st.KubeconfigPath, ws.ns, "", serverFastHTTP)
			if err != nil {
				return nil, fmt.Errorf("gatewayd on fasthttp: %w", err)
			}
			defer fc.stop()
			t := fastHTTPTarget(fc, ws)
			peers = append(peers, &peer{name: ownProcessFastHTTP, plain: t, stream: t, stop: func() {}})
		}
		if cfg.Floor {
			fs, err := startFloors(ctx, u)
			if err != nil {
				return nil, err
			}
			for _, f := range fs {
				defer f.stop()
			}
			peers = append(peers, fs...)
		}
	}
	// Peers come last, so the fixed indexes (direct, proxy, embedded, withRedis, withCluster) keep their meaning.
	peerIndex := map[string]int{}
	for _, p := range peers {
		peerIndex[p.name] = len(plain)
		plain = append(plain, p.plain)
		stream = append(stream, p.stream)
	}
	want := expect(cfg)
	// A peer's broken answers are the peer's finding, reported on its rows, not a failure of gatewayd's run.
	peerV := map[int]*Violations{}
	for name, i := range peerIndex {
		if name != ownProcess { // gatewayd's own answers count against the run
			peerV[i] = &Violations{}
		}
	}
	vOf := func(i int) *Violations {
		if pv, ok := peerV[i]; ok {
			return pv
		}
		return v
	}

	// The predict route of the same gatewayd, to the same upstream, with the same body: it runs in each round's
	// rotation of the plain targets, and its figures are taken against direct, the bare proxy and the OpenAI
	// route of the same round.
	predict := predictTarget(gw, ws)

	cfg.progress("warming up %d targets", len(plain)+1)
	for i := range plain {
		Drive(ctx, plain[i], cfg.Concurrency, 200*time.Millisecond, false, want, vOf(i))
		Drive(ctx, stream[i], 1, time.Millisecond, true, want, vOf(i))
	}
	Drive(ctx, predict, cfg.Concurrency, 200*time.Millisecond, false, want, v)
	u.forget()
	rounds := newRounds(len(plain))
	// drive runs plain target i, or the predict target when i is len(plain), and records the run.
	drive := func(i, concurrency int, d time.Duration, into [][]Result, predictInto *[]Result) {
		if i == len(plain) {
			*predictInto = append(*predictInto, Drive(ctx, predict, concurrency, d, false, want, v))
			return
		}
		into[i] = append(into[i], Drive(ctx, plain[i], concurrency, d, false, want, vOf(i)))
	}
	// The rows held to a ratio of one target's throughput run beside it (rounds.bracket), not in the rotation.
	// The refused-try row runs beside the one-target route too, as the check that this measure sees a cost.
	rounds.bracket = []int{routing.two, routing.failover}
	if tracedAt >= 0 {
		rounds.bracket = append(rounds.bracket, tracedAt)
	}
	for r := range cfg.Rounds {
		cfg.progress("round %d of %d", r+1, cfg.Rounds)
		// Rotating the order keeps any drift of the machine within a round from favouring one target.
		for k := range len(plain) + 1 {
			drive((k+r)%(len(plain)+1), 1, cfg.LatencyDuration, rounds.latency, &rounds.predictLatency)
		}
		for k := range len(plain) + 1 {
			if i := (k + r) % (len(plain) + 1); !slices.Contains(rounds.bracket, i) {
				drive(i, cfg.Concurrency, cfg.ThroughputDuration, rounds.throughput, &rounds.predictThroughput)
			}
		}
		// Each target held to a ratio runs together with the one-target route, half the workers each, for twice a
		// throughput run: both see the same moments of the machine.
		long, half := 2*cfg.ThroughputDuration, max(cfg.Concurrency/2, 1)
		for j, i := range rounds.bracket {
			var control, row Result
			var both sync.WaitGroup
			both.Go(func() { control = Drive(ctx, plain[embedded], half, long, false, want, v) })
			both.Go(func() { row = Drive(ctx, plain[i], half, long, false, want, vOf(i)) })
			both.Wait()
			rounds.controls[j] = append(rounds.controls[j], control)
			rounds.throughput[i] = append(rounds.throughput[i], row)
		}
		for k := range stream {
			i := (k + r) % len(stream)
			rounds.stream[i] = append(rounds.stream[i], Drive(ctx, stream[i], cfg.StreamConcurrency, cfg.StreamDuration, true, want, vOf(i)))
		}
		u.forget()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for _, t := range plain[embedded:] {
		t.CheckBilling(ctx, v)
	}
	rep.addLoad(cfg, rounds, withRedis != nil, withCluster != nil)
	rep.addPeers(cfg, rounds, peerIndex, peerNotRun, peerV)
	rep.addPredict(cfg, rounds)
	rep.addRouting(cfg, rounds, routing)
	var received int
	var receivedErr error
	if tracedRun != nil {
		received, receivedErr = tracedRun.received(ctx)
	}
	rep.addTracing(cfg, rounds, tracedAt, tracedErr, received, receivedErr)

	cfg.progress("measuring the limiter check")
	rep.addLimiter(benchLimiter())

	if cfg.SkipScale {
		rep.addScale(cfg, scaleResult{}, errSkipped)
	} else {
		cfg.progress("measuring resident memory with %d groups and %d keys", cfg.ScaleGroups, cfg.ScaleKeys)
		res, err := measureScale(ctx, cfg, cs, st.KubeconfigPath, u, v)
		rep.addScale(cfg, res, err)
	}

	if cfg.SkipPropagation {
		rep.addPropagation(cfg, propagationResult{}, errSkipped)
	} else {
		cfg.progress("measuring propagation over %d changes with %d groups", cfg.Changes, cfg.Groups)
		res, err := measurePropagation(ctx, cfg, st)
		rep.addPropagation(cfg, res, err)
	}
	rep.finish()
	return rep, nil
}

// loadStack is what every load phase runs on: the control plane with the manager (test/stack), the fake
// upstreams, and the load workspace published for them.
type loadStack struct {
	st *stack.Stack
	cs kubernetes.Interface
	u  *upstreams
	ws *loadWorkspace
}

// startLoadStack starts a loadStack; stop ends it.
func startLoadStack(ctx context.Context, cfg Config) (*loadStack, error) {
	st, err := stack.Start(ctx, stack.Options{Namespace: "loadbench", Gatewayd: gatewayd.Options{Namespaces: []string{"loadbench"}}})
	if err != nil {
		return nil, fmt.Errorf("failed to start the stack: %w", err)
	}
	ls := &loadStack{st: st}
	if ls.cs, err = kubernetes.NewForConfig(st.Config); err != nil {
		return nil, errors.Join(fmt.Errorf("failed to build a clientset: %w", err), ls.stop())
	}
	if ls.u, err = startUpstreams(cfg); err != nil {
		return nil, errors.Join(err, ls.stop())
	}
	if ls.ws, err = publishLoadWorkspace(ctx, ls.cs, ls.u); err != nil {
		return nil, errors.Join(err, ls.stop())
	}
	return ls, nil
}

func (ls *loadStack) stop() error {
	if ls.u != nil {
		ls.u.close()
	}
	return ls.st.Stop()
}

// ownProcessTarget is gatewayd in its own process (c) as a target, called with the load workspace's key.
func ownProcessTarget(c *child, ws *loadWorkspace) *Target {
	return &Target{Name: ownProcess, URL: c.base + "/v1/chat/completions", Auth: "Api-Key " + ws.key, Model: plainSlug, StreamModel: streamSlug}
}

// errSkipped marks a phase left out by a flag rather than one that failed.
var errSkipped = errors.New("skipped by flag")

// rounds holds every run, indexed by target then round.
type rounds struct {
	latency, throughput, stream [][]Result
	// predictLatency and predictThroughput are the predict target's runs, one per round.
	predictLatency, predictThroughput []Result
	// bracket are the targets whose throughput is held to a ratio of one target's: in each round, after the
	// rotation, each runs at the same time as the one-target route, half the workers each (controls[j] holds the
	// one-target runs made beside bracket[j]), so that whatever else the machine does in those seconds falls on
	// both alike (docs/benchmarks.md "Side-by-side load harness").
	bracket  []int
	controls [][]Result
}

func newRounds(n int) *rounds {
	return &rounds{latency: make([][]Result, n), throughput: make([][]Result, n), stream: make([][]Result, n), controls: make([][]Result, n+1)}
}

// modeCascading is the mode of the background trees.
const modeCascading = gatewayv1.EnforcementCascading

// Override returns c with every non-zero field of o taken from o.
func (c Config) Override(o Config) Config {
	set(&c.Rounds, o.Rounds)
	set(&c.Concurrency, o.Concurrency)
	set(&c.StreamConcurrency, o.StreamConcurrency)
	set(&c.StreamDeltas, o.StreamDeltas)
	set(&c.Groups, o.Groups)
	set(&c.Changes, o.Changes)
	set(&c.ScaleGroups, o.ScaleGroups)
	set(&c.ScaleKeys, o.ScaleKeys)
	set(&c.LatencyDuration, o.LatencyDuration)
	set(&c.ThroughputDuration, o.ThroughputDuration)
	set(&c.StreamDuration, o.StreamDuration)
	set(&c.StreamDelay, o.StreamDelay)
	set(&c.ProbeInterval, o.ProbeInterval)
	set(&c.RedisServer, o.RedisServer)
	c.SkipPropagation = c.SkipPropagation || o.SkipPropagation
	c.SkipScale = c.SkipScale || o.SkipScale
	c.SkipPeers = c.SkipPeers || o.SkipPeers
	c.ServerEval = c.ServerEval || o.ServerEval
	c.Floor = c.Floor || o.Floor
	c.RedisCluster = c.RedisCluster || o.RedisCluster
	set(&c.Peers.Nginx, o.Peers.Nginx)
	set(&c.Peers.Node, o.Peers.Node)
	set(&c.Peers.PortkeyDir, o.Peers.PortkeyDir)
	set(&c.ChildCPUProfile, o.ChildCPUProfile)
	return c
}

// set overwrites *dst with v unless v is the zero value.
func set[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}
