// Command loadbench runs the side-by-side load harness of package loadbench, prints its table, and rewrites the
// results section of docs/benchmarks.md. It exits 1 when an answer broke a correctness rule, 2 when it could
// not measure, and, with -strict, 3 when a figure missed its target.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/test/loadbench"
)

func main() {
	loadbench.ChildMain()

	quick := flag.Bool("quick", false, "Small counts: checks that the harness works; the figures mean little.")
	docs := flag.String("docs", "", "Rewrite the results section of this file (docs/benchmarks.md) between its loadbench markers.")
	strict := flag.Bool("strict", false, "Exit 3 when a figure misses its target.")
	verbose := flag.Bool("v", false, "Log the stack's components (manager, webhooks, gatewayd) to stderr; without it they are silent.")
	cpuProfile := flag.String("cpuprofile", "", "Write a CPU profile of the whole run (load generator, targets, manager) to this file.")
	memProfile := flag.String("memprofile", "", "Write an allocation profile of the whole run to this file.")
	// Sizes default to the full or the quick preset; a flag given on the command line overrides it.
	var set loadbench.Config
	flag.IntVar(&set.Rounds, "rounds", 0, "Interleaved rounds; each figure is the median over them.")
	flag.DurationVar(&set.LatencyDuration, "latency-duration", 0, "Time per target and round at concurrency 1.")
	flag.DurationVar(&set.ThroughputDuration, "throughput-duration", 0, "Time per target and round of the throughput run.")
	flag.IntVar(&set.Concurrency, "concurrency", 0, "Workers of the throughput run (full preset: 32).")
	flag.DurationVar(&set.StreamDuration, "stream-duration", 0, "Time per target and round of the streaming run.")
	flag.IntVar(&set.Groups, "groups", 0, "Background groups in the workspace during the propagation measurement (full preset: 10000).")
	flag.IntVar(&set.Changes, "changes", 0, "Limit changes timed (full preset: 50).")
	flag.IntVar(&set.ScaleGroups, "scale-groups", 0, "Groups of the memory measurement (full preset: 10000).")
	flag.IntVar(&set.ScaleKeys, "scale-keys", 0, "Keys of the memory measurement (full preset: 100000).")
	flag.BoolVar(&set.SkipPropagation, "skip-propagation", false, "Leave out the propagation measurement.")
	flag.BoolVar(&set.SkipScale, "skip-scale", false, "Leave out the memory measurement.")
	flag.StringVar(&set.RedisServer, "redis-server", "", "redis-server binary for the Redis rows; default from PATH.")
	flag.BoolVar(&set.RedisCluster, "redis-cluster", false, "Also drive gatewayd on a 6-node Redis Cluster (redis-server and redis-cli from PATH) beside gatewayd on one redis-server, and report Cluster ÷ standalone.")
	flag.BoolVar(&set.SkipPeers, "skip-peers", false, "Leave out the nginx and Portkey rows.")
	flag.BoolVar(&set.ServerEval, "server-eval", false, "Also drive gatewayd in its own process served by fasthttp, beside the peers (the server evaluation of docs/decisions.md).")
	flag.BoolVar(&set.Floor, "floor", false, "Also drive, beside the peers (and in -syscalls), the floor: a Go proxy in its own process that only proxies, on net/http with gatewayd's transport, on net/http's server with fasthttp's client, and on fasthttp natively (docs/benchmarks.md).")
	flag.StringVar(&set.ChildCPUProfile, "child-cpuprofile", "", "Write a CPU profile of gatewayd in its own process (run with the peers) to this file.")
	flag.StringVar(&set.Peers.Nginx, "nginx", "", "nginx binary of the nginx rows; default from PATH or /usr/sbin/nginx.")
	flag.StringVar(&set.Peers.Node, "node", "", "node binary that runs Portkey; default from PATH.")
	flag.StringVar(&set.Peers.PortkeyDir, "portkey-dir", "", "Directory whose node_modules holds @portkey-ai/gateway; default test/loadbench/portkey.")
	series := flag.Bool("scale-series", false, "Run only the scale series (sizes from -series-sizes) and write its table and plot.")
	seriesSizes := flag.String("series-sizes", "10000,30000,100000", "Group counts of the scale series; each group has 10 keys.")
	seriesChanges := flag.Int("series-changes", 6, "Single-group changes timed per size and layout in the scale series.")
	seriesBudget := flag.Duration("series-budget", time.Minute, "Time per size for creating the workspace through admission.")
	seriesPlot := flag.String("series-plot", "", "Write the scale series' plot (PNG) to this file.")
	shapes := flag.String("syscalls-loads", "", "With -syscalls, only these loads, comma-separated (c=1, c=<concurrency>, stream): for a -child-cpuprofile of one load alone.")
	syscalls := flag.Bool("syscalls", false, "Run only the per-call phase: perf counts the system calls of nginx and of gatewayd in its own process per request (concurrency 1, -concurrency, streaming; -throughput-duration each) and prints the table.")
	asyncResults := flag.String("async-results", "", "Only write the async inference table of -docs from this file of `go test -bench Async ./gatewayd/async/` output, then exit.")
	asyncCommand := flag.String("async-command", "", "The command that produced -async-results, quoted in the docs.")
	flag.Parse()
	if *asyncResults != "" {
		if *docs == "" {
			fmt.Fprintln(os.Stderr, "loadbench: -async-results needs -docs")
			os.Exit(2)
		}
		if err := loadbench.WriteAsyncDocs(*docs, *asyncResults, loadbench.NewAsyncRun(*asyncCommand)); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "loadbench: updated the async inference table of", *docs)
		return
	}
	cfg := loadbench.FullConfig()
	if *quick {
		cfg = loadbench.QuickConfig()
	}
	cfg = cfg.Override(set)

	// Quiet by default: stopping the stack makes the manager log cancelled reconciles, which read like failures.
	// A failure that matters fails a phase and is reported; -v shows the components' logs to find out why.
	level := zapcore.Level(zapcore.DPanicLevel)
	if *verbose {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.Level(level)))
	cfg.Log = ctrl.Log.WithName("loadbench")
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *series {
		os.Exit(runSeries(ctx, *seriesSizes, *seriesChanges, *seriesBudget, *docs, *seriesPlot))
	}
	if *syscalls {
		if *shapes != "" {
			cfg.SyscallShapes = strings.Split(*shapes, ",")
		}
		rows, err := loadbench.RunSyscalls(ctx, cfg)
		loadbench.PrintSyscalls(os.Stdout, rows)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(2)
		}
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(2)
		}
	}
	rep, err := loadbench.Run(ctx, cfg)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		if f, ferr := os.Create(*memProfile); ferr == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	if rep == nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(2)
	}
	rep.Command = strings.TrimSpace("make bench   # the harness step: loadbench " + strings.Join(os.Args[1:], " "))
	rep.Print(os.Stdout)
	if *docs != "" {
		if err := rep.WriteDocs(*docs); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "loadbench: updated", *docs)
	}
	if err != nil {
		// The figures are in; stopping what the harness started went wrong.
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(2)
	}
	switch {
	case rep.Failed():
		fmt.Fprintln(os.Stderr, "loadbench: FAILED: correctness violations:", rep.Violations.String(), "phase errors:", len(rep.Errors))
		os.Exit(1)
	case *strict && len(rep.Missed()) > 0:
		fmt.Fprintln(os.Stderr, "loadbench: missed targets:", strings.Join(rep.Missed(), "; "))
		os.Exit(3)
	}
}

