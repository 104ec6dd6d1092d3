package loadbench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Markers delimit the async inference table of docs/benchmarks.md, written from the output of gatewayd/async's
// benchmarks (BenchmarkAsyncAccept, BenchmarkAsyncQueueOverhead) in the same `make bench`.
const (
	AsyncStartMarker = "<!-- async-bench:start -->"
	AsyncEndMarker   = "<!-- async-bench:end -->"
)

// AsyncTargetMs is the queue overhead target at p50 and p99.
const AsyncTargetMs = 5

// asyncStores are the sub-benchmarks of each async benchmark, in the table's column order.
var asyncStores = []struct{ sub, title string }{{"bolt", "embedded (bbolt)"}, {"redis", "Redis"}}

// BenchResult is one line of `go test -bench` output: its iterations and its metrics by unit.
type BenchResult struct {
	N       int
	Metrics map[string]float64
}

// ParseBench reads `go test -bench` output: results by benchmark name without the -GOMAXPROCS suffix
// ("BenchmarkAsyncAccept/bolt").
func ParseBench(r io.Reader) (map[string]BenchResult, error) {
	out := map[string]BenchResult{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue // a benchmark's log line, not its result
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		res := BenchResult{N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: metric %q is not a number", name, f[i])
			}
			res.Metrics[f[i+1]] = v
		}
		out[name] = res
	}
	return out, sc.Err()
}

// AsyncRun identifies the run of the async benchmarks in the table.
type AsyncRun struct {
	Command, Machine, Date, Commit string
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute load averages as the run ended.
	LoadAvg string
}

// NewAsyncRun describes a run of command on this machine, now.
func NewAsyncRun(command string) AsyncRun {
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], ", ")
		}
	}
	return AsyncRun{Command: command, Machine: machine(), Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Commit: commit(), LoadAvg: load}
}

// AsyncMarkdown is the async inference table from the benchmarks' results. Every figure must be there: a
// missing one is an error, not an empty cell.
func AsyncMarkdown(res map[string]BenchResult, run AsyncRun) (string, error) {
	// The target reads "the time from enqueue to dispatch": from the durable write's return to the model
	// receiving the call. The client's view, which adds the accept (HTTP and the durable write), is judged
	// against the same 5 ms in its own row.
	rows := []struct {
		bench, unit, figure, target string
	}{
		{"BenchmarkAsyncAccept", "accepted/s", "Accepted `async_predict` per second, one replica, 4 concurrent clients (each 201 follows the store's write)", ""},
		{"BenchmarkAsyncQueueOverhead", "commit-p50-ms", "**Queue overhead**, idle model: durable enqueue returned → model receives the call, p50 (ms)", "queue"},
		{"BenchmarkAsyncQueueOverhead", "commit-p99-ms", "the same, p99 (ms)", "queue"},
		{"BenchmarkAsyncQueueOverhead", "p50-ms", "Client sends `async_predict` → model receives the call (adds the accept), p50 (ms)", "client"},
		{"BenchmarkAsyncQueueOverhead", "p99-ms", "the same, p99 (ms)", "client"},
		{"BenchmarkAsyncQueueOverhead", "write-p50-ms", "The durable write of the accept (the store call), p50 (ms)", ""},
		{"BenchmarkAsyncQueueOverhead", "write-p99-ms", "the same, p99 (ms)", ""},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s. Date: %s. Commit: `%s`. Load average (1, 5, 15 min) as the run ended: %s.\n\n",
		run.Machine, run.Date, run.Commit, run.LoadAvg)
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", run.Command)
	b.WriteString("| Measure |")
	for _, s := range asyncStores {
		b.WriteString(" " + s.title + " |")
	}
	b.WriteString("\n|---|")
	for range asyncStores {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	iterations := map[string][]string{}
	verdicts := map[string][][]string{"queue": make([][]string, len(asyncStores)), "client": make([][]string, len(asyncStores))}
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row.figure)
		for i, s := range asyncStores {
			name := row.bench + "/" + s.sub
			r, ok := res[name]
			if !ok {
				return "", fmt.Errorf("no result of %s in the benchmark output", name)
			}
			v, ok := r.Metrics[row.unit]
			if !ok {
				return "", fmt.Errorf("%s reports no %s", name, row.unit)
			}
			if row.unit == "accepted/s" {
				fmt.Fprintf(&b, " %s |", thousands(v))
			} else {
				fmt.Fprintf(&b, " %.2f |", v)
			}
			if row.target != "" {
				verdict := "met"
				if v > AsyncTargetMs {
					verdict = "missed"
				}
				p := strings.TrimSuffix(strings.TrimPrefix(row.unit, "commit-"), "-ms")
				verdicts[row.target][i] = append(verdicts[row.target][i], fmt.Sprintf("%s at %s", verdict, p))
			}
			if len(iterations[row.bench]) < len(asyncStores) {
				iterations[row.bench] = append(iterations[row.bench], strconv.Itoa(r.N))
			}
		}
		b.WriteString("\n")
	}
	for _, t := range []struct{ key, title string }{{"queue", "**Target**: queue overhead at most %d ms at p50 and p99"},
		{"client", "Client sends → model receives, against the same %d ms"}} {
		fmt.Fprintf(&b, "| "+t.title+" |", AsyncTargetMs)
		for _, v := range verdicts[t.key] {
			fmt.Fprintf(&b, " %s |", strings.Join(v, ", "))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nIterations (embedded, Redis): %s accepts; %s sequential requests for the overhead.\n",
		strings.Join(iterations["BenchmarkAsyncAccept"], ", "), strings.Join(iterations["BenchmarkAsyncQueueOverhead"], ", "))
	return b.String(), nil
}

// thousands formats v rounded, with commas.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// WriteAsyncDocs rewrites the async inference table of the file at path from the benchmark output in results.
func WriteAsyncDocs(path, results string, run AsyncRun) error {
	f, err := os.Open(results)
	if err != nil {
		return fmt.Errorf("failed to read the async benchmark results: %w", err)
	}
	defer f.Close()
	res, err := ParseBench(f)
	if err != nil {
		return fmt.Errorf("failed to parse %s: %w", results, err)
	}
	section, err := AsyncMarkdown(res, run)
	if err != nil {
		return fmt.Errorf("%s: %w", results, err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	out, err := replaceBetween(old, AsyncStartMarker, AsyncEndMarker, section)
	if err != nil {
		return fmt.Errorf("failed to update %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
