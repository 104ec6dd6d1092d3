package loadbench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"testing"
	"text/tabwriter"
	"time"

	gwupstream "github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/test/testutil"
)

// Verdicts of a row.
const (
	Pass   = "pass"
	Fail   = "FAIL"
	Info   = "info"
	NotRun = "not run"
)

// Row is one line of the table.
type Row struct {
	Figure, Value, Target, Verdict string
}

// Report is the outcome of a run.
type Report struct {
	Rows       []Row
	Violations Violations
	// Notes explain how figures were taken, below the table.
	Notes []string
	// Errors are the phases that failed to measure; any fails the run like a violation.
	Errors []string
	// RedisNotRun is why the Redis rows were not run, empty when they were.
	RedisNotRun string
	// RedisClusterNotRun is why the Redis Cluster rows were not run, empty when they were.
	RedisClusterNotRun string
	// Machine, Date, Commit and Command identify the run in docs/benchmarks.md.
	Machine, Date, Commit, Command string
	quick                          bool
}

func newReport(cfg Config) *Report {
	return &Report{quick: cfg.Quick, Machine: machine(), Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Commit: commit()}
}

// Failed reports a correctness violation or a phase that could not measure: the run must exit non-zero.
func (r *Report) Failed() bool { return r.Violations.Total() > 0 || len(r.Errors) > 0 }

// Missed lists the figures that missed their target.
func (r *Report) Missed() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Verdict == Fail {
			out = append(out, row.Figure)
		}
	}
	return out
}

// Row returns the row whose figure starts with prefix.
func (r *Report) Row(prefix string) (Row, bool) {
	for _, row := range r.Rows {
		if strings.HasPrefix(row.Figure, prefix) {
			return row, true
		}
	}
	return Row{}, false
}

func (r *Report) add(figure, value, target string, ok bool) {
	verdict := Fail
	if ok {
		verdict = Pass
	}
	r.Rows = append(r.Rows, Row{figure, value, target, verdict})
}

func (r *Report) info(figure, value string) { r.Rows = append(r.Rows, Row{figure, value, "", Info}) }

func (r *Report) notRun(figure, target, why string) {
	r.Rows = append(r.Rows, Row{figure, "not run: " + why, target, NotRun})
}

// failed records a phase that could not measure, unless a flag skipped it.
func (r *Report) failed(figure, target string, err error) {
	if !errors.Is(err, errSkipped) {
		r.Errors = append(r.Errors, figure+": "+err.Error())
	}
	r.notRun(figure, target, err.Error())
}

// Target indexes in rounds: the order Run builds its target lists in.
const (
	direct = iota
	proxy
	embedded
	withRedis
	// withCluster is there only when withRedis is.
	withCluster
)

// throughputRatio is the median over rounds of target i's throughput divided by target of's in the same round.
func (rs *rounds) throughputRatio(i, of int) float64 {
	return perRound(rs.throughput, func(round []Result) float64 { return round[i].Throughput() / round[of].Throughput() })
}

// bracketedRatios are, one per round, target i's throughput divided by that of the one-target route driven at
// the same time; i must be in rs.bracket.
func (rs *rounds) bracketedRatios(i int) []float64 {
	j := slices.Index(rs.bracket, i)
	var xs []float64
	for r, run := range rs.throughput[i] {
		xs = append(xs, run.Throughput()/rs.controls[j][r].Throughput())
	}
	return xs
}

// addBracketed reports a bracketed row against its target (at least min).
func (r *Report) addBracketed(rs *rounds, i int, figure string, min float64) {
	x, shown := rs.bracketed(i)
	r.add(figure, shown, fmt.Sprintf("≥ %.2f", min), x >= min)
}

// bracketed is target i's bracketed ratio, the median over rounds, and that figure shown with each round's ratio
// beside it, so a reader sees the spread the median comes from.
func (rs *rounds) bracketed(i int) (float64, string) {
	xs := rs.bracketedRatios(i)
	x := median(xs)
	each := make([]string, len(xs))
	for k, v := range xs {
		each[k] = fmt.Sprintf("%.2f", v)
	}
	return x, fmt.Sprintf("%.2f (rounds: %s)", x, strings.Join(each, " "))
}

// rate is the median over rounds of target i's throughput, in calls a second.
func (rs *rounds) rate(i int) float64 {
	return perRound(rs.throughput, func(round []Result) float64 { return round[i].Throughput() })
}

