package loadbench

import (
	"maps"
	"testing"
)

// TestParsePerfStat reads perf stat's CSV output: counts by event, events perf could not count and comments
// left out.
func TestParsePerfStat(t *testing.T) {
	out := "# started on Fri Nov 27 16:27:04 2026\n\n" +
		"1234,,raw_syscalls:sys_enter,4000712345,100.00,,\n" +
		"200,,syscalls:sys_enter_write,4000712345,100.00,,\n" +
		"3999.75,msec,task-clock,3999750123,100.00,1.998,CPUs utilized\n" +
		"<not counted>,,syscalls:sys_enter_sendmsg,0,0.00,,\n" +
		"<not supported>,,syscalls:sys_enter_epoll_pwait,0,0.00,,\n"
	got := parsePerfStat([]byte(out))
	want := map[string]int64{"raw_syscalls:sys_enter": 1234, "syscalls:sys_enter_write": 200, "task-clock": 3999750000}
	if !maps.Equal(got, want) {
		t.Errorf("parsePerfStat = %v, want %v", got, want)
	}
}

// TestSyscallRowPerRequest divides by the run's requests, and a run without requests counts nothing.
func TestSyscallRowPerRequest(t *testing.T) {
	r := SyscallRow{Requests: 4, Total: 30}
	if got := r.PerRequest(r.Total); got != 7.5 {
		t.Errorf("PerRequest = %v, want 7.5", got)
	}
	if got := (SyscallRow{}).PerRequest(10); got != 0 {
		t.Errorf("PerRequest without requests = %v, want 0", got)
	}
}
