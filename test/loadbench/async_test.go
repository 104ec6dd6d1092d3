package loadbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const asyncOutput = `goos: linux
pkg: github.com/modelgate/modelgate/gatewayd/async
BenchmarkAsyncAccept/bolt-2         	    2000	    2049000 ns/op	       488.0 accepted/s
BenchmarkAsyncAccept/redis-2        	    2000	     229000 ns/op	      4365 accepted/s
    bench_test.go:12: a log line of a benchmark
BenchmarkAsyncQueueOverhead/bolt-2  	    2000	    1521148 ns/op	         0.2060 commit-p50-ms	         2.354 commit-p99-ms	         1.395 p50-ms	        11.12 p99-ms	         0.9 write-p50-ms	  9.5 write-p99-ms
BenchmarkAsyncQueueOverhead/redis-2 	    2000	     921148 ns/op	         0.1 commit-p50-ms	         0.9 commit-p99-ms	         0.54 p50-ms	        1.7 p99-ms	         0.2 write-p50-ms	  0.6 write-p99-ms
PASS
`

func TestParseBench(t *testing.T) {
	res, err := ParseBench(strings.NewReader(asyncOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4: %v", len(res), res)
	}
	r := res["BenchmarkAsyncQueueOverhead/bolt"]
	if r.N != 2000 || r.Metrics["p99-ms"] != 11.12 || r.Metrics["commit-p50-ms"] != 0.206 {
		t.Errorf("bolt overhead %+v", r)
	}
	if _, err := ParseBench(strings.NewReader("BenchmarkX-2 10 abc ns/op\n")); err == nil {
		t.Error("a metric that is not a number was accepted")
	}
}

func TestWriteAsyncDocs(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "async.txt")
	if err := os.WriteFile(results, []byte(asyncOutput), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	before := "## Async inference\n\nHow it is measured.\n\n" + AsyncStartMarker + "\nold figures\n" + AsyncEndMarker + "\n\nWhat the figures mean.\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	run := AsyncRun{Command: "go test -bench Async ./gatewayd/async/", Machine: "m", Date: "d", Commit: "c", LoadAvg: "3.50, 2.00, 1.00"}
	if err := WriteAsyncDocs(doc, results, run); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	s := string(b)
	if strings.Contains(s, "old figures") {
		t.Errorf("the table was not rewritten:\n%s", s)
	}
	if !strings.HasPrefix(s, "## Async inference\n\nHow it is measured.\n\n"+AsyncStartMarker) || !strings.HasSuffix(s, AsyncEndMarker+"\n\nWhat the figures mean.\n") {
		t.Errorf("text outside the markers changed:\n%s", s)
	}
	for _, want := range []string{
		"| Accepted `async_predict` per second, one replica, 4 concurrent clients (each 201 follows the store's write) | 488 | 4,365 |",
		"durable enqueue returned → model receives the call, p50 (ms) | 0.21 | 0.10 |",
		"(adds the accept), p50 (ms) | 1.40 | 0.54 |",
		"| the same, p99 (ms) | 11.12 | 1.70 |",
		"| **Target**: queue overhead at most 5 ms at p50 and p99 | met at p50, met at p99 | met at p50, met at p99 |",
		"| Client sends → model receives, against the same 5 ms | met at p50, missed at p99 | met at p50, met at p99 |",
		"3.50, 2.00, 1.00", "go test -bench Async ./gatewayd/async/", "Iterations (embedded, Redis): 2000, 2000 accepts",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the table lacks %q:\n%s", want, s)
		}
	}

	// A run that lost a store's results refuses to write rather than leave a hole in the table.
	partial := strings.ReplaceAll(asyncOutput, "BenchmarkAsyncQueueOverhead/redis-2", "x")
	if err := os.WriteFile(results, []byte(partial), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteAsyncDocs(doc, results, run); err == nil || !strings.Contains(err.Error(), "BenchmarkAsyncQueueOverhead/redis") {
		t.Errorf("missing results: %v", err)
	}
	if after, _ := os.ReadFile(doc); string(after) != s {
		t.Error("the doc changed although the results were incomplete")
	}
}