// perRound applies f to each round and returns the median; f gets the runs of every target in that round.
func perRound(rs [][]Result, f func(round []Result) float64) float64 {
	var xs []float64
	for r := range rs[0] {
		round := make([]Result, len(rs))
		for i := range rs {
			round[i] = rs[i][r]
		}
		xs = append(xs, f(round))
	}
	return median(xs)
}

func p(q float64) func(r Result) time.Duration {
	return func(r Result) time.Duration { return testutil.Percentile(r.Latencies, q) }
}

func us(d float64) string { return fmt.Sprintf("%+.0f µs", d/1e3) }

func (r *Report) addLoad(cfg Config, rs *rounds, redis, cluster bool) {
	lat := func(i int, q float64) func([]Result) float64 {
		return func(round []Result) float64 { return float64(p(q)(round[i])) }
	}
	added := func(i int, q float64) func([]Result) float64 {
		return func(round []Result) float64 { return float64(p(q)(round[i]) - p(q)(round[direct])) }
	}
	a50 := perRound(rs.latency, added(embedded, 0.50))
	a99 := perRound(rs.latency, added(embedded, 0.99))
	r.add("added latency p50, concurrency 1 (gatewayd − direct)", us(a50), "≤ +100 µs", a50 <= 100e3)
	r.add("added latency p99, concurrency 1 (gatewayd − direct)", us(a99), "≤ +1 ms", a99 <= 1e6)
	r.info("latency p50 / p99, concurrency 1: direct", fmt.Sprintf("%.0f / %.0f µs", perRound(rs.latency, lat(direct, .5))/1e3, perRound(rs.latency, lat(direct, .99))/1e3))
	r.info("added latency p50 / p99, concurrency 1: bare proxy", us(perRound(rs.latency, added(proxy, .5)))+" / "+us(perRound(rs.latency, added(proxy, .99))))

	gp := rs.throughputRatio(embedded, proxy)
	c := cfg.Concurrency
	r.add(fmt.Sprintf("throughput gatewayd ÷ bare proxy, concurrency %d", c), fmt.Sprintf("%.2f", gp), "≥ 0.80", gp >= 0.80)
	r.info(fmt.Sprintf("throughput gatewayd ÷ direct, concurrency %d", c), fmt.Sprintf("%.2f", rs.throughputRatio(embedded, direct)))
	r.info(fmt.Sprintf("throughput direct / bare proxy / gatewayd, concurrency %d", c),
		fmt.Sprintf("%.0f / %.0f / %.0f req/s", rs.rate(direct), rs.rate(proxy), rs.rate(embedded)))

	st := func(i int, f func(Result) time.Duration) func([]Result) float64 {
		return func(round []Result) float64 { return float64(f(round[i]) - f(round[direct])) }
	}
	ttft := func(r Result) time.Duration { return testutil.Percentile(r.TTFT, .5) }
	gap := func(r Result) time.Duration { return testutil.Percentile(r.Gaps, .99) }
	growth := func(r Result) time.Duration { return testutil.Percentile(r.GapGrowth, .99) }
	at := perRound(rs.stream, st(embedded, ttft))
	ag := perRound(rs.stream, st(embedded, growth))
	r.add("added time to first token p50, streaming (gatewayd − direct)", us(at), "≤ +1 ms", at <= 1e6)
	r.add("added p99 gap between chunks, streaming (gatewayd − direct)", us(ag), "≤ +200 µs", ag <= 200e3)
	// each is f per target, direct / bare proxy / gatewayd.
	each := func(f func(Result) time.Duration) string {
		var out []string
		for _, i := range []int{direct, proxy, embedded} {
			out = append(out, fmt.Sprintf("%.0f", perRound(rs.stream, func(round []Result) float64 { return float64(f(round[i])) })/1e3))
		}
		return strings.Join(out, " / ") + " µs"
	}
	r.info("p99 growth of a chunk gap on the way, streaming: direct / bare proxy / gatewayd", each(growth))
	mid := func(r Result) time.Duration { return testutil.Percentile(r.MidGrowth, .99) }
	end := func(r Result) time.Duration { return testutil.Percentile(r.EndGrowth, .5) }
	r.info("p99 gap growth mid-stream (into content chunks before the last): direct / bare proxy / gatewayd; gatewayd − direct",
		each(mid)+"; "+us(perRound(rs.stream, st(embedded, mid))))
	r.info("p50 growth of the gap into each stream's last content chunk, sent with the finish and usage chunks: direct / bare proxy / gatewayd",
		each(end))
	r.info("added p99 of the raw gaps (upstream pacing jitter included), streaming: gatewayd / bare proxy",
		us(perRound(rs.stream, st(embedded, gap)))+" / "+us(perRound(rs.stream, st(proxy, gap))))
	streams, odd := 0, 0
	for i := range rs.stream {
		for _, res := range rs.stream[i] {
			for _, n := range res.Chunks {
				streams++
				if n != cfg.StreamDeltas+2 {
					odd++
				}
			}
		}
	}
	r.add("chunks per stream equal to the upstream's (every target)",
		fmt.Sprintf("%d of %d streams had %d chunks", streams-odd, streams, cfg.StreamDeltas+2), "all", odd == 0 && streams > 0)
	r.info("added TTFT p50 / p99 gap growth, streaming: bare proxy", us(perRound(rs.stream, st(proxy, ttft)))+" / "+us(perRound(rs.stream, st(proxy, growth))))

	redisFigure := fmt.Sprintf("throughput gatewayd+Redis ÷ gatewayd embedded, concurrency %d", c)
	if !redis {
		r.notRun(redisFigure, "≥ 0.70", r.RedisNotRun)
		r.notRun("added latency p50, concurrency 1 (gatewayd+Redis − direct)", "", r.RedisNotRun)
		return
	}
	rr := rs.throughputRatio(withRedis, embedded)
	r.add(redisFigure, fmt.Sprintf("%.2f", rr), "≥ 0.70", rr >= 0.70)
	r.info("added latency p50, concurrency 1 (gatewayd+Redis − direct)", us(perRound(rs.latency, added(withRedis, .5))))

	clusterFigure := fmt.Sprintf("throughput gatewayd+Redis Cluster ÷ gatewayd+Redis standalone, concurrency %d", c)
	if !cluster {
		r.notRun(clusterFigure, "≥ 0.90", r.RedisClusterNotRun)
		return
	}
	cr := rs.throughputRatio(withCluster, withRedis)
	r.add(clusterFigure, fmt.Sprintf("%.2f", cr), "≥ 0.90", cr >= 0.90)
	r.info(fmt.Sprintf("throughput gatewayd+Redis standalone / Cluster, concurrency %d", c),
		fmt.Sprintf("%.0f / %.0f req/s", rs.rate(withRedis), rs.rate(withCluster)))
	r.info("added latency p50, concurrency 1 (gatewayd+Redis Cluster − direct)", us(perRound(rs.latency, added(withCluster, .5))))
}

