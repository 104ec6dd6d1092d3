package loadbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The per-call phase counts the system calls that nginx and gatewayd (in its own process) make per request on
// the same load, with perf's syscall tracepoints attached to their processes while the load generator drives
// them: counts, unlike times, do not move with a shared machine's load. Only the proxy's process is counted;
// the load generator and the fake upstreams run in the harness's.

// syscallGroups are the columns of the per-call table: the tracepoints of each, summed. Go's runtime and
// nginx use different calls for the same job (write and writev, epoll_pwait and epoll_wait), so each column
// groups the calls of one job.
var syscallGroups = []struct {
	name  string
	calls []string
}{
	{"write", []string{"write", "writev", "sendto", "sendmsg"}},
	{"read", []string{"read", "readv", "recvfrom", "recvmsg"}},
	{"epoll", []string{"epoll_wait", "epoll_pwait", "epoll_ctl"}},
	{"futex", []string{"futex"}},
	{"nanosleep", []string{"nanosleep"}},
}

// SyscallRow is one target's system calls per request under one load shape.
type SyscallRow struct {
	Target string
	// Shape says how it was driven: "c=1", "c=32" or "stream".
	Shape string
	// Requests is the number of requests (streams for "stream") of the run; Chunks the chunks they carried.
	Requests, Chunks int
	// Total counts every system call of the process during the run; Groups the calls of each syscallGroups entry.
	Total  int64
	Groups map[string]int64
	// CPU is the CPU time (user and kernel) the process spent during the run.
	CPU time.Duration
	// Duration is how long the load ran.
	Duration time.Duration
}

// PerRequest is n divided by the row's requests.
func (r SyscallRow) PerRequest(n int64) float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(n) / float64(r.Requests)
}

// SyscallTarget is a process to count and the target that reaches it.
type SyscallTarget struct {
	Plain, Stream *Target
	// Pids are the processes to count: nginx's master and workers, gatewayd's one process.
	Pids []int
}

// CountSyscalls drives t once per shape (concurrency 1 and concurrency for d, then streamConcurrency streams for
// d) with perf counting the system calls of t.Pids, and returns one row per shape. With only, it drives only
// the shapes named there ("c=1", "c=32", "stream").
func CountSyscalls(ctx context.Context, t SyscallTarget, concurrency, streamConcurrency int, d time.Duration, only []string, want Expect, v *Violations) ([]SyscallRow, error) {
	var rows []SyscallRow
	for _, shape := range []struct {
		name        string
		concurrency int
		stream      bool
	}{{"c=1", 1, false}, {fmt.Sprintf("c=%d", concurrency), concurrency, false}, {"stream", streamConcurrency, true}} {
		if len(only) > 0 && !slices.Contains(only, shape.name) {
			continue
		}
		target := t.Plain
		if shape.stream {
			target = t.Stream
		}
		var res Result
		counts, err := countDuring(ctx, t.Pids, func() { res = Drive(ctx, target, shape.concurrency, d, shape.stream, want, v) })
		if err != nil {
			return nil, err
		}
		row := SyscallRow{Target: target.Name, Shape: shape.name, Requests: res.Requests, Total: counts["raw_syscalls:sys_enter"], Groups: map[string]int64{}, CPU: time.Duration(counts["task-clock"]), Duration: d}
		if shape.stream {
			row.Requests = len(res.Chunks)
			for _, c := range res.Chunks {
				row.Chunks += c
			}
		}
		for _, g := range syscallGroups {
			for _, c := range g.calls {
				row.Groups[g.name] += counts["syscalls:sys_enter_"+c]
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// countDuring runs perf stat on pids while run runs and returns its counts by event.
func countDuring(ctx context.Context, pids []int, run func()) (map[string]int64, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("perf %w (Debian: apt-get install linux-perf)", errNotInstalled)
	}
	// task-clock is the CPU time the processes spent, user and kernel, in every thread.
	events := []string{"raw_syscalls:sys_enter", "task-clock"}
	for _, g := range syscallGroups {
		for _, c := range g.calls {
			events = append(events, "syscalls:sys_enter_"+c)
		}
	}
	ids := make([]string, len(pids))
	for i, p := range pids {
		ids[i] = strconv.Itoa(p)
	}
	out, err := os.CreateTemp("", "loadbench-perf-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, perf, "stat", "-x,", "-o", out.Name(), "-e", strings.Join(events, ","), "-p", strings.Join(ids, ","))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start perf: %w", err)
	}
	// perf attaches within milliseconds; the wait keeps the run's first requests inside the count.
	time.Sleep(300 * time.Millisecond)
	run()
	_ = cmd.Process.Signal(os.Interrupt)
	// perf writes its counts and then ends by the interrupt it was sent; the counts tell whether it worked.
	_ = cmd.Wait()
	b, err := io.ReadAll(out)
	if err != nil {
		return nil, err
	}
	counts := parsePerfStat(b)
	if _, ok := counts["raw_syscalls:sys_enter"]; !ok {
		return nil, fmt.Errorf("perf stat counted nothing (%s): %s", bytes.TrimSpace(b), stderr.String())
	}
	return counts, nil
}

// parsePerfStat reads perf stat's CSV output (-x,): count,unit,event,... per line; comments and events perf
// could not count are left out. A time counted in milliseconds (task-clock's "msec") is returned in nanoseconds.
func parsePerfStat(b []byte) map[string]int64 {
	counts := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[1] == "msec" {
			ms, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				continue
			}
			counts[f[2]] += int64(ms * 1e6)
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		counts[f[2]] += n
	}
	return counts
}

// processTree is pid and its children (nginx's master and its workers).
func processTree(pid int) []int {
	pids := []int{pid}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
	if err != nil {
		return pids
	}
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			pids = append(pids, c)
		}
	}
	return pids
}

