package podlogs

import (
	"strings"
	"testing"
	"time"
)

func TestLevelOf(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"", "INFO"},
		{"Model loaded in 3.2s", "INFO"},
		{"ERROR: CUDA out of memory", "ERROR"},
		{"[warn] slow request", "WARNING"},
		{"2026/11/25 WARNING low disk", "WARNING"},
		{`{"level":"error","msg":"boom"}`, "ERROR"},
		{"level=debug msg=tick", "DEBUG"},
		{"INFO:     127.0.0.1:5000 - \"POST /predict HTTP/1.1\" 500", "INFO"},
		{"CRITICAL worker died", "ERROR"},
		{strings.Repeat("x ", 40) + "ERROR after the first 64 bytes", "INFO"},
	} {
		if got := LevelOf(tc.msg); got != tc.want {
			t.Errorf("LevelOf(%q) = %s, want %s", tc.msg, got, tc.want)
		}
	}
}

func TestParseLine(t *testing.T) {
	l, ok := ParseLine("2026-11-25T15:04:47.123456789Z ERROR boom")
	if !ok || l.Message != "ERROR boom" || l.Level != "ERROR" || !l.Time.Equal(time.Date(2026, 11, 25, 15, 4, 47, 123456789, time.UTC)) {
		t.Errorf("ParseLine = %+v, %v", l, ok)
	}
	if l, ok := ParseLine("2026-11-25T15:04:47Z"); !ok || l.Message != "" {
		t.Errorf("an empty line = %+v, %v; want kept, empty", l, ok)
	}
	if _, ok := ParseLine("no time here"); ok {
		t.Error("a line without a time was kept")
	}
}

// log is five lines a second apart from 10:00:00, lines 1 and 3 at ERROR.
const log = `2026-03-16T10:00:00Z start
2026-03-16T10:00:01Z ERROR one
garbage without a time
2026-03-16T10:00:02Z two
2026-03-16T10:00:03Z ERROR three
2026-03-16T10:00:04Z four
`

func TestScan(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 3, 16, 10, 0, s, 0, time.UTC) }
	errorsOnly := func(l Line) bool { return l.Level == "ERROR" }
	for _, tc := range []struct {
		name string
		q    Query
		want string
	}{
		{"everything", Query{Since: at(0), Until: at(9), Limit: 10}, "start,ERROR one,two,ERROR three,four"},
		{"window, both ends included", Query{Since: at(1), Until: at(3), Limit: 10}, "ERROR one,two,ERROR three"},
		{"first two", Query{Since: at(0), Until: at(9), Limit: 2}, "start,ERROR one"},
		{"last two, in time order", Query{Since: at(0), Until: at(9), Limit: 2, Newest: true}, "ERROR three,four"},
		{"last three before 10:00:03", Query{Since: at(0), Until: at(3), Limit: 3, Newest: true}, "ERROR one,two,ERROR three"},
		{"matching only", Query{Since: at(0), Until: at(9), Limit: 10, Match: errorsOnly}, "ERROR one,ERROR three"},
		{"last matching one", Query{Since: at(0), Until: at(9), Limit: 1, Newest: true, Match: errorsOnly}, "ERROR three"},
		{"none in the window", Query{Since: at(5), Until: at(9), Limit: 10}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := Scan(strings.NewReader(log), "md-v1-abc", tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range lines {
				got = append(got, l.Message)
				if l.Pod != "md-v1-abc" {
					t.Errorf("line %q has pod %q", l.Message, l.Pod)
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("lines = %q, want %q", strings.Join(got, ","), tc.want)
			}
		})
	}
}

// FuzzScan: any stream parses without a panic, and every line kept is in the window, matches, and fits the limit.
func FuzzScan(f *testing.F) {
	f.Add([]byte(log), int64(0), int64(3), uint8(2), true)
	f.Add([]byte("2026-03-16T10:00:00.5Z \x00\n\n 2026-03-16T10:00:00Z\n"), int64(-1), int64(1), uint8(1), false)
	base := time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, stream []byte, since, until int64, limit uint8, newest bool) {
		q := Query{Since: base.Add(time.Duration(since) * time.Second), Until: base.Add(time.Duration(until) * time.Second),
			Limit: int(limit%8) + 1, Newest: newest, Match: func(l Line) bool { return l.Level != "DEBUG" }}
		lines, err := Scan(strings.NewReader(string(stream)), "p", q)
		if err != nil {
			return // a line longer than the scanner's buffer
		}
		if len(lines) > q.Limit {
			t.Fatalf("%d lines, limit %d", len(lines), q.Limit)
		}
		for _, l := range lines {
			if l.Time.Before(q.Since) || l.Time.After(q.Until) || l.Level == "DEBUG" || l.Pod != "p" {
				t.Fatalf("line %+v is outside the query %+v", l, q)
			}
		}
	})
}