func (r *Report) addLimiter(res testing.BenchmarkResult) {
	ns := float64(res.T.Nanoseconds()) / float64(max(res.N, 1))
	allocs := res.AllocsPerOp()
	r.add("limiter check, 5-level CASCADING chain (30 buckets, in memory)", fmt.Sprintf("%.0f ns/op, %d allocs/op", ns, allocs),
		"≤ 1 µs/op, 0 allocs", ns <= 1000 && allocs == 0)
}

func (r *Report) addScale(cfg Config, res scaleResult, err error) {
	figure := fmt.Sprintf("resident memory of gatewayd, %d groups and %d keys", cfg.ScaleGroups, cfg.ScaleKeys)
	if err != nil {
		r.failed(figure, "≤ 300 MiB", err)
		return
	}
	mib := float64(res.RSS) / (1 << 20)
	r.add(figure, fmt.Sprintf("%.0f MiB (peak %.0f MiB)", mib, float64(res.Peak)/(1<<20)), "≤ 300 MiB", mib <= 300)
	r.Notes = append(r.Notes, fmt.Sprintf("Resident memory is VmRSS of a separate gatewayd process %s after its snapshot "+
		"(%d groups in 3-level trees, %d keys, %.1f MiB gzip'd in %d ConfigMaps) was loaded and a key of it answered; "+
		"peak is VmHWM. It runs, as gatewayd in its own process does, with the chart's GOGC=%s and GOMEMLIMIT=%s unless "+
		"the harness's environment sets them.", res.Settle, cfg.ScaleGroups, cfg.ScaleKeys, float64(res.SnapshotBytes)/(1<<20), res.ConfigMaps,
		chartGC["GOGC"], chartGC["GOMEMLIMIT"]))
}