// RunSyscalls starts what the per-call phase needs (the control plane, the fake upstreams, nginx, gatewayd in its
// own process, gatewayd in its own process served by fasthttp for the server evaluation, and with cfg.Floor the
// floor proxies) and counts each one's system calls per request at concurrency 1, at cfg.Concurrency and
// streaming, for cfg.ThroughputDuration each.
func RunSyscalls(ctx context.Context, cfg Config) (rows []SyscallRow, err error) {
	cfg.progress("starting the control plane (test/stack)")
	ls, err := startLoadStack(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ls.stop()) }()
	ngx, err := startNginx(ctx, cfg.Peers, ls.u)
	if err != nil {
		return nil, err
	}
	defer ngx.stop()
	c, err := startChild(ctx, ls.st.KubeconfigPath, ls.ws.ns, cfg.ChildCPUProfile)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	fc, err := startChildOn(ctx, ls.st.KubeconfigPath, ls.ws.ns, "", serverFastHTTP)
	if err != nil {
		return nil, err
	}
	defer fc.stop()
	want := expect(cfg)
	var v Violations
	targets := []SyscallTarget{
		{Plain: ngx.plain, Stream: ngx.stream, Pids: processTree(ngx.pid)},
		{Plain: ownProcessTarget(c, ls.ws), Stream: ownProcessTarget(c, ls.ws), Pids: []int{c.pid}},
		{Plain: fastHTTPTarget(fc, ls.ws), Stream: fastHTTPTarget(fc, ls.ws), Pids: []int{fc.pid}},
	}
	if cfg.Floor {
		fs, err := startFloors(ctx, ls.u)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			defer f.stop()
			targets = append(targets, SyscallTarget{Plain: f.plain, Stream: f.stream, Pids: []int{f.pid}})
		}
	}
	for _, t := range targets {
		cfg.progress("warming up %s", t.Plain.Name)
		Drive(ctx, t.Plain, cfg.Concurrency, 500*time.Millisecond, false, want, &v)
		Drive(ctx, t.Stream, 1, time.Millisecond, true, want, &v)
	}
	for _, t := range targets {
		cfg.progress("counting the system calls of %s (pids %v)", t.Plain.Name, t.Pids)
		r, err := CountSyscalls(ctx, t, cfg.Concurrency, cfg.StreamConcurrency, cfg.ThroughputDuration, cfg.SyscallShapes, want, &v)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if v.Total() > 0 {
		return rows, fmt.Errorf("correctness violations while counting: %s %v", v.String(), v.Examples())
	}
	return rows, nil
}

// PrintSyscalls writes rows as a markdown table of calls per request (per stream and per chunk when streaming).
func PrintSyscalls(w io.Writer, rows []SyscallRow) {
	fmt.Fprint(w, "| target | load | requests | requests / s | CPU µs / request | system calls / request |")
	for _, g := range syscallGroups {
		fmt.Fprintf(w, " %s / request |", g.name)
	}
	fmt.Fprintln(w, " per chunk (streams): all, write |")
	fmt.Fprint(w, "|---|---|---|---|---|---|")
	for range syscallGroups {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f | %.1f |", r.Target, r.Shape, r.Requests, float64(r.Requests)/r.Duration.Seconds(), r.PerRequest(r.CPU.Nanoseconds())/1e3, r.PerRequest(r.Total))
		for _, g := range syscallGroups {
			fmt.Fprintf(w, " %.2f |", r.PerRequest(r.Groups[g.name]))
		}
		if r.Chunks > 0 {
			fmt.Fprintf(w, " %.2f, %.2f |\n", float64(r.Total)/float64(r.Chunks), float64(r.Groups["write"])/float64(r.Chunks))
		} else {
			fmt.Fprintln(w, " |")
		}
	}
}