// runSeries runs the scale series and writes its section of docs and its plot; it returns the exit code.
func runSeries(ctx context.Context, sizes string, changes int, budget time.Duration, docs, plotPath string) int {
	cfg := loadbench.SeriesConfig{KeysPerGroup: 10, Changes: changes, CreateBudget: budget, ChangeTimeout: 3 * time.Minute,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "loadbench: "+format+"\n", args...) }}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 100 {
			fmt.Fprintln(os.Stderr, "loadbench: -series-sizes wants group counts of at least 100:", s)
			return 2
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	var load [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &load[0], &load[1], &load[2])
	}
	start := time.Now()
	points, err := loadbench.RunSeries(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
	}
	var end [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &end[0], &end[1], &end[2])
	}
	header := fmt.Sprintf("Run: %s UTC, %s, load average %.2f at the start and %.2f at the end (2 cores shared with other work).\n\n"+
		"```sh\nmake bench-scale   # loadbench -scale-series -series-sizes %s -series-changes %d -series-budget %s\n```\n\n",
		start.UTC().Format("2006-01-02 15:04"), time.Since(start).Round(time.Second), load[0], end[0], sizes, changes, budget)
	section := loadbench.SeriesMarkdown(points, cfg, header)
	fmt.Println(section)
	if plotPath != "" && len(points) > 0 {
		if err := loadbench.WriteSeriesPlot(points, plotPath); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench: plot:", err)
			return 2
		}
	}
	if docs != "" {
		if err := loadbench.WriteSeriesDocs(docs, section); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			return 2
		}
	}
	if err != nil {
		return 2
	}
	return 0
}