func (r *Report) addPropagation(cfg Config, res propagationResult, err error) {
	figure := fmt.Sprintf("propagation of a limit change p99, %d groups", cfg.Groups)
	if err != nil {
		r.failed(figure, "≤ 1 s", err)
		return
	}
	p50, p99 := testutil.Percentile(res.Latencies, .5), testutil.Percentile(res.Latencies, .99)
	r.info(fmt.Sprintf("propagation of a limit change p50, %d groups", res.Groups), p50.Round(time.Millisecond).String())
	r.add(fmt.Sprintf("propagation of a limit change p99, %d groups (%d changes)", res.Groups, len(res.Latencies)),
		p99.Round(time.Millisecond).String(), "≤ 1 s", p99 <= time.Second && res.TimedOut == 0)
	if res.TimedOut > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d limit changes were not enforced within %s.", res.TimedOut, changeTimeout))
	}
	r.Notes = append(r.Notes, res.Notes...)
}

func (r *Report) finish() {
	v := &r.Violations
	r.add("correctness violations (non-200, 429, usage ≠ upstream's, chunk count, charged or billed ≠ answered)",
		fmt.Sprintf("%d (%s)", v.Total(), v.String()), "0", v.Total() == 0)
	r.Notes = append(r.Notes,
		"Every figure is taken per round, with all targets driven in that round in rotating order, and the table shows the median over rounds.",
		"Targets: direct = the fake upstream; bare proxy = httputil.ReverseProxy; gatewayd = federated-key auth, "+
			"a 3-level CASCADING tree with REQUEST and TOKEN limits per SECOND, MINUTE and DAY at every level (never triggered), metrics, token settling "+
			"and billing events, on the embedded store (bbolt) as cmd/gatewayd defaults to; gatewayd+Redis = the same on redis-server (limits and billing events in Redis).",
		fmt.Sprintf("The bare proxy and gatewayd both reach the upstream on gatewayd/upstream.NewTransport(): plain HTTP on pooled connections (up to %d idle per host) in the caller's goroutine, net/http's writer and parser without http.Transport's two goroutines per connection.", gwupstream.IdleConnsPerHost),
		"The load generator, the upstreams, the proxies and the gatewayd targets share one process and the machine's cores.",
		"Chunk gaps: the paced upstream stamps each chunk with the time it writes it. For two consecutive chunks, the gap at the "+
			"client minus the gap between their stamps is what the path added to that gap; a proxy that batches chunks shows up there at once "+
			"(one that holds every chunk back by the same time shows up in the time to first token). "+
			"The p99 of that growth is taken per target, and the gap row subtracts direct's. The raw gaps also carry the upstream's "+
			"own timer jitter (20 ms sleeps that wake up to a millisecond late), which differs from one target's turn to the next "+
			"and swamped the path's share; they are kept as an info row. "+
			"Streaming workers start 20 ms ÷ their number apart, as independent clients would: started together they stay in step, "+
			"and every chunk of every stream, and every stream's end with the next one's start, reached the targets in one burst per "+
			"20 ms whose queueing set every target's tail. Each stream's last content chunk is one gap in 65, more than 1%, and "+
			"leaves the upstream with the finish and usage chunks and [DONE]; the mid-stream rows leave it out.")
	if r.quick {
		r.Notes = append(r.Notes, "QUICK MODE: small counts; these figures show that the harness works, not how fast gatewayd is.")
	}
}

// Print writes the table and the notes.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tvalue\ttarget\tpass/fail")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Figure, row.Value, row.Target, row.Verdict)
	}
	_ = tw.Flush()
	for _, e := range r.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	for _, ex := range r.Violations.Examples() {
		fmt.Fprintln(w, "violation:", ex)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// Markdown renders the results section of docs/benchmarks.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s. Date: %s. Commit: `%s`.\n\n", r.Machine, r.Date, r.Commit)
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", r.Command)
	b.WriteString("| figure | value | target | pass/fail |\n|---|---|---|---|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.Figure, strings.ReplaceAll(row.Value, "|", "/"), row.Target, row.Verdict)
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// Markers delimit the section of docs/benchmarks.md that the harness owns.
const (
	StartMarker = "<!-- loadbench:start -->"
	EndMarker   = "<!-- loadbench:end -->"
)

// WriteDocs replaces what lies between the markers of the file at path with the report, keeping the rest.
func (r *Report) WriteDocs(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	out, err := replaceBetween(old, StartMarker, EndMarker, r.Markdown())
	if err != nil {
		return fmt.Errorf("failed to update %s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}

// replaceBetween puts section between the markers start and end of doc, keeping the rest: the one way the
// harness rewrites a section of docs/benchmarks.md.
func replaceBetween(doc []byte, start, end, section string) ([]byte, error) {
	i := bytes.Index(doc, []byte(start))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("markers %s and %s not found in order", start, end)
	}
	var b bytes.Buffer
	b.Write(doc[:i+len(start)])
	b.WriteString("\n")
	b.WriteString(section)
	b.Write(doc[j:])
	return b.Bytes(), nil
}

// machine is "<model name> × <nproc>, <go version>".
func machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, nproc %d, %s %s/%s", model, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if d, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(d)) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// addPredict reports the /production/predict route: its added latency against direct, and its throughput
// against the bare proxy, each next to the OpenAI route's figure of the same rounds. Target: within 10% of the
// OpenAI route's own figures.
func (r *Report) addPredict(cfg Config, rs *rounds) {
	// withPredict gives f each round's runs of every plain target and the predict run of that round.
	withPredict := func(plain [][]Result, pred []Result, f func(round []Result, pred Result) float64) float64 {
		var xs []float64
		for i := range pred {
			round := make([]Result, len(plain))
			for j := range plain {
				round[j] = plain[j][i]
			}
			xs = append(xs, f(round, pred[i]))
		}
		return median(xs)
	}
	added := func(q float64, of func(round []Result, pred Result) Result) float64 {
		return withPredict(rs.latency, rs.predictLatency, func(round []Result, pred Result) float64 {
			return float64(p(q)(of(round, pred)) - p(q)(round[direct]))
		})
	}
	predict := func(_ []Result, pred Result) Result { return pred }
	openAI := func(round []Result, _ Result) Result { return round[embedded] }
	p50, p99 := added(.50, predict), added(.99, predict)
	o50, o99 := added(.50, openAI), added(.99, openAI)
	// Within 10% of the OpenAI route's added latency (of its size: on a busy machine a round's difference can be
	// negative); a microsecond of slack keeps a figure of a few µs from failing on rounding.
	within := func(x, of float64) bool { return x <= of+0.10*math.Abs(of)+1e3 }
	r.add("added latency p50, concurrency 1 (/production/predict − direct)", us(p50), fmt.Sprintf("≤ OpenAI route's %s + 10%%", us(o50)), within(p50, o50))
	r.add("added latency p99, concurrency 1 (/production/predict − direct)", us(p99), fmt.Sprintf("≤ OpenAI route's %s + 10%%", us(o99)), within(p99, o99))
	c := cfg.Concurrency
	pp := withPredict(rs.throughput, rs.predictThroughput, func(round []Result, pred Result) float64 {
		return pred.Throughput() / round[proxy].Throughput()
	})
	op := withPredict(rs.throughput, rs.predictThroughput, func(round []Result, _ Result) float64 {
		return round[embedded].Throughput() / round[proxy].Throughput()
	})
	po := withPredict(rs.throughput, rs.predictThroughput, func(round []Result, pred Result) float64 {
		return pred.Throughput() / round[embedded].Throughput()
	})
	r.add(fmt.Sprintf("throughput /production/predict ÷ bare proxy, concurrency %d", c), fmt.Sprintf("%.2f (OpenAI route: %.2f)", pp, op),
		"≥ 0.90 × OpenAI route's", pp >= 0.90*op)
	r.info(fmt.Sprintf("throughput /production/predict ÷ OpenAI route, concurrency %d", c), fmt.Sprintf("%.2f", po))
	r.info(fmt.Sprintf("throughput /production/predict, concurrency %d", c), fmt.Sprintf("%.0f req/s",
		withPredict(rs.throughput, rs.predictThroughput, func(_ []Result, pred Result) float64 { return pred.Throughput() })))
	cpu := func(of func(round []Result, pred Result) Result) float64 {
		return withPredict(rs.throughput, rs.predictThroughput, func(round []Result, pred Result) float64 {
			return float64(of(round, pred).CPUPerRequest())
		})
	}
	r.info(fmt.Sprintf("CPU per call, concurrency %d (whole process): direct / bare proxy / OpenAI route / /production/predict", c),
		fmt.Sprintf("%.0f / %.0f / %.0f / %.0f µs", cpu(func(round []Result, _ Result) Result { return round[direct] })/1e3,
			cpu(func(round []Result, _ Result) Result { return round[proxy] })/1e3, cpu(openAI)/1e3, cpu(predict)/1e3))
	r.Notes = append(r.Notes, "/production/predict: a WORKSPACE_INVOKE key calls the production environment of a model whose url deployment is the zero-delay upstream with predict path /chat/completions, so the call carries the OpenAI target's body to the same server and the answer (usage included, checked) streams back unchanged. It pays for workspace-key auth, authz, the route step, the request log line and the forward; predict has no limits and no token accounting. Its runs take a place in each round's rotation of the plain targets, and each figure is taken against direct, the bare proxy and the OpenAI route of the same round. CPU per call is the harness process's user and system time over a throughput run divided by its calls (load generator, target and upstream together, so the difference between two targets is their own cost); on a shared machine it moves far less than the wall-time figures.")
}

// addServerEval reports gatewayd in its own process served by fasthttp (ServerEval) against nginx and against
// gatewayd on net/http, in the same rounds: information for the evaluation, never a pass or a fail.
func (r *Report) addServerEval(cfg Config, rs *rounds, index map[string]int, peerV map[int]*Violations) {
	fast, ok := index[ownProcessFastHTTP]
	if !ok {
		return
	}
	own, hasOwn := index[ownProcess]
	ngx, hasNginx := index["nginx"]
	if !hasOwn || !hasNginx {
		return
	}
	r.info(fmt.Sprintf("throughput gatewayd (own process) on fasthttp ÷ nginx; ÷ on net/http, concurrency %d", cfg.Concurrency),
		fmt.Sprintf("%.2f; %.2f (fasthttp: %.0f req/s)", rs.throughputRatio(fast, ngx), rs.throughputRatio(fast, own), rs.rate(fast)))
	p50 := func(i int) float64 {
		return perRound(rs.latency, func(round []Result) float64 { return float64(p(.5)(round[i]) - p(.5)(round[ngx])) })
	}
	r.info("added latency p50, concurrency 1, − nginx: gatewayd (own process) on fasthttp / on net/http", us(p50(fast))+" / "+us(p50(own)))
	gap := func(i int) float64 {
		return perRound(rs.stream, func(round []Result) float64 {
			return float64(testutil.Percentile(round[i].GapGrowth, .99) - testutil.Percentile(round[direct].GapGrowth, .99))
		})
	}
	r.info("added p99 gap growth between chunks, streaming, − direct: gatewayd (own process) on fasthttp / on net/http", us(gap(fast))+" / "+us(gap(own)))
	pv := peerV[fast]
	r.info("correctness violations of gatewayd (own process) on fasthttp", fmt.Sprintf("%d (%s)", pv.Total(), pv.String()))
}

// addFloor reports the floor proxies (Floor) against nginx, beside gatewayd in its own process, in the same
// rounds: information, never a pass or a fail.
func (r *Report) addFloor(cfg Config, rs *rounds, index map[string]int, peerV map[int]*Violations) {
	ngx, hasNginx := index["nginx"]
	own, hasOwn := index[ownProcess]
	if !hasNginx || !hasOwn {
		return
	}
	noted := false
	for _, server := range floors {
		name := floorName(server)
		f, ok := index[name]
		if !ok {
			continue
		}
		if !noted {
			noted = true
			r.Notes = append(r.Notes, "Floors: Go proxies in their own processes that only proxy (the body read, the call sent upstream, the answer passed back; no credential, limit, usage, billing or metrics): net/http's server with gatewayd's transport, net/http's server with fasthttp's client, and fasthttp natively (test/loadbench/floor.go). Whatever a floor costs a call, gatewayd on that server and client costs at least that.")
		}
		r.info(fmt.Sprintf("throughput %s ÷ nginx; gatewayd (own process) ÷ it, concurrency %d", name, cfg.Concurrency),
			fmt.Sprintf("%.2f; %.2f (%.0f req/s)", rs.throughputRatio(f, ngx), rs.throughputRatio(own, f), rs.rate(f)))
		p50 := perRound(rs.latency, func(round []Result) float64 { return float64(p(.5)(round[f]) - p(.5)(round[ngx])) })
		h := perRound(rs.throughput, func(round []Result) float64 { return float64(round[f].CPUPerRequest()) })
		r.info(fmt.Sprintf("added latency p50 at concurrency 1 − nginx; harness CPU per call at concurrency %d: %s", cfg.Concurrency, name),
			fmt.Sprintf("%s; %.1f µs", us(p50), h/1e3))
		pv := peerV[f]
		r.info("correctness violations of "+name, fmt.Sprintf("%d (%s)", pv.Total(), pv.String()))
	}
}

// ownProcess names the target of gatewayd in its own process, driven with the peers.
const ownProcess = "gatewayd (own process)"

// addPeers reports gatewayd against each real peer of the same rounds: throughput at the throughput run's
// concurrency, added latency at concurrency 1, time to first token and chunk-gap growth. A peer that is not
// installed has its rows marked not run with the reason; one that is installed but could not start fails the
// phase.
func (r *Report) addPeers(cfg Config, rs *rounds, index map[string]int, notRun map[string]error, peerV map[int]*Violations) {
	c := cfg.Concurrency
	type goal struct {
		name  string
		ratio float64
	}
	own, hasOwn := index[ownProcess]
	if !hasOwn && len(index) > 0 {
		r.notRun("throughput gatewayd (own process) ÷ nginx", "", fmt.Sprint(notRun[ownProcess]))
	}
	defer r.addServerEval(cfg, rs, index, peerV)
	defer r.addFloor(cfg, rs, index, peerV)
	for _, g := range []goal{{"nginx", 0.90}, {"Portkey", 4}} {
		tput := fmt.Sprintf("throughput gatewayd ÷ %s, concurrency %d", g.name, c)
		lat := fmt.Sprintf("added latency p50 / p99, concurrency 1: %s (gatewayd: see above)", g.name)
		strm := fmt.Sprintf("added TTFT p50 / p99 gap growth / mid-stream p99 gap growth, streaming: %s", g.name)
		i, ok := index[g.name]
		if !ok {
			err := notRun[g.name]
			if err == nil {
				err = errors.New("not started")
			}
			why := err.Error()
			if errors.Is(err, errNotInstalled) || errors.Is(err, errSkipped) {
				r.notRun(tput, fmt.Sprintf("≥ %.2f", g.ratio), why)
			} else {
				r.failed(tput, fmt.Sprintf("≥ %.2f", g.ratio), err)
			}
			r.notRun(lat, "", why)
			r.notRun(strm, "", why)
			if g.name == "nginx" {
				r.notRun("added latency p50, gatewayd − nginx", "≤ +50 µs", why)
			}
			continue
		}
		ratio, rps := rs.throughputRatio(embedded, i), rs.rate(i)
		r.add(tput, fmt.Sprintf("%.2f (%s: %.0f req/s)", ratio, g.name, rps), fmt.Sprintf("≥ %.2f", g.ratio), ratio >= g.ratio)
		if hasOwn {
			// The same ratio with gatewayd in its own process, as the peer is: the like-for-like figure.
			o, orps := rs.throughputRatio(own, i), rs.rate(own)
			r.add(fmt.Sprintf("throughput gatewayd (own process) ÷ %s, concurrency %d", g.name, c),
				fmt.Sprintf("%.2f (gatewayd: %.0f req/s)", o, orps), fmt.Sprintf("≥ %.2f", g.ratio), o >= g.ratio)
			if g.name == "nginx" {
				// The harness's own CPU per call (load generator and upstreams; both proxies are other
				// processes): what the rest of the machine spends on a call to each, which the ratio shares.
				h := func(i int) float64 {
					return perRound(rs.throughput, func(round []Result) float64 { return float64(round[i].CPUPerRequest()) })
				}
				r.info(fmt.Sprintf("harness CPU per call (load generator and upstreams), concurrency %d: nginx / gatewayd (own process)", c),
					fmt.Sprintf("%.1f / %.1f µs", h(i)/1e3, h(own)/1e3))
			}
		}
		added := func(q float64) float64 {
			return perRound(rs.latency, func(round []Result) float64 { return float64(p(q)(round[i]) - p(q)(round[direct])) })
		}
		r.info(lat, us(added(.5))+" / "+us(added(.99)))
		if g.name == "nginx" {
			d := perRound(rs.latency, func(round []Result) float64 { return float64(p(.5)(round[embedded]) - p(.5)(round[i])) })
			r.add("added latency p50, gatewayd − nginx", us(d), "≤ +50 µs", d <= 50e3)
			if hasOwn {
				d := perRound(rs.latency, func(round []Result) float64 { return float64(p(.5)(round[own]) - p(.5)(round[i])) })
				r.add("added latency p50, gatewayd (own process) − nginx", us(d), "≤ +50 µs", d <= 50e3)
			}
		}
		st := func(f func(Result) time.Duration) float64 {
			return perRound(rs.stream, func(round []Result) float64 { return float64(f(round[i]) - f(round[direct])) })
		}
		ttft := func(r Result) time.Duration { return testutil.Percentile(r.TTFT, .5) }
		growth := func(r Result) time.Duration { return testutil.Percentile(r.GapGrowth, .99) }
		mid := func(r Result) time.Duration { return testutil.Percentile(r.MidGrowth, .99) }
		served := 0
		for _, res := range rs.stream[i] {
			served += res.Requests
		}
		if served == 0 {
			r.info(strm, "no stream completed (see the violations row)")
		} else {
			r.info(strm, us(st(ttft))+" / "+us(st(growth))+" / "+us(st(mid)))
		}
		pv := peerV[i]
		ok = pv.Total() == 0
		verdict := Pass
		if !ok {
			verdict = Info
		}
		value := fmt.Sprintf("%d (%s)", pv.Total(), pv.String())
		if ex := pv.Examples(); len(ex) > 0 {
			value += "; first: " + ex[0]
		}
		// A peer's own failures do not fail gatewayd's run: the row shows them; 0 is what the checks expect.
		r.Rows = append(r.Rows, Row{fmt.Sprintf("correctness violations of %s (same checks as gatewayd's)", g.name), value, "0 (info for a peer)", verdict})
	}
	if len(index) > 0 {
		r.Notes = append(r.Notes, "Peers: nginx is Debian's, two workers, upstream keepalive 128 over HTTP/1.1, proxy_buffering and "+
			"proxy_request_buffering off, no access log, run as nobody with its own prefix on a loopback port. Portkey is "+
			"@portkey-ai/gateway pinned in test/loadbench/portkey/package-lock.json, run with node (--headless), each call naming "+
			"the fake upstream in x-portkey-provider: openai and x-portkey-custom-host. Both run as separate processes, so the "+
			"harness's CPU-per-call figures leave their cost out; the throughput ratios are wall-time ones from the same rounds. "+
			"Each peer's answers pass the same checks as gatewayd's: status 200, the upstream's content and usage in the body, "+
			"every stream's chunk count and each content chunk's text.")
		if n := os.Getenv(ChildGOMAXPROCSEnv); n != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("gatewayd in its own process ran with GOMAXPROCS=%s (%s), not Go's default of "+
				"the machine's cores.", n, ChildGOMAXPROCSEnv))
		}
	}
}

// routingTargets are the indexes, in the plain target list, of the Endpoints of several targets.
type routingTargets struct{ two, failover int }

// addRouting reports what routing across targets costs (docs/routing.md): two weighted targets against the
// one-target OpenAI route, and the latency a refused try adds to a call, each against the same round's
// one-target runs.
func (r *Report) addRouting(cfg Config, rs *rounds, at routingTargets) {
	c := cfg.Concurrency
	r.addBracketed(rs, at.two, fmt.Sprintf("throughput two weighted targets ÷ one target, concurrency %d", c), 0.95)
	_, shown := rs.bracketed(at.failover)
	r.info(fmt.Sprintf("throughput a refused try first ÷ one target, driven together, concurrency %d (the check that the measure above sees a cost)", c), shown)
	added := func(q float64) float64 {
		var xs []float64
		for i := range rs.latency[at.failover] {
			xs = append(xs, float64(p(q)(rs.latency[at.failover][i])-p(q)(rs.latency[embedded][i])))
		}
		return median(xs)
	}
	p50, p99 := added(.50), added(.99)
	r.info("added latency p50, concurrency 1 (a refused try, then the answer − one target)", us(p50))
	r.add("added latency p99, concurrency 1 (a refused try, then the answer − one target)", us(p99), "≤ +1000 µs", p99 <= 1e6)
	r.Notes = append(r.Notes, "Routing: gatewayd, two targets = an Endpoint of two targets weighted 3 to 1, both on the zero-delay upstream, so the figure is gatewayd's own cost of choosing; refused try first = an Endpoint whose priority-0 target is a loopback port nothing listens on (its cooldown never takes it out), so every call makes a refused try and then the answering one. The refused-try row takes a place in each round's latency rotation and its latency is compared with the one-target OpenAI route's of the same round; its throughput is driven beside the one-target route, as the two-target row's is, to show that this measure sees a cost; the two-target row runs after the rotation at the same time as the one-target route, half the workers each, for twice a throughput run, and its throughput is divided by the one-target route's of that run.")
}
